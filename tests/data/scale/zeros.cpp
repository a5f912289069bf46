#include <dlpack/dlpack.h>
#include <cstdint>
#include <cstring>

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  memset(out[0].data, 0, out[0].shape[0] * sizeof(float));
  return 0;
}
