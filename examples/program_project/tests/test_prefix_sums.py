"""The project's own test: the program builds and gives the expected output on the first test case."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_prefix_sums(tmp_path: Path) -> None:
    binary = tmp_path / "prefix_sums"
    subprocess.run(["g++", "-O3", "--std=c++17", str(ROOT / "src" / "prefix_sums.cpp"), "-o", str(binary)], check=True)
    cases = ROOT / "testcases" / "prefix_sums"
    got = subprocess.run([str(binary)], stdin=open(cases / "input.1.txt"), capture_output=True, text=True, check=True).stdout
    assert got.split() == (cases / "output.1.txt").read_text().split()
