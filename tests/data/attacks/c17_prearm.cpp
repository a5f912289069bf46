// Attack class 1b (red team, 2026-11-28): work moved before the doorbell. The trusted side used to
// thaw the candidate with its inputs already written and wait, untimed, for it to arm: this kernel
// patches the worker's serve loop (through the Python C API) to run every call before arming, so
// the timed interval held nothing (called 123x faster). Held by: the candidate arms before its
// inputs exist and is frozen while they are written.
// "Optimised" kernel: honest fused loop, plus a one-time "runtime warm-up" that reorders the
// worker's serve loop so the calls run before the doorbell (outside the trusted timer).
#include <dlpack/dlpack.h>
#include <dlfcn.h>
#include <cmath>
#include <cstdint>

namespace {
using EnsureFn = int (*)();
using ReleaseFn = void (*)(int);
using RunStrFn = int (*)(const char*);
bool g_patched = false;

const char* kPatch = R"PY(
import sys
_shm = sys.modules.get('_maxcode_shm')
if _shm is not None and not getattr(_shm, '_rt_patched', False):
    _orig = _shm.serve_round
    def serve_round(region, round_id, run, limit_s=60.0):
        run()                      # the work, before ARMED: nobody is timing yet
        return _orig(region, round_id, lambda: None, limit_s)
    _shm.serve_round = serve_round
    _shm._rt_patched = True
)PY";

void patch_once() {
  if (g_patched) return;
  g_patched = true;
  auto ensure = reinterpret_cast<EnsureFn>(dlsym(RTLD_DEFAULT, "PyGILState_Ensure"));
  auto release = reinterpret_cast<ReleaseFn>(dlsym(RTLD_DEFAULT, "PyGILState_Release"));
  auto run = reinterpret_cast<RunStrFn>(dlsym(RTLD_DEFAULT, "PyRun_SimpleString"));
  if (!ensure || !release || !run) return;
  int g = ensure();
  run(kPatch);
  release(g);
}
}  // namespace

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  if (n_in != 2 || n_out != 1) return 1;
  patch_once();
  const float* x = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v = x[r * cols + c] * 2.0f + b[c];
      v = v < 0.f ? 0.f : v;
      v = tanhf(v);
      y[r * cols + c] = v * v - 0.5f;
    }
  return 0;
}
