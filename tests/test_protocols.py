"""The three oracles and the store serve the search through the interfaces declared in
``model/protocols.py``; a class that drifts from them fails here, not in a search."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import DATA

from pytest_maxcode.model.protocols import EvaluationStore, OracleLike
from pytest_maxcode.oracle.check import CheckConfig, Oracle
from pytest_maxcode.oracle.reference import parse_reference
from pytest_maxcode.store import Store


def test_the_local_and_ray_oracles_are_oracles(tmp_path: Path) -> None:
    from pytest_maxcode.oracle.ray_executor import RayOracle

    ref = parse_reference(str(DATA / "chain" / "ref.py"))
    for cls in (Oracle, RayOracle):
        oracle = cls(ref, CheckConfig(), tmp_path)  # constructing starts nothing
        assert isinstance(oracle, OracleLike), cls
        assert oracle.eval_key == CheckConfig().key()


def test_the_program_oracle_is_an_oracle(tmp_path: Path) -> None:
    from pytest_maxcode.oracle.program import ProgramOracle
    from pytest_maxcode.targets.program import ProgramTarget

    (tmp_path / "prog.cpp").write_text("int main() { return 0; }\n")
    (tmp_path / "cases").mkdir()
    oracle = ProgramOracle(ProgramTarget("prog", Path("prog.cpp"), Path("cases")), CheckConfig(sandbox="none"), tmp_path)
    assert isinstance(oracle, OracleLike)


def test_the_sqlite_store_is_an_evaluation_store(tmp_path: Path) -> None:
    with Store(tmp_path / "m.db") as store:
        assert isinstance(store, EvaluationStore)


def test_something_missing_a_member_is_not_an_oracle() -> None:
    class Half:
        config = CheckConfig()
        eval_key = "k"
        device = "cpu"

        def check(self, candidates: object) -> list:
            return []

    with pytest.raises(AssertionError):
        assert isinstance(Half(), OracleLike)
