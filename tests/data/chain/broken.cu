// Does not compile: a type error.
__global__ void k(float* y) { y[threadIdx.x] = not_declared_anywhere; }
