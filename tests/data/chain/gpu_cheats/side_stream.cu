// Cheat: does the chain 64 times over, on a stream of its own that the caller's stream does not
// wait for, and returns at once. A timer that synchronised only the stream it passed in would
// stop its clock before any of that work ran; the oracle's device-wide synchronise counts it all.
#include <dlpack/dlpack.h>
#include <cstdint>
#include <cuda_runtime.h>

__global__ void chain(const float* x, const float* b, float* y, int64_t n, int64_t cols) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i] * 2.0f + b[i % cols];
    v = v < 0.f ? 0.f : v;
    y[i] = v * v - 0.5f;
  }
}

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  static cudaStream_t side = nullptr;
  if (side == nullptr && cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) != cudaSuccess) return 1;
  const int64_t cols = in[0].shape[1], n = in[0].shape[0] * cols;
  const int threads = 256;
  for (int r = 0; r < 64; ++r)
    chain<<<(n + threads - 1) / threads, threads, 0, side>>>(
        (const float*)in[0].data, (const float*)in[1].data, (float*)out[0].data, n, cols);
  return (int)cudaGetLastError();
}
