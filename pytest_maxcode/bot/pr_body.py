"""The optimization pull request's title and body: numbers a reviewer can trust, in the order
a reviewer asks for them (how much faster, measured how, is it still correct, on what, at
what cost, what is the code, how do I check it myself)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..apply import is_program
from ..report import fmt_time, md_escape, sandbox_weak

LANG_NAMES = {"cuda": "CUDA", "cpp": "C++", "py": "Python"}
FENCES = {"cuda": "cuda", "cpp": "cpp", "py": "python"}
MAX_SOURCE_CHARS = 60_000  # GitHub caps a PR body at 65536 characters


def marker(target_id: str, kernel_hash: str) -> str:
    return f"<!-- maxcode:pr target={target_id} kernel={kernel_hash} -->"


_MARKER = re.compile(r"<!-- maxcode:pr target=(?P<target>\S+) kernel=(?P<kernel>[0-9a-f]+) -->")


def parse_marker(body: str | None) -> tuple[str, str] | None:
    m = _MARKER.search(body or "")
    return (m.group("target"), m.group("kernel")) if m else None


def _device(t: Mapping[str, Any], machine: Mapping[str, Any]) -> str:
    if t.get("device") == "cuda":
        gpu = str(machine.get("gpu") or "GPU")
        return re.sub(r"^NVIDIA\s+", "", gpu).split(" ")[0] if gpu != "GPU" else gpu
    return "CPU"


def title(t: Mapping[str, Any], machine: Mapping[str, Any]) -> str:
    lang = "C++ program" if is_program(t) else LANG_NAMES.get(str((t.get("best") or {}).get("lang")), "native")
    return f"⚡ Speed up {t['id']} {t['speedup']:.3g}x ({lang}, {_device(t, machine)})"


def _what(t: Mapping[str, Any], lang: str, kernel_path: str, ref: Mapping[str, Any]) -> str:
    """The opening paragraph: what was found, how it was checked, and what the change does."""
    if is_program(t):
        return (f"pytest-maxcode rewrote the C++ program `{kernel_path}`, ran the rewrite on the program's test cases "
                f"(`{ref.get('testcases', '?')}`: each input on stdin, the output compared with the expected one; lines equal, "
                "or numbers within 1e-3), and timed both programs interleaved, test case by test case. This pull request "
                "replaces the program's source with the rewrite.")
    return (f"pytest-maxcode found a {LANG_NAMES.get(lang, lang)} kernel for `{t['id']}` (`{ref.get('file', '?')}`), "
            "checked it against the original on the inputs your tests pass it, re-ran your tests with it active, "
            f"and timed both interleaved in one process. The kernel is `{kernel_path}`; `maxcode.lock` routes calls to it "
            "for the input signatures it was checked on, and everything else still runs the original.")



def _ci(ci: Sequence[float] | None) -> str:
    return f" [{ci[0]:.3g}, {ci[1]:.3g}]" if ci else ""


def body(t: Mapping[str, Any], report: Mapping[str, Any], *, source: str, kernel_path: str, kernel_hash: str,
         branch: str) -> str:
    """The pull request's text: the speedup by workload, the warnings, the user's benchmarks and
    tests re-run, the machine, the search, the source and how to check it, in that order."""
    best = t.get("best") or {}
    lang = str(best.get("lang"))
    ref = t.get("reference") or {}
    out = [
        marker(t["id"], kernel_hash),
        f"## ⚡ `{t['id']}` is {t['speedup']:.3g}x faster",
        "",
        _what(t, lang, kernel_path, ref),
        "",
        "| workload | original | optimized | speedup (95% CI) |",
        "|---|---:|---:|---:|",
        f"| **all (geometric mean)** | {fmt_time(t.get('baseline_s'))} | {fmt_time(t.get('best_s'))} | **{t['speedup']:.3g}x**{_ci(t.get('speedup_ci'))} |",
    ]
    for w in t.get("workloads") or []:
        out.append(f"| `{w['signature']}` ({w['n_sets']} input sets) | {fmt_time(w.get('reference_s'))} | {fmt_time(w.get('candidate_s'))} | "
                   f"{w['speedup']:.3g}x{_ci(w.get('speedup_ci'))} |")
    out += ["", f"Verdict: {t.get('reason', '')}"]
    out += _warnings(t)
    out += _benchmarks(t.get("benchmarks") or [])
    out += _tests(t)
    out += _environment(t, report)
    out += _search(t)
    out += _source(t, source, kernel_path, lang)
    out += _check_it(t, branch)
    return "\n".join(out) + "\n"


def _warnings(t: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    if sandbox_weak(t.get("sandbox")):
        out += ["", f"> [!WARNING]\n> The candidates were checked without a full OS sandbox: {md_escape(str(t.get('sandbox')))}. "
                "Candidate code could reach the timer, the network and this user's files; re-check with bubblewrap installed."]
    if t.get("range_limited"):
        out += ["", f"> [!CAUTION]\n> Range-limited: {md_escape(str(t['range_limited']))}. The kernel is right on the inputs "
                "your tests pass, not on the wider or special values (NaN, inf, large magnitudes) listed as failed; "
                "this target sets `accept_range_limited`, so it is proposed anyway."]
    return out


def _benchmarks(benchmarks: Sequence[Mapping[str, Any]]) -> list[str]:
    if not benchmarks:
        return []
    runs = max((int(b.get("runs") or 1) for b in benchmarks), default=1)
    how = f"{runs} runs each, alternating" if runs > 1 else "one run each"
    out = ["", f"### Your benchmarks (pytest-benchmark, re-run with and without the kernel: {how})", "",
           "| benchmark | original (median ± sd) | optimized (median ± sd) | speedup (95% CI) | rounds |", "|---|---:|---:|---:|---:|"]
    for b in benchmarks:
        r, c = b["reference"], b["candidate"]
        out.append(f"| `{b['name']}` | {fmt_time(r['median_s'])} ± {fmt_time(r.get('stddev_s'))} | {fmt_time(c['median_s'])} ± "
                   f"{fmt_time(c.get('stddev_s'))} | {b['speedup']:.3g}x{_ci(b.get('speedup_ci'))} | {r.get('rounds', '?')} / {c.get('rounds', '?')} |")
    return out


def _tests(t: Mapping[str, Any]) -> list[str]:
    tests = t.get("tests") or {}
    rerun = tests.get("rerun") or []
    heading = "### Tests re-run with the kernel active"
    if is_program(t):
        heading = "### Test cases and tests re-run on the rewrite" if tests.get("pytest") else "### Test cases re-run on a fresh build of the rewrite"
    out = ["", heading, "",
           f"{'✅' if tests.get('passed') else '❌'} {tests.get('summary', '')}"
           + (f"; the kernel was called {tests['kernel_calls']} time(s)" if tests.get("kernel_calls") else "")]
    if rerun:
        out += ["", "<details><summary>" + f"{len(rerun)} test(s)" + "</summary>", "", *[f"- `{n}`" for n in rerun], "", "</details>"]
    return out


def _environment(t: Mapping[str, Any], report: Mapping[str, Any]) -> list[str]:
    machine = report.get("machine") or {}
    return ["", "### Environment", "",
            f"- device: {t.get('device', '?')}" + (f" ({machine['gpu']})" if machine.get("gpu") else "") + f", arch {t.get('arch', '?')}",
            f"- CPU: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores",
            f"- torch {machine.get('torch', '?')}, pytest-maxcode {report.get('tool_version', '?')}"]


def _search(t: Mapping[str, Any]) -> list[str]:
    search = t.get("search") or {}
    cands = t.get("candidates") or {}
    if not search:
        return []
    model = search.get("llm") or "no model (built-in candidates)"
    return ["", "### Search", "",
            f"- strategy `{search.get('strategy')}`, policy `{search.get('policy')}`, model {model}",
            f"- {cands.get('tried', 0)} candidate(s) tried, {cands.get('correct', 0)} correct, {cands.get('faster', 0)} faster; "
            f"stopped because {search.get('stop_reason', '?')}",
            f"- {search.get('llm_calls', 0)} LLM call(s), {search.get('tokens', 0)} tokens, ${float(search.get('cost_usd') or 0):.4f}"]


def _source(t: Mapping[str, Any], source: str, kernel_path: str, lang: str) -> list[str]:
    shown = source if len(source) <= MAX_SOURCE_CHARS else source[:MAX_SOURCE_CHARS] + "\n... (truncated; the file is in this PR)"
    what = "The rewritten program" if is_program(t) else "Kernel source"
    return ["", f"<details><summary>{what}: <code>{kernel_path}</code> ({source.count(chr(10)) + 1} lines)</summary>", "",
            f"```{FENCES.get(lang, '')}", shown.rstrip(), "```", "", "</details>"]


def _check_it(t: Mapping[str, Any], branch: str) -> list[str]:
    rerun = (t.get("tests") or {}).get("rerun") or []
    return ["", "### Check it yourself", "", "```",
            f"git fetch origin {branch} && git checkout {branch}",
            *([] if is_program(t) else ["maxcode status          # the kernel is active for this machine",
                                      f"pytest {' '.join(rerun[:3]) if rerun else ''}".rstrip() + "          # your tests, with the kernel"]),
            f"pytest --maxcode --maxcode-target='{t['id']}'   # search and verify again here",
            "```", "", "<sub>Opened by pytest-maxcode. Closing this PR without merging keeps this kernel from being proposed again.</sub>"]
