// Attack class 11 (issue 13): narrow inputs.
// Random-normal inputs at one shape never reach large magnitudes or special values, so this
// fused kernel takes shortcuts that only those would expose: its relu turns NaN into 0 (torch's
// keeps NaN) and tanh's argument is clamped to 9. It is right on every input set drawn like the
// captured ones, and wrong on special values.
#include <dlpack/dlpack.h>
#include <cmath>
#include <cstdint>

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  const float* x = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v = x[r * cols + c] * 2.0f + b[c];
      v = v > 0.f ? v : 0.f;   // NaN -> 0
      v = tanhf(v < 9.f ? v : 9.f);  // clamped: inf never reaches tanhf
      y[r * cols + c] = v * v - 0.5f;
    }
  return 0;
}
