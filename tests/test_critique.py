"""The rule-based critic on real oracle outcomes, and its thresholds on measured facts."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from conftest import DATA

from pytest_maxcode.critique import RuleCritic
from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.oracle.reference import parse_reference
from pytest_maxcode.oracle.verdict import Verdict
from pytest_maxcode.search.state import Proposal, SearchState

CANDIDATES = {
    "good.cpp": "correct:",
    "broken.cpp": "compile:syntax",
    "cheats/partial.cpp": "wrong:partial",
    "cheats/unwritten.cpp": "wrong:unwritten-output",
    "cheats/segfault.cpp": "runtime:out-of-bounds",
    "cheats/nonzero_rc.cpp": "runtime:error-code",
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    """Real verdicts on a memory-sized workload (2048 x 4096 floats, 32 MiB a tensor).

    One block and no range-widened sets: the critic reads the screening's measured facts, and
    at this size each range set costs seconds of reference work (the blocks and the range
    check have tests of their own)."""
    root = tmp_path_factory.mktemp("critique")
    shutil.copytree(DATA / "chain", root, dirs_exist_ok=True)
    ref = (DATA / "chain" / "ref.py").read_text().replace("torch.randn(64, 1024), torch.randn(1024)", "torch.randn(2048, 4096), torch.randn(4096)")
    (root / "ref.py").write_text(ref)
    specs = [CandidateSpec.from_path(root / name) for name in CANDIDATES]
    with Oracle(parse_reference(str(root / "ref.py")), CheckConfig(time_budget=0.2, n_seeds=2, blocks=1, ranges=False), root) as oracle:
        verdicts = oracle.check(specs)
    state = SearchState("chain")
    out = {}
    for name, spec, v in zip(CANDIDATES, specs, verdicts):
        node = state.add(Proposal(spec, "test"), v, 0)
        out[name] = (v, RuleCritic().critique(node))
    return out


@pytest.mark.parametrize("name", list(CANDIDATES))
def test_real_outcomes_are_classified(name: str, outcomes: dict[str, tuple]) -> None:
    v, c = outcomes[name]
    assert c.kind.startswith(CANDIDATES[name]), (v.status, v.reasons, c.kind)
    assert c.diagnosis and c.next_steps


def test_a_correct_kernels_critique_cites_only_what_was_measured(outcomes: dict[str, tuple]) -> None:
    v, c = outcomes["good.cpp"]
    assert c.kind in ("correct:memory-bound", "correct:below-roof")
    measured = min(d["bandwidth_fraction"] for d in v.diagnostics["workloads"].values())
    assert c.facts["bandwidth_fraction"] == measured and c.facts["speedup"] == v.speedup
    percents = [int(x) for x in re.findall(r"(\d+)% of the measured memory bandwidth", c.text())]
    assert percents == [round(100 * measured)]


def test_partial_output_names_the_share_and_the_first_bad_element(outcomes: dict[str, tuple]) -> None:
    v, c = outcomes["cheats/partial.cpp"]
    assert "50% of elements" in c.diagnosis and str(v.diagnostics["mismatch"]["first_bad_index"]) in c.diagnosis


def node_with(v: Verdict) -> object:
    return SearchState("t").add(Proposal(None, "test"), v, 0)


@pytest.mark.parametrize(
    ("fraction", "median_s", "kind"),
    [(0.8, 1e-3, "correct:memory-bound"), (0.3, 1e-3, "correct:below-roof"), (0.9, 5e-6, "correct:overhead-bound")],
)
def test_thresholds_on_measured_facts(fraction: float, median_s: float, kind: str) -> None:
    v = Verdict("c", "faster", speedup=2.0, diagnostics={"workloads": {"w": {"bandwidth_fraction": fraction, "candidate": {"median_s": median_s}}}})
    assert RuleCritic().critique(node_with(v)).kind == kind


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("c.cpp:3:5: error: 'foo' was not declared in this scope", "compile:undeclared-identifier"),
        ("c.cpp:1:10: fatal error: omp_extra.h: No such file or directory", "compile:missing-header"),
        ("undefined reference to `helper(float)'", "compile:link-error"),
        ("c.cpp:9:12: error: invalid conversion from 'void*' to 'float*'", "compile:type-error"),
        ("c.cpp:9:12: error: something unusual", "compile:other"),
    ],
)
def test_compile_error_classes(reason: str, kind: str) -> None:
    assert RuleCritic().critique(node_with(Verdict("c", "compile_error", reasons=[reason]))).kind == kind


def test_format_and_wrong_formula() -> None:
    p = Proposal(None, "test", error="the reply has no fenced code block")
    fmt = RuleCritic().critique(SearchState("t").add(p, Verdict("", "format"), 0))
    assert fmt.kind == "format:no-code" and "no fenced code block" in fmt.diagnosis
    m = {"fraction_wrong": 1.0, "first_bad_index": [0, 3], "got": 1.5, "expected": 0.5, "n_nan": 0}
    wrong = RuleCritic().critique(node_with(Verdict("c", "wrong", diagnostics={"mismatch": m})))
    assert wrong.kind == "wrong:formula" and "got 1.5, expected 0.5" in wrong.diagnosis


# -- the LLM critic's reply format and the grounding check --------------------------------

from pytest_maxcode.critique.grounding import unsupported_claims
from pytest_maxcode.critique.llm import parse_critique

FACTS = """- status: not_faster
- speedup: 0.8123x (95% CI 0.79x to 0.83x)
- w0: candidate time per call: median 41.2 us, IQR 1.3 us over 40 samples
- w0: achieved bandwidth: 12.5 GB/s = 35.2% of the measured roof"""


@pytest.mark.parametrize("claim", [
    "It moves data at 35% of the roof.",          # rounded as quoted
    "A call takes 41 us.",
    "It is 1.2x slower than the reference.",     # the reciprocal of a measured ratio
    "It is 19% slower.",                          # 1 - 0.8123, as a percentage
    "It reaches 12.5 GB/s.",
    "Use 256 threads per block and 4-wide loads.",  # plain numbers are advice, not measurements
])
def test_claims_that_the_facts_support_pass(claim: str) -> None:
    assert unsupported_claims(claim, FACTS) == []


@pytest.mark.parametrize("claim, flagged", [
    ("It moves data at 93% of the roof.", ["93%"]),
    ("A call takes 3 ms.", ["3 ms"]),
    ("It is 2.5x slower.", ["2.5x"]),
    ("The L2 hit rate is poor and occupancy is low.", ["L2 hit rate (no hardware counters were measured)", "occupancy (no hardware counters were measured)"]),
])
def test_claims_nothing_measured_are_flagged(claim: str, flagged: list[str]) -> None:
    assert unsupported_claims(claim, FACTS) == flagged


def test_counter_claims_pass_when_counters_were_measured() -> None:
    facts = FACTS + "\n- counter achieved_occupancy: 31.5%"
    assert unsupported_claims("Occupancy is 31.5%, low.", facts, counters=True) == []


def test_numbers_in_the_candidate_code_count_as_given() -> None:
    assert unsupported_claims("It loops 1000 times.", FACTS, code="for (int rep = 0; rep < 1000; ++rep)") == []


def test_parse_critique_takes_the_diagnosis_and_the_listed_steps() -> None:
    text = "**DIAGNOSIS:** Memory-bound:\nthree passes.\n\nNEXT:\n- fuse the passes.\n* vectorize\n2. drop the temporary\nnot a step"
    assert parse_critique(text) == ("Memory-bound: three passes.", ["fuse the passes", "vectorize", "drop the temporary"])
    assert parse_critique("no form at all") == ("", [])


def test_the_facts_of_a_compute_bound_candidate_name_its_share_of_the_flop_roof() -> None:
    from pytest_maxcode.critique.facts import measured_facts, render

    w = {"candidate": {"median_s": 2e-4, "iqr_s": 1e-5, "n": 40}, "reference": {"median_s": 3e-4, "iqr_s": 2e-5},
         "bytes_per_call": 196608, "achieved_bytes_per_s": 196608 / 2e-4, "bandwidth_fraction": 0.05,
         "flops_per_call": 4194304, "achieved_flops_per_s": 4194304 / 2e-4, "flops_fraction": 0.35}
    v = Verdict("c.cpp", "faster", speedup=1.5, speedup_ci=[1.4, 1.6], diagnostics={
        "workloads": {"w0": w}, "machine_bytes_per_s": 2e10, "machine_flops_per_s": 6e10})
    state = SearchState("t")
    node = state.add(Proposal(None, "test"), v, 0)
    text = render(measured_facts(node))
    assert "- machine FLOP/s (measured float32 GEMM): 60 GFLOP/s" in text
    assert "- w0: achieved compute: 20.97 GFLOP/s = 35% of the measured roof (4194304 FLOP per call)" in text
    assert "- speedup: 1.5x (95% CI 1.4x to 1.6x)" in text
    assert "- w0: candidate time per call: median 200 us, IQR 10 us over 40 samples" in text


def test_a_claim_must_match_a_fact_of_its_own_kind() -> None:
    # 35 is a measured percentage, not a time; 41.2 us is a time in any unit
    assert unsupported_claims("A call takes 35 us.", FACTS) == ["35 us"]
    assert unsupported_claims("A call takes 0.0412 ms.", FACTS) == []
    assert unsupported_claims("It moves 12500 MB/s.", FACTS) == []


def measured_verdict(time_s: float, *, bw: float | None = None, flops: float | None = None, overhead_us: float | None = None,
                     threads: int | None = None, bytes_per_call: int = 8 << 20, reference_s: float | None = None) -> Verdict:
    """A correct verdict as the oracle's _score leaves it: per-workload timing, shares of the roofs."""
    w: dict = {"candidate": {"median_s": time_s}, "bytes_per_call": bytes_per_call, "achieved_bytes_per_s": bytes_per_call / time_s}
    if bw is not None:
        w["bandwidth_fraction"] = bw
    if flops is not None:
        w["flops_fraction"] = flops
    if reference_s is not None:
        w["reference"] = {"median_s": reference_s}
    d: dict = {"workloads": {"w0": w}, "machine_bytes_per_s": bytes_per_call / time_s / bw if bw else 2e10}
    if overhead_us is not None:
        d["call_overhead_us"] = overhead_us
    if threads is not None:
        d["threads"] = threads
    return Verdict("c.cpp", "faster", speedup=(reference_s or 2 * time_s) / time_s, diagnostics=d)


def critique_of(v: Verdict, code: str = "") -> object:
    spec = CandidateSpec(Path("c.cpp"), "native", "cpp", code)
    return RuleCritic().critique(SearchState("t").add(Proposal(spec, "test"), v, 0))


def test_a_kernel_at_the_roof_is_told_so_with_what_is_left() -> None:
    c = critique_of(measured_verdict(6e-4, bw=0.69, reference_s=1.2e-3))
    assert c.kind == "correct:memory-bound"
    assert "69% of the measured memory bandwidth" in c.diagnosis and "near the roof" in c.diagnosis
    assert "at most 1.4x is left" in c.diagnosis
    assert "write-allocate" in c.next_steps[0] and "streaming" in c.next_steps[0] and "stop" in c.next_steps[0]
    assert c.next_steps[0].startswith("600 us a call on w0 against the reference's 1.2 ms, 2x, 69% of the bandwidth (up to 1.4x left), "
                                      "the time of 1.45 passes over the data against the reference's 2.9: near the memory roof, "
                                      "in fewer passes than the reference: the rest is traffic")
    flop = critique_of(measured_verdict(6e-4, bw=0.1, flops=0.8))
    assert flop.kind == "correct:compute-roof" and "80% of the measured FLOP roof: near the roof" in flop.diagnosis


def test_the_call_path_overhead_is_weighed_against_the_kernels_time() -> None:
    c = critique_of(measured_verdict(16.8e-6, bw=0.05, overhead_us=9.0))
    assert c.kind == "correct:overhead-bound"
    assert "16.8 us, of which the call path itself takes 9 us (54%)" in c.diagnosis and "about 7.8 us" in c.diagnosis
    assert "9 us of it the call path: the call path is 54% of a call" in c.next_steps[0]
    teamed = critique_of(measured_verdict(16.8e-6, bw=0.05, overhead_us=9.0, threads=8), code=THREADED_CODE)
    assert "on 8 threads" in teamed.next_steps[0] and "no thread team for about 7.8 us of work" in teamed.next_steps[0]
    big = critique_of(measured_verdict(2e-3, bw=0.3, overhead_us=9.0))
    assert big.kind == "correct:below-roof"  # 9 us of 2 ms: the call path does not matter there


def test_thread_use_and_passes_over_the_data_choose_the_next_step() -> None:
    one = critique_of(measured_verdict(2e-3, bw=0.2, threads=8), code="for (i...) out[i] = a[i] + b[i];")
    assert one.kind == "correct:one-thread" and "one thread of the 8" in one.diagnosis and "8 threads" in one.next_steps[0]
    threaded = "#pragma omp parallel for\nfor (i...) out[i] = a[i] + b[i];"
    many = critique_of(measured_verdict(2e-3, bw=0.2, threads=8, reference_s=4e-3), code=threaded)
    assert many.kind == "correct:below-roof"
    assert "the time of 5 passes" in many.diagnosis and "(the reference: 10)" in many.diagnosis and "fuse" in many.next_steps[0]
    close = critique_of(measured_verdict(2e-3, bw=0.45, threads=8), code=threaded)
    assert "the time of 2.22 passes" in close.diagnosis and "close to one pass" in close.next_steps[0]


FACT_SETS = [
    {"time_s": 6e-4, "bw": 0.69},
    {"time_s": 6e-4, "bw": 0.75},
    {"time_s": 2e-3, "bw": 0.2},
    {"time_s": 2e-3, "bw": 0.25},
    {"time_s": 2e-3, "bw": 0.45},
    {"time_s": 2e-3, "bw": 0.45, "reference_s": 5e-3},
    {"time_s": 1e-3, "bw": 0.1, "flops": 0.3},
    {"time_s": 1e-3, "bw": 0.1, "flops": 0.5},
    {"time_s": 1e-3, "bw": 0.1, "flops": 0.9},
    {"time_s": 16.8e-6, "bw": 0.05, "overhead_us": 9.0},
    {"time_s": 30e-6, "bw": 0.05, "overhead_us": 20.0},
    {"time_s": 2e-3, "bw": 0.2, "threads": 8},
    {"time_s": 2e-3, "bw": 0.2, "threads": 4},
    # pairs that differ only in a fact the chosen rule does not weigh (threads, call path, the reference)
    {"time_s": 6e-4, "bw": 0.69, "threads": 8, "reference_s": 1.2e-3, "code": "threaded"},
    {"time_s": 6e-4, "bw": 0.69, "threads": 4, "reference_s": 1.2e-3, "code": "threaded"},
    {"time_s": 6e-4, "bw": 0.69, "overhead_us": 1.0, "reference_s": 1.2e-3},
    {"time_s": 6e-4, "bw": 0.69, "overhead_us": 2.0, "reference_s": 1.2e-3},
    {"time_s": 2e-3, "bw": 0.45, "threads": 8, "code": "threaded"},
    {"time_s": 2e-3, "bw": 0.45, "threads": 4, "code": "threaded"},
    {"time_s": 2e-3, "bw": 0.45, "overhead_us": 3.0, "code": "threaded"},
    {"time_s": 2e-3, "bw": 0.45, "overhead_us": 9.0, "code": "threaded"},
    {"time_s": 1e-3, "bw": 0.1, "flops": 0.9, "reference_s": 2e-3},
    {"time_s": 1e-3, "bw": 0.1, "flops": 0.9, "reference_s": 3e-3},
]


def critique_of_facts(facts: dict) -> object:
    """The critique of a FACT_SETS entry: its measured facts, and threaded code where it says so."""
    kw = {k: x for k, x in facts.items() if k != "code"}
    return critique_of(measured_verdict(**kw), THREADED_CODE if facts.get("code") == "threaded" else "")


def test_different_measured_facts_never_get_the_same_critique() -> None:
    critiques = [critique_of_facts(facts) for facts in FACT_SETS]
    texts = [c.text() for c in critiques]
    steps = ["; ".join(c.next_steps) for c in critiques]
    assert len(set(texts)) == len(texts), [t for t in texts if texts.count(t) > 1]
    assert len(set(steps)) == len(steps), [s for s in steps if steps.count(s) > 1]
    for facts, c, text, step in zip(FACT_SETS, critiques, texts, steps):
        shares = [f"{100 * facts[k]:.0f}%" for k in ("bw", "flops") if k in facts]
        assert any(share in text for share in shares) or "call path" in text, text  # each states its own numbers
        # the next step opens with every fact it was derived from, whichever rule chose it
        assert step.startswith(f"{facts['time_s'] * 1e3:.3g} ms a call on w0" if facts["time_s"] >= 1e-3
                               else f"{facts['time_s'] * 1e6:.3g} us a call on w0"), step
        assert all(share in step for share in shares), step
        assert "passes over the data" in step, step
        if "reference_s" in facts:
            assert f"against the reference's {facts['reference_s'] * 1e3:.3g} ms" in step and "passes over the data against the reference's" in step, step
        if "overhead_us" in facts:
            assert f"{facts['overhead_us']:.3g} us of it the call path" in step, step
        if "threads" in facts:
            said = f"on {facts['threads']} threads" if facts.get("code") == "threaded" else f"on 1 of {facts['threads']} threads"
            assert said in step, step


# -- the fallbacks: no per-workload time, no byte count ------------------------------------

UNMEASURED = [
    Verdict("c.cpp", "faster"),
    Verdict("c.cpp", "faster", speedup=1.5, speedup_ci=[1.4, 1.6]),
    Verdict("c.cpp", "faster", speedup=1.5, speedup_ci=[1.3, 1.7]),
    Verdict("c.cpp", "faster", speedup=2.5, speedup_ci=[2.4, 2.6]),
    Verdict("c.cpp", "not_faster", speedup=0.8, speedup_ci=[0.78, 0.83], candidate_s=41e-6, reference_s=33e-6),
    Verdict("c.cpp", "not_faster", speedup=0.8, speedup_ci=[0.78, 0.83], candidate_s=50e-6, reference_s=40e-6),
    Verdict("c.cpp", "not_faster", speedup=1.1, speedup_ci=[0.6, 1.9], diagnostics={"undecided": True}),
    Verdict("c.cpp", "faster", speedup=1.5, speedup_ci=[1.4, 1.6], candidate_s=12e-6, reference_s=18e-6, diagnostics={"call_overhead_us": 9.0}),
    Verdict("c.cpp", "faster", speedup=1.5, speedup_ci=[1.4, 1.6], diagnostics={"threads": 8}),
    Verdict("c.cpp", "faster", speedup=1.5, speedup_ci=[1.4, 1.6], diagnostics={"threads": 4}),
    Verdict("c.cpp", "faster", speedup=1.5, speedup_ci=[1.4, 1.6], range_limited="passed: captured range; failed: x1e3"),
    Verdict("c.cpp", "faster", speedup=1.2, speedup_ci=[1.1, 1.3],
            diagnostics={"workloads": {"w0": {"candidate_instructions": 3e6, "reference_instructions": 4e6}}}),
    Verdict("c.cpp", "not_faster", speedup=0.8, speedup_ci=[0.7, 0.9],
            diagnostics={"workloads": {"w0": {"candidate_instructions": 5e6, "reference_instructions": 4e6}}}),
]


def test_without_a_timing_per_workload_the_next_step_names_the_verdicts_own_facts() -> None:
    critiques = [critique_of(v) for v in UNMEASURED]
    steps = ["; ".join(c.next_steps) for c in critiques]
    assert len(set(steps)) == len(steps), [s for s in steps if steps.count(s) > 1]
    for v, c, step in zip(UNMEASURED, critiques, steps):
        assert "make it faster: fuse passes, vectorize, parallelize" not in step
        if v.speedup is not None:
            assert f"at {v.speedup:.3g}x (95% CI {v.speedup_ci[0]:.3g}x to {v.speedup_ci[1]:.3g}x)" in step, step
        else:
            assert "untimed (faster)" in step and c.kind == "correct:untimed"
        if v.candidate_s is not None:
            assert f"{v.candidate_s * 1e6:.3g} us a call against the reference's {v.reference_s * 1e6:.3g} us" in step, step
    by_kind = {c.kind: step for c, step in zip(critiques, steps)}
    assert "it loses to the reference" in by_kind["correct:slower"]
    assert "spans a factor of 3.17" in by_kind["correct:undecided"]
    assert "9 us of it the call path" in by_kind["correct:overhead-bound"] and "75% of a call" in by_kind["correct:overhead-bound"]
    assert "on 1 of 8 threads: split the outer loop across the 8 threads" in steps[8]
    assert steps[10].startswith("first make it correct beyond the captured range (passed: captured range; failed: x1e3)")
    assert "5e+06 instructions a call on w0 against the reference's 4e+06" in by_kind["correct:instructions"]


def no_bytes(time_s: float, **kw: object) -> Verdict:
    """A timed verdict with no byte count: no passes over the data to weigh the time by."""
    return measured_verdict(time_s, bytes_per_call=0, **kw)  # type: ignore[arg-type]


THREADED_CODE = "#pragma omp parallel for\nfor (i...) out[i] = a[i] + b[i];"
NO_BYTES = [
    (no_bytes(1e-3, reference_s=1.5e-3), ""),
    (no_bytes(1e-3, reference_s=2e-3), ""),
    (no_bytes(2e-3, reference_s=3e-3), ""),
    (no_bytes(1e-3, reference_s=0.9e-3), ""),
    (no_bytes(1e-3, reference_s=1.5e-3, threads=8), THREADED_CODE),
    (no_bytes(1e-3, reference_s=1.5e-3, threads=4), THREADED_CODE),
    (no_bytes(1e-3, reference_s=1.5e-3, threads=1), ""),
    (no_bytes(1e-3, reference_s=1.5e-3, overhead_us=5.0), ""),
]


def test_without_a_byte_count_the_next_step_names_the_times_threads_and_interval() -> None:
    critiques = [critique_of(v, code) for v, code in NO_BYTES]
    steps = ["; ".join(c.next_steps) for c in critiques]
    assert len(set(steps)) == len(steps), [s for s in steps if steps.count(s) > 1]
    for (v, _), c, step in zip(NO_BYTES, critiques, steps):
        assert c.kind == "correct:below-roof" and "No byte count on w0" in c.diagnosis
        assert "vectorize the inner loop, parallelize the outer one" not in step
        w = v.diagnostics["workloads"]["w0"]
        assert f"{w['candidate']['median_s'] * 1e3:.3g} ms a call on w0 against the reference's" in step, step
        assert f"{v.speedup:.3g}x" in step
    assert "it loses to the reference" in steps[3]
    assert "on 8 threads" in steps[4] and "on 4 threads" in steps[5] and "on its 1 thread" in steps[6]
    assert "5 us of it the call path" in steps[7]
    # the undecided interval is named as such
    v = no_bytes(1e-3, reference_s=1.1e-3)
    v.speedup_ci, v.diagnostics["undecided"] = [0.5, 2.4], True
    assert "(95% CI 0.5x to 2.4x)" in critique_of(v).next_steps[0] and "too noisy" in critique_of(v).next_steps[0]


# -- failures: the step names the compiler line, the reason or the mismatch ----------------

FAILURES = [
    Verdict("c.cpp", "compile_error", reasons=["c.cpp: In function 'int maxcode_run()':\nc.cpp:3:5: error: 'foo' was not declared in this scope"]),
    Verdict("c.cpp", "compile_error", reasons=["c.cpp:7:2: error: 'bar' was not declared in this scope"]),
    Verdict("c.cpp", "compile_error", reasons=["c.cpp:9:12: error: expected ';' before '}' token"]),
    Verdict("c.cpp", "compile_error", reasons=["c.cpp:4:1: error: expected ';' before 'return'"]),
    Verdict("c.cu", "compile_error", reasons=['c.cu(3): error: identifier "foo" is undefined']),
    Verdict("c.cpp", "compile_error", reasons=["/usr/bin/ld: in function `maxcode_run':\nc.cpp:(.text+0x1): undefined reference to `helper(float)'"]),
    Verdict("c.cpp", "timeout", reasons=["did not finish within 10 s (during a timed call (w0))"]),
    Verdict("c.cpp", "timeout", reasons=["did not finish within 30 s (during load)"]),
    Verdict("c.cpp", "crash", reasons=["the worker died during call: SIGSEGV"]),
    Verdict("c.cpp", "crash", reasons=["the worker died during load: SIGBUS"]),
    Verdict("c.cpp", "runtime_error", reasons=["maxcode_run returned 3"]),
    Verdict("c.cpp", "runtime_error", reasons=["maxcode_run returned -1"]),
    Verdict("c.cpp", "runtime_error", reasons=["RuntimeError: shape mismatch"]),
    Verdict("c.cpp", "rejected", reasons=["wrote to an input"]),
    Verdict("c.cpp", "rejected", reasons=["started a thread that outlived the call"]),
    Verdict("c.cpp", "wrong", diagnostics={"mismatch": {"fraction_wrong": 0.5, "first_bad_index": [32, 0], "got": 0.0, "expected": 1.25}}),
    Verdict("c.cpp", "wrong", diagnostics={"mismatch": {"fraction_wrong": 0.25, "first_bad_index": [48, 0], "got": 0.0, "expected": 1.25}}),
    Verdict("c.cpp", "wrong", diagnostics={"mismatch": {"fraction_wrong": 1.0, "first_bad_index": [0, 3], "got": 1.5, "expected": 0.5}}),
    Verdict("c.cpp", "wrong", diagnostics={"mismatch": {"fraction_wrong": 1.0, "first_bad_index": [0, 3], "got": 2.5, "expected": 0.5}}),
    Verdict("c.cpp", "wrong", diagnostics={"mismatch": {"fraction_wrong": 1.0, "first_bad_index": [0, 0], "got": "nan", "expected": 1.0, "n_nan": 4096,
                                               "max_abs_error": float("inf")}}),
    Verdict("c.cpp", "wrong", reasons=["outputs differ in a timed repeat"], diagnostics={"mismatch": {"timed": True}}),
    Verdict("c.cpp", "wrong", reasons=["got 3 outputs, expected 2"]),
    Verdict("c.cpp", "wrong", reasons=["output 1 has shape (4, 8), expected (8, 4)"]),
    Verdict("c.cpp", "wrong", diagnostics={"mismatch": {"fraction_wrong": 0.5, "first_bad_index": [32, 0], "got": 0.0, "expected": 1.25,
                                               "max_abs_error": 3.2, "output": 1, "input_set": 2}}),
]


def test_failures_with_different_facts_get_different_steps_that_name_them() -> None:
    steps = ["; ".join(critique_of(v).next_steps) for v in FAILURES]
    assert len(set(steps)) == len(steps), [s for s in steps if steps.count(s) > 1]
    assert steps[0].startswith("'foo' was not declared in this scope at c.cpp:3:5: declare or include")
    assert steps[2].startswith("expected ';' before '}' token at c.cpp:9:12: fix the syntax")
    assert steps[4].startswith('identifier "foo" is undefined at c.cu(3):')
    assert "undefined reference to `helper(float)'" in steps[5]
    assert steps[6].startswith("did not finish within 10 s (during a timed call (w0)): look for a loop")
    assert "SIGSEGV" in steps[8] and "SIGBUS" in steps[9]
    assert steps[10].startswith("it returned 3:") and steps[11].startswith("it returned -1:")
    assert "shape mismatch" in steps[12] and "wrote to an input" in steps[13]
    assert steps[15].startswith("50% wrong; first at [32, 0]; got 0.0, expected 1.25: check the tail")
    assert steps[16].startswith("25% wrong; first at [48, 0]")
    assert "got 1.5, expected 0.5" in steps[17] and "got 2.5, expected 0.5" in steps[18]
    assert "4096 NaN" in steps[19] and "in a timed repeat" in steps[20]
    assert steps[21].startswith("got 3 outputs, expected 2:")
    assert "largest" not in steps[19]  # no finite difference to speak of
    assert steps[23].startswith("50% wrong; output 1; first at [32, 0]; got 0.0, expected 1.25; largest finite error 3.2; input set 2:")


def test_a_reply_without_code_is_told_what_was_missing() -> None:
    steps = [RuleCritic().critique(SearchState("t").add(Proposal(None, "test", error=e), Verdict("", "format"), 0)).next_steps[0]
             for e in ("the reply has no fenced code block", "the code does not define maxcode_run")]
    assert steps[0].startswith("the reply has no fenced code block:") and steps[1].startswith("the code does not define maxcode_run:")


def test_a_programs_steps_name_its_test_case_and_its_speedup() -> None:
    def program(status: str, **kw: object) -> Verdict:
        v = Verdict("p.cpp", status, **kw)  # type: ignore[arg-type]
        v.format = "program"
        return v

    wrong = [program("wrong", diagnostics={"mismatch": {"test_case": case, "difference": diff}})
             for case, diff in (("input.1.txt", "line 3: got 5, expected 6"), ("input.2.txt", "line 30000: got -2, expected 4"))]
    fast = [program("faster", speedup=sp, speedup_ci=ci) for sp, ci in ((1.4, [1.3, 1.5]), (2.0, [1.9, 2.1]))]
    steps = [critique_of(v).next_steps[0] for v in wrong + fast]
    assert len(set(steps)) == 4
    assert steps[0].startswith("trace the program on input.1.txt (line 3: got 5, expected 6)")
    assert steps[3].startswith("at 2x (95% CI 1.9x to 2.1x): cut I/O cost first")


def test_without_a_copy_bandwidth_the_diagnosis_says_which_fact_is_missing() -> None:
    v = measured_verdict(1e-3, reference_s=1.2e-3)
    del v.diagnostics["machine_bytes_per_s"]
    c = critique_of(v)
    assert "No copy bandwidth was measured" in c.diagnosis
    assert c.next_steps[0].startswith("1 ms a call on w0 against the reference's 1.2 ms, 1.2x:")
