// Parameters follow the arguments: in[0] = x, in[1] = fc.weight, in[2] = fc.bias.
#include <dlpack/dlpack.h>
#include <cstdint>

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  if (n_in != 3 || n_out != 1) return 1;
  const float* x = (const float*)in[0].data;
  const float* w = (const float*)in[1].data;
  const float* b = (const float*)in[2].data;
  float* y = (float*)out[0].data;
  const int64_t m = in[0].shape[0], k = in[0].shape[1], n = in[1].shape[0];
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = b[j];
      for (int64_t p = 0; p < k; ++p) acc += x[i * k + p] * w[j * k + p];
      y[i * n + j] = acc > 0.f ? acc : 0.f;
    }
  return 0;
}
