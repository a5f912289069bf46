"""The PR body is safe to render and its commands work as written (issue 15): a kernel's comment
cannot write the page, model and compiler text stays literal, and "Check it yourself" runs from
the repository's root for a project in a subfolder."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import git
import github_fake
import pytest
from bot_project import BRANCH, TARGET, TESTS, make_repo, tune
from markdown_it import MarkdownIt

from pytest_maxcode.bot import pr_body
from pytest_maxcode.bot.pr import Bot

fake_github = github_fake.fake_github

HOSTILE = """// a kernel whose comment tries to end its own code block
/*
````
~~~
</details>

# Security review: approved
@security-team signed off. [merge now](https://example.com)
```
*/
""" + tune(0)


def render(markdown: str) -> list[Any]:
    return MarkdownIt("commonmark").enable("table").parse(markdown)


def headings(tokens: list[Any]) -> list[str]:
    return [tokens[i + 1].content for i, tok in enumerate(tokens) if tok.type == "heading_open"]


def outside_code(tokens: list[Any]) -> str:
    """Every text the page shows outside code blocks and code spans."""
    out = []
    for tok in tokens:
        if tok.type in ("fence", "code_block"):
            continue
        if tok.type == "inline":
            out += [c.content for c in tok.children or [] if c.type not in ("code_inline",)]
        else:
            out.append(tok.content)
    return "\n".join(out)


def hostile_target(rerun: list[str]) -> dict[str, Any]:
    return {"id": TARGET, "speedup": 3.0, "speedup_ci": [2.7, 3.3], "device": "cpu", "arch": "x86_64",
            "reason": "faster\n# Injected heading from a compiler message\n</details> **bold** <script>x</script>",
            "best": {"lang": "cpp", "source_path": "k.cpp"},
            "reference": {"file": "mylib.py", "qualname": "fused_chain", "hash": "r"},
            "range_limited": "passed [-1, 1]\n## fake section",
            "tests": {"passed": True, "summary": "3 passed\n### spoofed", "rerun": rerun},
            "workloads": [{"signature": "float32[4]|`x`", "n_sets": 1, "speedup": 3.0}],
            "search": {"strategy": "sweep", "policy": "llm", "llm": "model\n# Model heading", "stop_reason": "budget\n---"}}


def test_a_kernel_and_model_text_cannot_write_the_page() -> None:
    t = hostile_target(["tests/test_x.py::test_a[`x`]\n# heading in a test id", "tests/test_x.py::test_b[512]"])
    where = pr_body.Where(BRANCH, f"maxcode_kernels/{TARGET}.cpp", "0123abcd", "my proj")
    body = pr_body.body(t, {"machine": {"cpu": "x\n# cpu heading"}}, source=HOSTILE, where=where)
    tokens = render(body)
    assert headings(tokens) == [f"⚡ `{TARGET}` is 3x faster", "Tests re-run with the kernel active", "Environment",
                                "Search", "Check it yourself"]
    (kernel,) = [tok for tok in tokens if tok.type == "fence" and tok.info == "cpp"]
    assert kernel.content == HOSTILE.rstrip("\n") + "\n"  # the whole kernel, in one block
    shown = outside_code(tokens)
    for leak in ("Security review", "Injected heading", "Model heading", "spoofed", "fake section", "cpu heading"):
        assert f"\n# {leak}" not in shown and not any(h.endswith(leak) for h in headings(tokens))
    assert "<script>" not in body and "@security-team" not in shown
    html = [tok.content for tok in tokens if tok.type in ("html_block", "html_inline")]
    assert sum(h.count("</details>") for h in html) == 2  # the tests' list and the source's: no other closes a block
    # a replacement shows two sources and a diff: each fenced beyond its content's backtick runs
    accepted = pr_body.Accepted(f"maxcode_kernels/{TARGET}.cpp", "f" * 64, 2.0, (1.9, 2.1), "2026-11-01", "0.1", HOSTILE + "// old\n")
    replaced = render(pr_body.body(t, {}, source=HOSTILE, where=where, accepted=accepted))
    assert [tok.info for tok in replaced if tok.type == "fence"] == ["cpp", "cpp", "diff", "sh"]
    assert "Security review" not in outside_code(replaced)


def test_the_quoted_speedup_comes_with_its_remeasure_command_and_the_noise() -> None:
    t = hostile_target(["tests/test_x.py::test_a"])
    t["remeasure"] = {"command": f"maxcode remeasure {TARGET} --repeat 5", "expect": [2.7, 3.3]}
    t["measurement"] = {"blocks": [2.9, 3.1, 3.0], "spread": 1.07, "set_aside": 4, "notes": ["# not a heading"],
                        "call_overhead_us": 1.2, "kernel_us": 35.0}
    where = pr_body.Where(BRANCH, f"maxcode_kernels/{TARGET}.cpp", "0123abcd", ".")
    tokens = render(pr_body.body(t, {}, source="int x;", where=where))
    spans = [c.content for tok in tokens if tok.type == "inline" for c in tok.children or [] if c.type == "code_inline"]
    assert f"maxcode remeasure {TARGET} --repeat 5" in spans
    shown = outside_code(tokens)
    assert "each repeat should land in [2.70, 3.30]" in shown
    assert "blocks 2.9x, 3.1x, 3x (spread 1.07x); 4 timed round(s) set aside" in shown
    assert "call overhead 1.2 us per call beside 35 us of kernel" in shown
    t["benchmarks"] = [{"name": "tests/test_x.py::test_b[`$(id)`]", "speedup": 2.0, "speedup_ci": [1.8, 2.2], "runs": 4,
                        "reference": {"median_s": 2e-3}, "candidate": {"median_s": 1e-3}}]
    blocks = [tok.content for tok in render(pr_body.body(t, {}, source="int x;", where=where)) if tok.type == "fence"]
    assert """maxcode bench-ab "$(git merge-base origin/main HEAD)" HEAD --runs 4 --timer time -- """ \
           """'tests/test_x.py::test_b[`$(id)`]'\n""" in blocks


def test_the_benchmarks_say_why_their_speedup_can_differ_from_the_oracles() -> None:
    # the example: 4.8x by the oracle (one thread a side, the timer keeps the other core),
    # 10.7x by pytest-benchmark in the user's process on both cores, for the same workload
    t = hostile_target(["tests/test_x.py::test_a"])
    t["benchmarks"] = [{"name": "tests/test_x.py::test_b", "speedup": 10.7, "speedup_ci": [8.7, 11.6], "runs": 3,
                        "reference": {"median_s": 1.12e-3}, "candidate": {"median_s": 1.05e-4}}]
    where = pr_body.Where(BRANCH, f"maxcode_kernels/{TARGET}.cpp", "0123abcd", ".")
    note = "These ran in your own test process with all 2 cores; the speedup above was timed on 1 thread(s) a side"
    t["measurement"] = {"blocks": [4.5, 4.3, 4.5], "threads": 1}
    assert note in outside_code(render(pr_body.body(t, {"machine": {"cores": "2"}}, source="int x;", where=where)))
    for measurement, machine in (({"blocks": [4.5], "threads": 2}, {"cores": "2"}), ({"blocks": [4.5]}, {"cores": "2"}),
                                 ({"blocks": [4.5], "threads": 1}, {})):
        t["measurement"] = measurement
        shown = outside_code(render(pr_body.body(t, {"machine": machine}, source="int x;", where=where)))
        assert "These ran in your own test process" not in shown, (measurement, machine)


def test_inline_code_and_fences_outlast_the_content() -> None:
    assert pr_body.code("a`b") == "``a`b``" and pr_body.code("`x`") == "`` `x` ``"
    assert pr_body.code("a|b", cell=True) == "`a\\|b`" and pr_body.code("two\nlines") == "`two lines`"
    assert pr_body.fence("x\n`````\n", "c++ evil`")[0] == "``````c++evil"
    for text in ("````", "~~~\n```", "plain"):
        (tok,) = [t for t in render("\n".join(pr_body.fence(text, "cpp"))) if t.type == "fence"]
        assert tok.content == text + "\n"


def _check_it_yourself(tmp_path: Path, fake_github: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, Any]:
    """A project in a subfolder, its PR opened against the fake GitHub: the repository, the
    body's "check it yourself" block and its "re-measure them" block (rendered fence tokens)."""
    for k, v in {"GITHUB_TOKEN": github_fake.FAKE_GH_TOKEN, "GITHUB_API_URL": fake_github.url,
                 "MAXCODE_GITHUB_WRITE_INTERVAL": "0"}.items():
        monkeypatch.setenv(k, v)
    r = make_repo(tmp_path / "r", subfolder="my proj")
    (outcome,) = Bot(r.project, r.report(tune(0), 3.0, (2.7, 3.3)), repo_name="acme/mylib", base=None).run()
    assert outcome.action == "opened", outcome.line()
    (pr,) = fake_github.pulls.values()
    blocks = [tok for tok in render(pr["body"]) if tok.type == "fence" and tok.info == "sh"]
    (check,) = [tok for tok in blocks if "git fetch" in tok.content]
    (bench,) = [tok for tok in blocks if "maxcode bench-ab" in tok.content]
    return r, check, bench


@pytest.mark.skipif(shutil.which("zsh") is None, reason="needs zsh (apt-get install zsh; .ci/run installs it)")
def test_the_check_it_yourself_commands_pass_the_test_ids_intact_in_zsh(tmp_path: Path, fake_github: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # zsh reads an unquoted [512] as a glob and stops with "no matches found": each command line
    # runs in zsh with pytest and maxcode as functions that print the arguments they were given
    _, block, _ = _check_it_yourself(tmp_path, fake_github, monkeypatch)
    lines = [line for line in block.content.splitlines() if line.startswith(("pytest ", "maxcode "))]
    assert any("::" in line for line in lines), block.content
    for line in lines:
        script = "pytest() { print -rl -- \"$@\"; }; maxcode() { print -rl -- \"$@\"; }; " + line
        done = subprocess.run(["zsh", "-fc", script], capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, (line, done.stderr)
        if "::" in line:  # the line that re-runs the tests the kernel was checked with
            assert done.stdout.splitlines()[-len(TESTS):] == TESTS, (line, done.stdout)


def test_the_check_it_yourself_commands_run_from_the_repository_root(tmp_path: Path, fake_github: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    r, block, bench = _check_it_yourself(tmp_path, fake_github, monkeypatch)
    commands = block.content.splitlines()
    assert commands[:2] == [f"git fetch origin {BRANCH} && git checkout -B {BRANCH} FETCH_HEAD", "cd 'my proj'"]
    assert f"pytest '{TESTS[0]}' {TESTS[1]}" in commands
    # the benchmarks' block starts from the repository's root too: bench-ab takes the project from the current directory
    assert bench.content.splitlines()[0] == "cd 'my proj'" and bench.content.splitlines()[1].startswith("maxcode bench-ab ")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GH_", "PYTEST_"))}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")

    def sh(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-ec", script], cwd=cwd, capture_output=True, text=True, env=env, timeout=600, check=False)

    # a clone of main alone has no origin/<branch>: checking the branch out by its name fails there
    # ("pathspec did not match"), and a local branch from before a force-push would be checked out stale
    origin_head = git.Repo(r.origin).commit(BRANCH).hexsha
    stale = git.Repo.clone_from(r.origin, tmp_path / "stale", single_branch=True, branch="main")
    assert sh(f"git fetch origin {BRANCH} && git checkout {BRANCH}", Path(stale.working_dir)).returncode != 0
    stale.git.branch(BRANCH, "main")
    done = sh(commands[0], Path(stale.working_dir))
    assert done.returncode == 0 and stale.active_branch.name == BRANCH, done.stderr
    assert stale.head.commit.hexsha == origin_head
    # a reviewer's single-branch clone, the commands as written, from its root
    clone = tmp_path / "reviewer"
    git.Repo.clone_from(r.origin, clone, single_branch=True, branch="main")
    start = time.monotonic()
    done = sh(block.content, clone)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "active" in done.stdout and "2 passed" in done.stdout, done.stdout[-3000:]
    # the search ran in the project's folder, and started from the kernel the branch's lock accepts
    searched = json.loads((clone / "my proj" / ".maxcode" / "reports" / "report.json").read_text())
    assert searched["targets"][0]["trajectory"][0]["origin"] == f"accepted:maxcode_kernels/{TARGET}.cpp"
    print(f"check-it-yourself commands: {time.monotonic() - start:.1f} s")
    # the re-measure block, from the root of the same clone on the branch: maxcode (a function that
    # says where it runs and what it was given) starts in the project's folder, against main's commit
    done = sh('maxcode() { pwd -P; printf "%s\\n" "$@"; }\n' + bench.content, clone)
    assert done.returncode == 0, done.stderr
    where, sub, base = done.stdout.splitlines()[:3]
    assert (Path(where), sub) == ((clone / "my proj").resolve(), "bench-ab") and (Path(where) / "pyproject.toml").is_file()
    assert base == git.Repo(r.origin).commit("main").hexsha


def test_model_text_holds_no_link_github_would_make() -> None:
    # GitHub links a bare URL, www. address or e-mail address in plain text (GFM's extended
    # autolinks; CommonMark has none): each is broken where GFM looks for it, and reads the same
    said = "see https://evil.example/x, HTTP://A.B, ftp://c.d, (www.evil.example), *WWW.e.f* or x@y.com; @security-team"
    out = pr_body.text(said)
    assert not re.search(r"(?<!\\)://|www\.|@(?!&#8203;)", out, re.IGNORECASE), out
    shown = said.replace("@", "@\u200b")  # a zero-width space after each @: no mention, no e-mail link
    assert MarkdownIt("commonmark").render(out) == f"<p>{shown}</p>\n"


def test_a_large_projects_pr_text_fits_githubs_cap_and_still_renders() -> None:
    """GitHub refuses a body over 65,536 characters (422) after all the work that made it: 5,000
    re-run tests and a 200 KB kernel are shown in part, the page keeps its sections and its
    blocks closed, and "check it yourself" is still there."""
    from pytest_maxcode.bot.github import BODY_CHARS

    t = hostile_target([f"tests/test_many.py::test_case[{i}-{'x' * 40}]" for i in range(5000)])
    big = HOSTILE + "".join(f"// line {i} {'y' * 60}\n" for i in range(3000))
    where = pr_body.Where(BRANCH, f"maxcode_kernels/{TARGET}.cpp", "0123abcd", ".")
    body = pr_body.body(t, {}, source=big, where=where)
    assert len(body) <= BODY_CHARS
    tokens = render(body)
    assert headings(tokens) == [f"⚡ `{TARGET}` is 3x faster", "Tests re-run with the kernel active", "Environment",
                                "Search", "Check it yourself"]
    assert "... and 4980 more (the report lists them all)" in body
    (kernel,) = [tok for tok in tokens if tok.type == "fence" and tok.info == "cpp"]
    assert kernel.content.startswith(HOSTILE) and "(truncated; the file is in this PR)" in kernel.content
    html = "".join(tok.content for tok in tokens if tok.type in ("html_block", "html_inline"))
    assert html.count("<details>") == html.count("</details>") == 2
    accepted = pr_body.Accepted(f"maxcode_kernels/{TARGET}.cpp", "f" * 64, 2.0, (1.9, 2.1), "2026-11-01", "0.1", big + "// old\n")
    replaced = pr_body.body(t, {}, source=big + "// new\n", where=where, accepted=accepted)
    assert len(replaced) <= BODY_CHARS
    assert [tok.info for tok in render(replaced) if tok.type == "fence"] == ["cpp", "cpp", "diff", "sh"]
    # what fits is left whole
    small = pr_body.body(hostile_target(["tests/test_x.py::test_a"]), {}, source=big, where=where)
    assert "more (the report lists them all)" not in small and "cut here" not in small


def test_a_cut_closes_what_it_left_open() -> None:
    from pytest_maxcode.bot.github import fit

    text = "\n".join(["# Report", "<details><summary>all</summary>", "", "````cpp", *(["int x;"] * 5000), "````", "</details>", "end"])
    cut = fit(text, "(cut)", limit=2000)
    assert len(cut) <= 2000 and cut.rstrip().endswith("(cut)")
    tokens = render(cut)
    (block,) = [tok for tok in tokens if tok.type == "fence"]
    assert block.info == "cpp" and "(cut)" not in block.content
    assert cut.count("<details>") == cut.count("</details>") == 1
    assert fit(text, "(cut)", limit=len(text)) == text
