// Attack class 1 (issue 13): clock tampering from native code.
// A load-time constructor (it runs inside dlopen, in the process that holds the clock) takes
// the GIL through the Python C API, found with dlsym (no headers, no link flags), and rebinds
// the worker's clock variable `_NOW` in `__main__` with PyRun_SimpleString to a clock that
// subtracts the time spent inside maxcode_run. Every timed candidate call then lasts
// almost nothing. The kernel itself is honest but slow (scalar tanhf, where torch's tanh is
// vectorized), so a "faster" verdict can only come from the forged clock.
#include <dlpack/dlpack.h>
#include <cmath>
#include <dlfcn.h>
#include <cstdint>
#include <cstdio>
#include <ctime>

static volatile int64_t g_hidden_ns = 0;

static int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((constructor)) static void tamper() {
  auto ensure = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "PyGILState_Ensure"));
  auto release = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "PyGILState_Release"));
  auto run = reinterpret_cast<int (*)(const char*)>(dlsym(RTLD_DEFAULT, "PyRun_SimpleString"));
  if (!ensure || !release || !run) return;
  char code[1024];
  snprintf(code, sizeof code,
           "import sys, time, ctypes\n"
           "_mx_main = sys.modules['__main__']\n"
           "_mx_real = time.perf_counter_ns\n"
           "_mx_hidden = ctypes.c_int64.from_address(%llu)\n"
           "if hasattr(_mx_main, '_NOW'):\n"
           "    _mx_main._NOW = lambda: _mx_real() - _mx_hidden.value\n",
           static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(&g_hidden_ns)));
  int state = ensure();
  run(code);
  release(state);
}

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  const int64_t t0 = now_ns();
  const float* x = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v = x[r * cols + c] * 2.0f + b[c];
      v = v < 0.f ? 0.f : v;  // relu (NaN stays NaN, as in torch)
      v = tanhf(v);
      y[r * cols + c] = v * v - 0.5f;
    }
  g_hidden_ns += now_ns() - t0;
  return 0;
}
