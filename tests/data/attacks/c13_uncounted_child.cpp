// Attack class 6 (issue 13), past the scan: the instruction timer counts the worker's own
// process, so this kernel does its work in a child it forks for each call, and waits for it.
// It imports neither fork nor mmap (the scan flags those): raw system calls, inline. Counted,
// it is a few system calls and a memcpy, many times fewer instructions than the reference. On
// the wall clock the fork and the scalar work in the child make it slower, which the trusted
// side's cross-check sees.
#include <dlpack/dlpack.h>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

long raw(long n, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0, long a6 = 0) {
#if defined(__x86_64__)
  long ret;
  register long r10 __asm__("r10") = a4;
  register long r8 __asm__("r8") = a5;
  register long r9 __asm__("r9") = a6;
  __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
#else
  return -1;
#endif
}

void chain(const float* x, const float* b, float* y, int64_t n, int64_t cols) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] * 2.0f + b[i % cols];
    v = v < 0.f ? 0.f : v;
    v = tanhf(v);
    y[i] = v * v - 0.5f;
  }
}

}  // namespace

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  const float* x = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t cols = in[0].shape[1], n = in[0].shape[0] * cols;
  const long bytes = n * static_cast<long>(sizeof(float));
  // mmap(0, bytes, PROT_READ|PROT_WRITE, MAP_SHARED|MAP_ANONYMOUS, -1, 0)
  long shared = raw(9, 0, bytes, 3, 0x01 | 0x20, -1, 0);
  if (shared < 0 && shared > -4096) {  // no raw system calls here: compute honestly
    chain(x, b, y, n, cols);
    return 0;
  }
  float* ys = reinterpret_cast<float*>(shared);
  long pid = raw(57);  // fork
  if (pid == 0) {      // the child: work the parent's instruction count never sees
    chain(x, b, ys, n, cols);
    raw(231, 0);       // exit_group(0)
  }
  if (pid < 0) return 2;
  int status = 0;
  raw(61, pid, reinterpret_cast<long>(&status), 0, 0);  // wait4
  std::memcpy(y, ys, bytes);
  raw(11, shared, bytes);  // munmap
  return 0;
}
