// Cheat: computes once into a device buffer of its own, then copies that first result into the
// output on every later call, on the GPU (replay.cpp's trick where the host never sees the data).
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
  static float* saved = nullptr;
  const int64_t cols = in[0].shape[1], n = in[0].shape[0] * cols;
  cudaStream_t s = (cudaStream_t)stream;
  if (saved == nullptr) {
    if (cudaMalloc(&saved, n * sizeof(float)) != cudaSuccess) return 1;
    chain<<<(n + 255) / 256, 256, 0, s>>>((const float*)in[0].data, (const float*)in[1].data, saved, n, cols);
  }
  cudaMemcpyAsync(out[0].data, saved, n * sizeof(float), cudaMemcpyDeviceToDevice, s);
  return (int)cudaGetLastError();
}
