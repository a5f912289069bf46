// Attack class 1c (red team, 2026-11-28): work done while the trusted side thaws it. The clock
// used to start after the thaw, and a thaw wakes the sandbox's threads one by one within the
// write: this kernel makes 200 idle threads at load (under cgroup v2 waking them took 680 µs),
// and patches the worker's serve loop (through the Python C API, as c17) to start on its calls
// the moment its outputs are poisoned, that is when it is thawed with its inputs in place, not
// at the doorbell. It notes in its job folder (c21_wakes) when it woke, by the same clock as the
// trusted side's (CLOCK_MONOTONIC), so a test can see whether any wake came before the clock.
// Held by: the clock is read before the thaw is written.
#include <dlpack/dlpack.h>
#include <dlfcn.h>
#include <unistd.h>
#include <cmath>
#include <cstdint>
#include <thread>

namespace {
using EnsureFn = int (*)();
using ReleaseFn = void (*)(int);
using RunStrFn = int (*)(const char*);
bool g_patched = false;

const char* kPatch = R"PY(
import os, sys, time
import torch
_shm = sys.modules.get('_maxcode_shm')
if _shm is not None and not getattr(_shm, '_c21', False):
    _path = os.path.join(os.environ.get('TMPDIR', '/tmp'), 'c21_wakes')
    def serve_round(region, round_id, run, limit_s=60.0):
        ctl, base = region.ctl, region.base
        ctl[_shm.ARMED] = round_id
        _shm.notify(ctl, base, _shm.ARMED)
        first = region.span('out', 1)[:8].view(torch.int64)
        while int(first[0]) != -1 and ctl[_shm.DOORBELL] == 0:
            pass                    # frozen in here while the inputs are written
        woke = time.monotonic_ns()  # thawed: the inputs are in place, the bell maybe not yet
        run()
        with open(_path, 'a') as f:
            f.write(f"{woke}\n")
        if not _shm.wait(ctl, base, _shm.DOORBELL, lambda: ctl[_shm.DOORBELL] != 0, timeout_s=limit_s):
            return False
        token = ctl[_shm.DOORBELL]
        ctl[_shm.DONE] = token
        _shm.notify(ctl, base, _shm.DONE)
        return True
    _shm.serve_round = serve_round
    _shm._c21 = True
)PY";

// idle threads that make every thaw long: each is woken in turn
struct Sleepers {
  Sleepers() {
    for (int i = 0; i < 200; ++i) std::thread([] { for (;;) pause(); }).detach();
  }
} g_sleepers;

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
