// Fills its job folder under the per-file limit: 48 files of 4 MiB each (192 MiB), written
// at load time to $TMPDIR (the sandbox's job folder), then computes honestly. RLIMIT_FSIZE
// stops no single one of them; only a cap on the folder's total can.
#include <dlpack/dlpack.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

__attribute__((constructor)) void fill() {
  const char* dir = getenv("TMPDIR");
  static char chunk[1 << 20];
  memset(chunk, 'x', sizeof chunk);
  for (int k = 0; k < 48; ++k) {
    std::string path = std::string(dir ? dir : ".") + "/fill." + std::to_string(k);
    FILE* f = fopen(path.c_str(), "wb");
    if (!f) return;
    for (int i = 0; i < 4; ++i) fwrite(chunk, 1, sizeof chunk, f);
    fclose(f);
  }
}

}  // namespace

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  const float* x = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v = x[r * cols + c] * 2.0f + b[c];
      v = v < 0.f ? 0.f : v;
      v = tanhf(v);
      y[r * cols + c] = v * v - 0.5f;
    }
  return 0;
}
