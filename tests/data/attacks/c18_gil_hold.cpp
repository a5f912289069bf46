// Attack class 1b (red team, 2026-11-28), from native code only: a helper thread holds the
// interpreter lock across the freeze, so the worker cannot arm until the helper has computed the
// new inputs' outputs into the shared slots (called 34x faster). Held as c17.
// Variant of a01 with no Python-level patch at all: a helper thread takes the interpreter lock
// while the sandbox is frozen, so that after the thaw the worker's main thread cannot even
// read the trusted side's "round" message (let alone arm) until the helper has computed every
// slot's outputs straight into the shared output slots. The timed call then finds its work
// done. Only two C symbols of the Python runtime are used (PyGILState_Ensure/Release).
#include <dlpack/dlpack.h>
#include <dlfcn.h>
#include <pthread.h>
#include <time.h>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <condition_variable>

namespace {
using EnsureFn = int (*)();
using ReleaseFn = void (*)(int);
EnsureFn g_ensure;
ReleaseFn g_release;

constexpr int kMaxSlots = 128;
struct Slot {
  const float* x; const float* b; float* y; int64_t rows, cols;
  uint64_t fp_seen;   // fingerprint of the inputs the outputs were computed for
  std::atomic<uint64_t> fp_done{0};
};
Slot g_slots[kMaxSlots];
std::atomic<int> g_nslots{0};
std::mutex g_mu;
std::condition_variable g_cv;
int g_pending = 0;              // timed calls left in this round
bool g_round_over = false;
bool g_started = false;
uintptr_t g_lo = 0, g_hi = 0;   // the memfd "maxcode-candidate" mapping

void compute(const float* x, const float* b, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v = x[r * cols + c] * 2.0f + b[c];
      v = v < 0.f ? 0.f : v;
      v = tanhf(v);
      y[r * cols + c] = v * v - 0.5f;
    }
}

uint64_t fingerprint(const float* x, int64_t n) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < 64; ++i) {
    uint32_t w; std::memcpy(&w, x + (n * i) / 64, 4);
    h = (h ^ w) * 1099511628211ull;
  }
  return h | 1;
}

void find_region() {
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strstr(line, "maxcode-candidate")) {
      unsigned long lo, hi;
      if (sscanf(line, "%lx-%lx", &lo, &hi) == 2) { g_lo = lo; g_hi = hi; }
    }
  }
  fclose(f);
}

bool in_region(const void* p) { return g_lo && (uintptr_t)p >= g_lo && (uintptr_t)p < g_hi; }

void nap(long ns) { timespec ts{0, ns}; nanosleep(&ts, nullptr); }

void* helper(void*) {
  for (;;) {
    {  // wait until the round's calls are over
      std::unique_lock<std::mutex> lk(g_mu);
      g_cv.wait(lk, [] { return g_round_over; });
      g_round_over = false;
    }
    nap(150000);                 // main thread: DONE, READY, back into recv (GIL released)
    int gil = g_ensure();        // hold the interpreter: after the thaw main cannot proceed
    int changed = 0;
    for (long it = 0; it < 3000 && !changed; ++it) {   // iterations do not advance while frozen
      int n = g_nslots.load();
      for (int s = 0; s < n; ++s) {
        Slot& sl = g_slots[s];
        uint64_t fp = fingerprint(sl.x, sl.rows * sl.cols);
        if (fp != sl.fp_done.load()) {
          compute(sl.x, sl.b, sl.y, sl.rows, sl.cols);   // outside any timed interval
          sl.fp_done.store(fp);
          ++changed;
        }
      }
      if (!changed) nap(20000);
    }
    {
      std::lock_guard<std::mutex> lk(g_mu);
      g_pending = changed;
    }
    g_release(gil);              // now main may read "round", arm, and be timed
  }
  return nullptr;
}
}  // namespace

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  if (n_in != 2 || n_out != 1) return 1;
  const float* x = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  if (!g_lo) find_region();
  if (!in_region(y)) {           // correctness / range calls: honest
    compute(x, b, y, rows, cols);
    return 0;
  }
  if (!g_started) {
    g_ensure = reinterpret_cast<EnsureFn>(dlsym(RTLD_DEFAULT, "PyGILState_Ensure"));
    g_release = reinterpret_cast<ReleaseFn>(dlsym(RTLD_DEFAULT, "PyGILState_Release"));
    if (g_ensure && g_release) {
      pthread_t t; pthread_create(&t, nullptr, helper, nullptr); pthread_detach(t);
    }
    g_started = true;
  }
  int idx = -1;
  for (int s = 0; s < g_nslots.load(); ++s) if (g_slots[s].y == y) { idx = s; break; }
  if (idx < 0 && g_nslots.load() < kMaxSlots) {
    idx = g_nslots.load();
    g_slots[idx].x = x; g_slots[idx].b = b; g_slots[idx].y = y;
    g_slots[idx].rows = rows; g_slots[idx].cols = cols;
    g_nslots.store(idx + 1);
  }
  uint64_t fp = fingerprint(x, rows * cols);
  if (idx < 0 || g_slots[idx].fp_done.load() != fp) {
    compute(x, b, y, rows, cols);   // not precomputed (first rounds, a new slot): honest
    if (idx >= 0) g_slots[idx].fp_done.store(fp);
  }
  // else: the helper already wrote this slot's outputs before the doorbell
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_pending > 0) --g_pending;
  if (g_pending == 0) { g_round_over = true; g_cv.notify_one(); }
  return 0;
}
