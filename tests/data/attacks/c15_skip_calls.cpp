// Attack class 4 (issue 13), the sampling variant: skipping its work on one call in ten,
// leaving the output as the caller handed it over. If only a few outputs were re-checked, the
// skipped calls would pass unseen and the average call would look 10% cheaper. (A first
// version waited 32 calls before skipping; on a loaded machine a block made fewer calls than
// that, so it never skipped at all: the count must be small enough to land in every block.) The kernel is fast and honest otherwise (vectorizable,
// multi-threaded), so what decides its verdict is whether a skipped call is seen.
#include <dlpack/dlpack.h>
#include <cmath>
#include <cstdint>

static int64_t g_calls = 0;

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  if (++g_calls % 10 == 0) return 0;  // every tenth call does nothing
  const float* x = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v = x[r * cols + c] * 2.0f + b[c];
      v = v < 0.f ? 0.f : v;
      v = std::tanh(v);
      y[r * cols + c] = v * v - 0.5f;
    }
  return 0;
}
