// One pass for model.Model. Inputs: x, then the module's parameters in
// named_parameters() order: scale, shift.
// maxcode-tune: ROWS_PER_CHUNK=4,32
#include <dlpack/dlpack.h>
#include <cstdint>

#define MAXCODE_PRAGMA(x) _Pragma(#x)
#define MAXCODE_SCHEDULE(n) MAXCODE_PRAGMA(omp parallel for schedule(static, n))

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  if (n_in != 3 || n_out != 1 || in[0].ndim != 2) return 1;
  const float* x = static_cast<const float*>(in[0].data);
  const float* scale = static_cast<const float*>(in[1].data);
  const float* shift = static_cast<const float*>(in[2].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  MAXCODE_SCHEDULE(ROWS_PER_CHUNK)
  for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) {
      const float v = x[r * cols + c] * scale[c] + shift[c];
      y[r * cols + c] = v < 0.f ? 0.f : v;  // NaN stays NaN, as in torch.relu
    }
  }
  return 0;
}
