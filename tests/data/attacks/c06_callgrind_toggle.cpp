// Attack class 6 (issue 13): the instruction timer.
// Under --timer instructions the harness brackets each call with callgrind's
// TOGGLE_COLLECT client request. The candidate issues the same request itself, as the raw
// amd64 magic sequence (no valgrind header to grep for), at entry and again before it
// returns, so collection is off for exactly its own work. The kernel is honest but slow
// (scalar tanhf, where torch's tanh is vectorized), so a "faster" count can only come from
// the toggles.
#include <dlpack/dlpack.h>
#include <cmath>
#include <cstdint>

namespace {

unsigned long client_request(unsigned long request) {
#if defined(__x86_64__)
  volatile unsigned long args[6] = {request, 0, 0, 0, 0, 0};
  unsigned long result = 0;
  __asm__ volatile("rolq $3,  %%rdi ; rolq $13, %%rdi\n\t"
                   "rolq $61, %%rdi ; rolq $51, %%rdi\n\t"
                   "xchgq %%rbx,%%rbx"
                   : "=d"(result)
                   : "a"(&args[0]), "0"(result)
                   : "cc", "memory");
  return result;
#else
  return 0;
#endif
}

// VG_USERREQ_TOOL_BASE('C','T') + 2: callgrind's TOGGLE_COLLECT
constexpr unsigned long kToggleCollect = ((unsigned long)('C' & 0xff) << 24 | (unsigned long)('T' & 0xff) << 16) + 2;

}  // namespace

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  client_request(kToggleCollect);
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
  client_request(kToggleCollect);
  return 0;
}
