"""Training prompts: the search's own first prompt for each problem, as chat messages.

The model is trained on exactly what the search later asks it (the same system text:
task, ABI or compat interface, reference, workloads, device, reply format; the same
user message: baseline, permitted techniques, task), so a trained policy drops into
``--maxcode-policy=llm`` with nothing to translate.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import torch

from .._extras import require
from ..bench.problems import find_problems, scaled_source
from ..errors import MaxcodeError
from ..model.jsontypes import JSON
from ..oracle.check import CheckConfig, Oracle
from ..search.prompts import PromptContext, permitted_block, user_message
from ..search.state import SearchState
from .problems import RLProblem, captured_files, kernelbench_problem, target_problem

if TYPE_CHECKING:
    from .curriculum import Curriculum

_BLOCK = re.compile(r"## Techniques permitted in this stage\n.*?(?:\n\n|\Z)", re.DOTALL)
_TASK = "## Your task now"


class _Row(TypedDict):
    prompt: list[dict[str, str]]
    problem: str
    problem_id: str
    format: str
    lang: str


class DatasetRow(_Row, total=False):
    """One row of a training dataset: the columns the reward reads back (``permitted`` only when given)."""

    permitted: list[str]


def native_lang(device: str) -> str:
    return "cuda" if device == "cuda" else "cpp"


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def prompt_messages(problem: RLProblem, fmt: str = "native", lang: str | None = None, *, device: str = "cpu",
                    device_info: dict[str, Any] | None = None, workloads: list[dict[str, Any]] | None = None,
                    permitted: Sequence[str] | None = None) -> list[dict[str, str]]:
    """The search's initial request for ``problem`` as [system, user] chat messages.

    Parameters because each one is a prompt setting the search itself would use for this problem
    (format, language, device, techniques, curriculum), keyword-only.
    """
    if fmt not in ("native", "compat"):
        raise MaxcodeError(f"format {fmt!r}: expected native or compat")
    lang = lang or ("py" if fmt == "compat" else native_lang(device))
    if workloads is None:
        workloads = [{"name": w["name"], "signature": s} for w, s in zip(problem.workloads or (), problem.signatures)] or [
            {"name": "default", "signature": "the values get_inputs() in the reference returns"}
        ]
    ctx = PromptContext(
        target_id=problem.id, kind=problem.kind, reference_source=problem.source, fmt=fmt, lang=lang,
        entry=problem.entry(fmt), workloads=workloads, device=device_info or {"name": device},
        atol=problem.atol, rtol=problem.rtol,
    )
    user = user_message(ctx, SearchState(problem.id), None, "initial", (), tuple(permitted) if permitted is not None else None)
    return [{"role": "system", "content": ctx.system()}, {"role": "user", "content": user}]


def with_permitted(messages: Any, permitted: Sequence[str] | None) -> Any:
    """``messages`` whose last user message states ``permitted`` (None: no restriction)."""
    if isinstance(messages, str):
        return _restate(messages, permitted)
    out = [dict(m) for m in messages]
    for m in reversed(out):
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            m["content"] = _restate(m["content"], permitted)
            break
    return out


def _restate(text: str, permitted: Sequence[str] | None) -> str:
    text = _BLOCK.sub("", text)
    if permitted is None:
        return text
    block = permitted_block(tuple(permitted)) + "\n\n"
    at = text.rfind(_TASK)
    return text[:at] + block + text[at:] if at >= 0 else text.rstrip() + "\n\n" + block.rstrip()


def _describe(device: str, describe_device: bool) -> dict[str, Any]:
    if not describe_device:
        return {"name": device}
    # the search loop (the critics, the value scorer) loads only to describe a device: keeps start-up fast
    from ..search.loop import describe_device as describe

    return describe(device)


def _measured(problem: RLProblem, device: str) -> list[dict[str, JSON]]:
    """The output shapes and dtypes, from one run of the reference in an oracle worker (in a
    scratch folder: building a dataset leaves nothing behind)."""
    scratch = tempfile.TemporaryDirectory(prefix="maxcode-rl-")
    oracle = Oracle(problem.reference, CheckConfig(device=device, n_seeds=2), Path(scratch.name),
                    workloads=list(problem.workloads) if problem.workloads else None)
    try:
        oracle.prepare()
        sigs = dict(zip((w["name"] for w in problem.workloads or ()), problem.signatures))
        return [{
            "name": w.name,
            "signature": sigs.get(w.name, "the values get_inputs() in the reference returns"),
            "outputs": [[list(t.shape), str(t.dtype).replace("torch.", "")] for t in w.expected[0]],
        } for w in oracle.workloads]
    finally:
        oracle.close()
        scratch.cleanup()


def _rows(problems: list[tuple[RLProblem, str]], fmt: str, device: str | None, permitted: Sequence[str] | None,
          curriculum: Curriculum | None, describe_device: bool, measure: bool) -> list[DatasetRow]:
    """Rows for the datasets. Parameters because they are the dataset builders' own options passed
    through unchanged."""
    device = device or default_device()
    info = _describe(device, describe_device)
    lang = "py" if fmt == "compat" else native_lang(device)
    rows = []
    for problem, column in problems:
        allowed = permitted if permitted is not None else (curriculum.permitted(problem) if curriculum is not None else None)
        workloads = _measured(problem, device) if measure else None
        row: DatasetRow = {
            "prompt": prompt_messages(problem, fmt, lang, device=device, device_info=info, workloads=workloads, permitted=allowed),
            "problem": column,
            "problem_id": problem.id,
            "format": fmt,
            "lang": lang,
        }
        if permitted is not None:
            row["permitted"] = list(permitted)
        rows.append(row)
    return rows


def _maybe_dataset(rows: list[DatasetRow], as_dataset: bool, curriculum: Curriculum | None) -> Any:
    if not as_dataset:
        return rows
    datasets = require("datasets", "as_dataset=True")
    ds = datasets.Dataset.from_list(rows)
    return ds.with_transform(curriculum.transform) if curriculum is not None else ds


def kernelbench_dataset(root: str | Path, level: int, problems: str | None = None, scale: float = 1.0, fmt: str = "native", *,
                        device: str | None = None, permitted: Sequence[str] | None = None, curriculum: Curriculum | None = None,
                        work_dir: str | Path | None = None, describe_device: bool = True, measure: bool = False,
                        as_dataset: bool = False) -> Any:
    """One row per KernelBench problem: ``prompt`` (chat messages), ``problem`` (the file the
    reward checks against), ``problem_id``, ``format``, ``lang``, and ``permitted`` when given.

    ``scale`` resizes the problems (``bench.problems.scaled_source``); the scaled files are
    written under ``work_dir`` (default ``./.maxcode/rl/scale-<scale>``) so the oracle can load
    them. With a ``curriculum`` (and no ``permitted``), each prompt states its problem's stage;
    as a ``datasets.Dataset`` the stage is read again whenever a row is drawn.
    ``measure`` runs each reference once in a worker to state its output shapes.

    Parameters because each one is a column of the dataset or a prompt setting the search would use,
    all keyword-only with the search's defaults.
    """
    found = find_problems(Path(root).expanduser(), level, problems)
    out_dir = Path(work_dir) if work_dir is not None else Path.cwd() / ".maxcode" / "rl" / f"scale-{scale:g}"
    items: list[tuple[RLProblem, str]] = []
    for p in found:
        path = p.path.resolve()
        if scale != 1.0:
            text, _ = scaled_source(path.read_text(), scale)
            path = out_dir / f"level{level}" / p.path.name
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.is_file() or path.read_text() != text:
                path.write_text(text)
        items.append((kernelbench_problem(path), str(path)))
    rows = _rows(items, fmt, device, permitted, curriculum, describe_device, measure)
    return _maybe_dataset(rows, as_dataset, curriculum)


def targets_dataset(root: str | Path, fmt: str = "native", targets: Sequence[str] | None = None, *, device: str | None = None,
                    permitted: Sequence[str] | None = None, curriculum: Curriculum | None = None, describe_device: bool = True,
                    measure: bool = False, as_dataset: bool = False) -> Any:
    """One row per target a ``pytest --maxcode`` run captured under ``root/.maxcode/inputs/``.

    ``problem`` is the target id, which the reward resolves under its own ``root`` (give it
    the same one). The options a target declared in ``@maxcode.optimize`` (atol, rtol,
    inplace) are not recorded there, so the oracle's defaults apply.

    Parameters because each one is a prompt setting the search would use, all keyword-only with the
    search's defaults.
    """
    root = Path(root).expanduser().resolve()
    base = root / ".maxcode" / "inputs"
    ids = list(targets) if targets is not None else sorted(
        d.name for d in base.iterdir() if d.is_dir() and captured_files(root, d.name)) if base.is_dir() else []
    if not ids:
        raise MaxcodeError(f"{base}: no captured targets (run pytest --maxcode first)")
    items = [(target_problem(root, t), t) for t in ids]
    rows = _rows(items, fmt, device, permitted, curriculum, describe_device, measure)
    return _maybe_dataset(rows, as_dataset, curriculum)
