// A hand-written seed for mylib.fused_chain: one pass, rows split across OpenMP threads.
// The built-in policy measures every configuration of the parameters below.
// maxcode-tune: CHUNK=1,16,128 UNROLL=1,4
#include <dlpack/dlpack.h>
#include <cstdint>

// GCC does not expand macros inside #pragma, but it does inside _Pragma.
#define MAXCODE_PRAGMA(x) _Pragma(#x)
#define MAXCODE_UNROLL(n) MAXCODE_PRAGMA(GCC unroll n)
#define MAXCODE_SCHEDULE(n) MAXCODE_PRAGMA(omp parallel for schedule(static, n))

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  if (n_in != 2 || n_out != 1 || in[0].ndim != 2) return 1;
  const float* x = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  MAXCODE_SCHEDULE(CHUNK)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    MAXCODE_UNROLL(UNROLL)
    for (int64_t c = 0; c < cols; ++c) {
      float v = xr[c] * 2.0f + b[c];
      v = v < 0.f ? 0.f : v;  // NaN stays NaN, as in torch.relu
      yr[c] = v * v - 0.5f;
    }
  }
  return 0;
}
