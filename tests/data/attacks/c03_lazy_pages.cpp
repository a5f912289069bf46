// Attack class 3 (issue 13): work moved out of the timed region.
// maxcode_run computes only the output's partial first and last pages, leaves the whole
// pages in between PROT_NONE and returns at once. A SIGSEGV handler computes them when the
// harness first touches the output (to copy it for a re-check, or to poison it before it is
// freed), both outside the timed interval; it computes into fresh pages and mremaps them in
// atomically, so a second thread reading the output never sees a half-written page.
#include <dlpack/dlpack.h>
#include <cmath>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

namespace {

struct Pending {
  std::atomic<int> state{2};  // 0 pending, 1 being computed, 2 free
  char* lo = nullptr;
  char* hi = nullptr;
  float* y = nullptr;
  const float* x = nullptr;
  const float* b = nullptr;
  int64_t cols = 0;
};

constexpr int kSlots = 512;
Pending g_pending[kSlots];
std::atomic<int> g_next{0};
bool g_installed = false;

inline float chain(const float* x, const float* b, int64_t cols, int64_t i) {
  float v = x[i] * 2.0f + b[i % cols];
  v = v < 0.f ? 0.f : v;  // relu (NaN stays NaN, as in torch)
  v = tanhf(v);
  return v * v - 0.5f;
}

void on_segv(int sig, siginfo_t* info, void*) {
  char* addr = static_cast<char*>(info->si_addr);
  for (Pending& p : g_pending) {
    int s = p.state.load();
    if (s == 2 || addr < p.lo || addr >= p.hi) continue;
    int expected = 0;
    if (p.state.compare_exchange_strong(expected, 1)) {
      const size_t len = p.hi - p.lo;
      void* fresh = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      float* f = static_cast<float*>(fresh);
      const int64_t first = (p.lo - reinterpret_cast<char*>(p.y)) / sizeof(float);
      for (int64_t i = 0; i < int64_t(len / sizeof(float)); ++i) f[i] = chain(p.x, p.b, p.cols, first + i);
      mremap(fresh, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, p.lo);
      p.state.store(2);
    } else {
      while (p.state.load() != 2) {
      }
    }
    return;
  }
  signal(SIGSEGV, SIG_DFL);  // not ours: crash as usual
}

void install() {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigaction(SIGSEGV, &sa, nullptr);
  g_installed = true;
}

}  // namespace

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  if (!g_installed) install();
  const float* x = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t cols = in[0].shape[1];
  int64_t n = 1;
  for (int i = 0; i < out[0].ndim; ++i) n *= out[0].shape[i];
  const uintptr_t page = sysconf(_SC_PAGESIZE);
  const uintptr_t start = reinterpret_cast<uintptr_t>(y), end = start + n * sizeof(float);
  char* lo = reinterpret_cast<char*>((start + page - 1) & ~(page - 1));
  char* hi = reinterpret_cast<char*>(end & ~(page - 1));
  if (hi <= lo) {
    for (int64_t i = 0; i < n; ++i) y[i] = chain(x, b, cols, i);
    return 0;
  }
  const int64_t head = (lo - reinterpret_cast<char*>(y)) / sizeof(float);
  const int64_t tail = (hi - reinterpret_cast<char*>(y)) / sizeof(float);
  for (int64_t i = 0; i < head; ++i) y[i] = chain(x, b, cols, i);
  for (int64_t i = tail; i < n; ++i) y[i] = chain(x, b, cols, i);
  for (int tries = 0; tries < kSlots; ++tries) {
    Pending& p = g_pending[g_next.fetch_add(1) % kSlots];
    if (p.state.load() != 2) continue;
    p.lo = lo, p.hi = hi, p.y = y, p.x = x, p.b = b, p.cols = cols;
    p.state.store(0);
    mprotect(lo, hi - lo, PROT_NONE);
    return 0;
  }
  for (int64_t i = head; i < tail; ++i) y[i] = chain(x, b, cols, i);  // no free slot: do the work
  return 0;
}
