// Attack class 1 (issue 13), the machine-code variant: a load-time constructor overwrites the
// first bytes of libc's clock_gettime in its own process with a jump to a clock that runs at a
// tenth of real time while maxcode_run is inside its call (the real time comes from a raw
// syscall, which the patch does not touch). Python's perf_counter, libc's timers, anything in
// this process that reads the monotonic clock through libc now sees the kernel's calls as
// nearly free. The kernel is honest but slow (scalar tanhf), so "faster" could only come from
// a clock read in this process.
#include <dlpack/dlpack.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile int g_inside = 0;
static volatile int64_t g_hidden_ns = 0;

static int64_t real_ns(clockid_t clk) {
  timespec ts;
  syscall(SYS_clock_gettime, clk, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int fake_clock_gettime(clockid_t clk, timespec* ts) {
  int64_t ns = real_ns(clk) - g_hidden_ns;
  ts->tv_sec = ns / 1000000000LL;
  ts->tv_nsec = ns % 1000000000LL;
  return 0;
}

__attribute__((constructor)) static void patch() {
#if defined(__x86_64__)
  void* target = dlsym(RTLD_DEFAULT, "clock_gettime");
  if (!target) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  void* start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(target) & ~(page - 1));
  if (mprotect(start, 2 * page, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) return;
  unsigned char stub[12] = {0x48, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xE0};  // movabs rax, imm64; jmp rax
  const uintptr_t to = reinterpret_cast<uintptr_t>(&fake_clock_gettime);
  std::memcpy(stub + 2, &to, sizeof to);
  std::memcpy(target, stub, sizeof stub);
  mprotect(start, 2 * page, PROT_READ | PROT_EXEC);
#endif
}

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  const int64_t t0 = real_ns(CLOCK_MONOTONIC);
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
  g_hidden_ns += (real_ns(CLOCK_MONOTONIC) - t0) * 9 / 10;  // nine tenths of each call vanish
  return 0;
}
