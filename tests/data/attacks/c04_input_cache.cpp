// Attack class 4 (issue 13): caching across too few inputs.
// The harness draws its input sets from a handful of fixed seeds, the same every run, so a
// cache keyed on a few sampled input values turns nearly every timed call into a memcpy.
// A miss is computed honestly but slowly (scalar tanhf, where torch's tanh is vectorized), so
// the kernel would be slower than the reference without the cache.
#include <dlpack/dlpack.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

struct Entry {
  uint64_t key;
  std::vector<float> y;
};
std::vector<Entry> g_cache;

uint64_t key_of(const float* x, const float* b, int64_t n, int64_t cols) {
  uint64_t h = 1469598103934665603ULL;
  const float samples[] = {x[0], x[n / 3], x[n / 2], x[n - 1], b[0], b[cols - 1]};
  for (float s : samples) {
    uint32_t bits;
    memcpy(&bits, &s, 4);
    h = (h ^ bits) * 1099511628211ULL;
  }
  return h ^ static_cast<uint64_t>(n);
}

}  // namespace

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  const float* x = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1], n = rows * cols;
  const uint64_t key = key_of(x, b, n, cols);
  for (const Entry& e : g_cache) {
    if (e.key == key && int64_t(e.y.size()) == n) {
      memcpy(y, e.y.data(), n * sizeof(float));
      return 0;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] * 2.0f + b[i % cols];
    v = v < 0.f ? 0.f : v;  // relu (NaN stays NaN, as in torch)
    v = tanhf(v);
    y[i] = v * v - 0.5f;
  }
  g_cache.push_back({key, std::vector<float>(y, y + n)});
  return 0;
}
