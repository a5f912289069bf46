// Attack class 12 (red team, 2026-11-28): choosing which of its own rounds count. Rounds in which
// the serving thread waited for its core were set aside as disturbed by other work; this kernel
// makes its slow rounds wait on purpose (called 3.7x faster while slower than the reference on
// average). Held by: a candidate kept waiting far more often than the reference, for the time
// each is timed, has every round counted.
// honest_fast's kernel, but on ~65% of rounds it takes a slow path: honest.cpp's scalar tanhf
// over half the rows besides (honest.cpp is about 3x slower than the reference on Intel and AMD
// hosts alike, where "6x honest_fast's work" was slower than the reference on an Intel host and
// faster on an AMD one, honest_fast being 3.3x and 7x there): its typical call is slower than
// the reference. On those rounds it also wakes a helper thread on its own core that
// spins 1 ms, so the serving thread waits runnable and the trusted timer files the round as
// "disturbed by other work" and sets it aside. Only its fast rounds are scored.
#include <dlpack/dlpack.h>
#include <pthread.h>
#include <time.h>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifndef DISTURB
#define DISTURB 1
#endif

namespace {
inline float tanh_nonneg(float v) {
  const float c = v < 9.f ? v : 9.f;
  const float r = -0.125f * c;
  float p = 2.7557319224e-07f;
  p = p * r + 2.7557319224e-06f; p = p * r + 2.4801587302e-05f; p = p * r + 1.9841269841e-04f;
  p = p * r + 1.3888888889e-03f; p = p * r + 8.3333333333e-03f; p = p * r + 4.1666666667e-02f;
  p = p * r + 1.6666666667e-01f; p = p * r + 5.0000000000e-01f; p = p * r + 1.0000000000e+00f;
  p = p * r + 1.0000000000e+00f;
  float e = p * p; e *= e; e *= e; e *= e;
  const float t = (1.f - e) / (1.f + e);
  return v == v ? t : v;
}
void kernel(const float* x, const float* b, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict xr = x + r * cols; float* __restrict yr = y + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) {
      float v = xr[c] * 2.0f + b[c];
      v = v < 0.f ? 0.f : v;
      float t = tanh_nonneg(v);
      yr[c] = t * t - 0.5f;
    }
  }
}
void slow_kernel(const float* x, const float* b, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v = x[r * cols + c] * 2.0f + b[c];
      v = v < 0.f ? 0.f : v;
      v = tanhf(v);
      y[r * cols + c] = v * v - 0.5f;
    }
}
uintptr_t g_lo = 0, g_hi = 0;
void find_region() {
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f))
    if (strstr(line, "maxcode-candidate")) { unsigned long lo, hi; if (sscanf(line, "%lx-%lx", &lo, &hi) == 2) { g_lo = lo; g_hi = hi; } }
  fclose(f);
}
std::atomic<int> g_kick{0};
bool g_helper = false;
void* helper(void*) {
  for (;;) {
    while (!g_kick.load()) syscall(SYS_futex, reinterpret_cast<int*>(&g_kick), FUTEX_WAIT, 0, nullptr, nullptr, 0);
    g_kick.store(0);
    timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
    do { clock_gettime(CLOCK_MONOTONIC, &t1); } while ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) < 1000000);
  }
  return nullptr;
}
float* g_slot0 = nullptr;
bool g_slow = false;
std::mt19937 g_rng(12345);
}  // namespace

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  if (n_in != 2 || n_out != 1) return 1;
  const float* x = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  if (!g_lo) find_region();
  if (!g_helper) { g_helper = true; if (DISTURB) { pthread_t t; pthread_create(&t, nullptr, helper, nullptr); pthread_detach(t); } }
  bool timed = g_lo && (uintptr_t)y >= g_lo && (uintptr_t)y < g_hi;
  if (timed && (!g_slot0 || y < g_slot0)) g_slot0 = y;
  if (timed && y == g_slot0) {        // first call of a round
    g_slow = (g_rng() % 100) < 65;
    if (g_slow && DISTURB) { g_kick.store(1); syscall(SYS_futex, reinterpret_cast<int*>(&g_kick), FUTEX_WAKE, 1, nullptr, nullptr, 0); }
  }
  kernel(x, b, y, rows, cols);
  if (timed && g_slow) slow_kernel(x, b, y, rows / 2, cols);  // the slow path
  return 0;
}
