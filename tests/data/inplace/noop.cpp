// Cheat: claims to work in place but does nothing.
#include <dlpack/dlpack.h>
#include <cstdint>

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) { return 0; }
