"""The compiled call path is built and chosen by trusted code only, and no candidate can swap or poison it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_maxcode.native import callpath
from pytest_maxcode.sandbox.isolation import works

ROOT = Path(__file__).resolve().parents[1]

REF = '''
import torch


def f(x):
    return x.clone()


def get_inputs():
    return [torch.randn(4)]
'''

# An attacker that knows where the helper is cached: at load time it overwrites it in place,
# replaces it by rename, rewrites its build record, drops a file beside it, and tries to write
# into the copy its own process has mapped. It copies correctly, and returns 9 from every call
# when it cannot even read the helper (so a passing verdict proves it saw the file).
ATTACK = r'''
#include <dlpack/dlpack.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
static bool seen = false;
__attribute__((constructor)) static void poison() {
  const char* lib = "@LIB@";
  const char* rec = "@REC@";
  seen = access(lib, R_OK) == 0;
  if (FILE* f = fopen(lib, "r+b")) { fwrite("POISON", 1, 6, f); fclose(f); }
  if (FILE* g = fopen("@LIB@.new", "wb")) { fputs("not a library", g); fclose(g); rename("@LIB@.new", lib); }
  if (FILE* r = fopen(rec, "w")) { fputs("{\"sha256\": \"0\"}", r); fclose(r); }
  if (FILE* m = fopen("/proc/self/maps", "r")) {
    char line[512];
    while (fgets(line, sizeof line, m)) {
      if (!strstr(line, "maxcode-callpath")) continue;
      char range[64] = {0};
      sscanf(line, "%63s", range);
      char path[128];
      snprintf(path, sizeof path, "/proc/self/map_files/%s", range);
      int fd = open(path, O_RDWR);
      if (fd >= 0) { write(fd, "POISON", 6); close(fd); }
    }
    fclose(m);
  }
}
extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* s) {
  if (!seen) return 9;
  const float* x = static_cast<const float*>(in[0].data);
  float* y = static_cast<float*>(out[0].data);
  for (int i = 0; i < 4; ++i) y[i] = x[i];
  return 0;
}
'''

CHECK = r'''
import json, sys
from pathlib import Path
from pytest_maxcode.native import abi, callpath
from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.oracle.reference import parse_reference

root = Path(sys.argv[1])
ref = parse_reference(str(root / "ref.py") + ":f", str(root / "ref.py") + ":get_inputs")
with Oracle(ref, CheckConfig(time_budget=0.05, sandbox=sys.argv[2]), root) as o:
    v = o.check([CandidateSpec.from_path(root / "attack.cpp")])[0]
    info = dict(o.zygote.info)
print(json.dumps({"status": v.status, "reasons": v.reasons, "call_path": info.get("call_path"),
                  "fallback": callpath.fallback_reason()}))
'''


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def _cache_copy(dest: Path) -> Path:
    """A private copy of this machine's built helper (built once per torch version, then cached)."""
    built = callpath.build()
    copy = dest / built.name
    shutil.copytree(built, copy)
    return copy


def _python(code: str, args: list[str], env: dict[str, str], cwd: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", code, *args], check=False, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(works("bwrap") is not None, reason="needs bubblewrap (the sandbox with a read-only filesystem)")
def test_a_candidate_cannot_replace_or_poison_the_compiled_call_path(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    # the cache inside the project: the sandbox can read it (the project is bound read-only)
    folder = _cache_copy(proj / "callpath-cache")
    before = _tree(folder.parent)
    (proj / "ref.py").write_text(REF)
    lib, rec = folder / callpath.LIBRARY, folder / callpath.RECORD
    (proj / "attack.cpp").write_text(ATTACK.replace("@LIB@", str(lib)).replace("@REC@", str(rec)))
    env = dict(os.environ, MAXCODE_CALLPATH_CACHE=str(folder.parent), PYTHONPATH=str(ROOT))
    out = _python(CHECK, [str(proj), "bwrap"], env, proj)
    assert out["call_path"] == "compiled" and not out["fallback"], out
    # it ran (it could read the helper: no code 9), was timed through the helper, and achieved nothing
    assert out["status"] in ("not_faster", "faster", "slower"), out
    assert _tree(folder.parent) == before
    # a later process still loads the helper it verified
    again = _python("import json; from pytest_maxcode.native import callpath; "
                    "print(json.dumps({'ok': callpath.load() is not None, 'why': callpath.fallback_reason()}))", [], env, proj)
    assert again == {"ok": True, "why": ""}


def test_a_helper_changed_since_it_was_built_is_never_loaded(tmp_path: Path) -> None:
    """What an unsandboxed write (``--maxcode-sandbox=none`` or ``unshare``) could do to the cache is
    refused by the next process: it loads only bytes that hash to the build record, else says why
    once and calls kernels through ctypes."""
    folder = _cache_copy(tmp_path)
    lib = folder / callpath.LIBRARY
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    lib.write_bytes(bytes(data))
    env = dict(os.environ, MAXCODE_CALLPATH_CACHE=str(tmp_path), PYTHONPATH=str(ROOT))
    code = (
        "import json, warnings, torch\n"
        "from pytest_maxcode.native import abi, callpath\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    loaded = callpath.load()\n"
        "print(json.dumps({'loaded': loaded is not None, 'helper': abi.helper() is not None,\n"
        "                  'warnings': [str(x.message) for x in w]}))\n"
    )
    out = _python(code, [], env, tmp_path)
    assert not out["loaded"] and not out["helper"]
    assert len(out["warnings"]) == 1 and "changed since it was built" in out["warnings"][0]
    assert "ctypes" in out["warnings"][0]


def test_a_helper_that_cannot_be_built_leaves_the_ctypes_path(tmp_path: Path) -> None:
    env = dict(os.environ, MAXCODE_CALLPATH_CACHE=str(tmp_path), CXX="/nonexistent/g++", PYTHONPATH=str(ROOT))
    code = (
        "import json, warnings, torch\n"
        "from pytest_maxcode.native import abi, callpath\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    callpath.load(); callpath.load()\n"
        "print(json.dumps({'helper': abi.helper() is not None, 'warnings': [str(x.message) for x in w]}))\n"
    )
    out = _python(code, [], env, tmp_path)
    assert not out["helper"]
    assert len(out["warnings"]) == 1 and "ctypes" in out["warnings"][0]


def test_same_values_sees_a_reassigned_added_or_removed_member() -> None:
    """The module fast path's check that an instance still holds the parameters it planned with."""
    helper = callpath.load()
    if helper is None:
        pytest.skip(f"the compiled call path is not available: {callpath.fallback_reason()}")
    a, b, c = object(), object(), object()
    params, buffers = {"w": a, "b": b}, {"s": c}
    held = ((params, (a, b)), (buffers, (c,)))
    assert helper.same_values(held) and helper.same_values(())
    params["w"] = object()  # reassigned: same key, another object
    assert not helper.same_values(held)
    params["w"] = a
    buffers["t"] = object()  # added
    assert helper.same_values(held[:1]) and not helper.same_values(held)
    del buffers["t"], buffers["s"]  # removed
    assert not helper.same_values(held)
    with pytest.raises(TypeError, match="pairs"):
        helper.same_values([(params, (a, b))])
    with pytest.raises(TypeError, match="pairs"):
        helper.same_values(((params, [a, b]),))
