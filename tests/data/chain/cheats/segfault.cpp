// Cheat: Dereferences NULL.
#include <dlpack/dlpack.h>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cstdio>
static void chain(const DLTensor* in, float* y, int64_t n) {
  const float* x = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  const int64_t cols = in[0].shape[1];
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] * 2.0f + b[i % cols];
    v = v > 0.f ? v : 0.f;
    y[i] = v * v - 0.5f;
  }
}
static int64_t numel(const DLTensor& t) { int64_t n = 1; for (int i = 0; i < t.ndim; ++i) n *= t.shape[i]; return n; }

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  float* y = static_cast<float*>(out[0].data);
  const int64_t n = numel(out[0]);
  *static_cast<volatile int*>(nullptr) = 1;
  return 0;
}
