// The positive control: an honest kernel that is really faster than the reference (one fused,
// vectorized, multi-threaded pass; tanh from exp(-2v) as a Taylor polynomial raised to the 16th
// power, about 1e-6 off).
// If the oracle stops calling this "faster", an attacker's "not faster" proves nothing: the
// oracle may simply have lost the ability to see a speedup.
#include <dlpack/dlpack.h>
#include <cmath>
#include <cstdint>

namespace {

inline float tanh_nonneg(float v) {  // v >= 0 or NaN
  const float c = v < 9.f ? v : 9.f;  // tanh(9) is 1 in float
  const float r = -0.125f * c;        // exp(-2c) = exp(r)^16, r in [-1.125, 0]
  float p = 2.7557319224e-07f;
  p = p * r + 2.7557319224e-06f;
  p = p * r + 2.4801587302e-05f;
  p = p * r + 1.9841269841e-04f;
  p = p * r + 1.3888888889e-03f;
  p = p * r + 8.3333333333e-03f;
  p = p * r + 4.1666666667e-02f;
  p = p * r + 1.6666666667e-01f;
  p = p * r + 5.0000000000e-01f;
  p = p * r + 1.0000000000e+00f;
  p = p * r + 1.0000000000e+00f;
  float e = p * p;
  e *= e;
  e *= e;
  e *= e;
  const float t = (1.f - e) / (1.f + e);
  return v == v ? t : v;  // NaN stays NaN, as in torch
}

}  // namespace

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  if (n_in != 2 || n_out != 1) return 1;
  const float* x = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict xr = x + r * cols;
    const float* __restrict br = b;
    float* __restrict yr = y + r * cols;
    const int64_t n = cols;
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) {
      float v = xr[c] * 2.0f + br[c];
      v = v < 0.f ? 0.f : v;
      float t = tanh_nonneg(v);
      yr[c] = t * t - 0.5f;
    }
  }
  return 0;
}
