// Reads the stash writer.cpp left (issue 13). Where it finds one, it says so on stderr and
// gives wrong results (a stand-in for using the stash): the verdict then shows whether
// anything of the candidate before it was still there. Otherwise the kernel is honest.
#include <dlpack/dlpack.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <unistd.h>

namespace {

bool g_found = false;

__attribute__((constructor)) void look() {
  const char* tmpdir = getenv("TMPDIR");
  std::string job = tmpdir ? std::string(tmpdir) + "/.." : ".";
  for (const std::string& path : {job + "/stash", std::string("/tmp/stash"), std::string("/dev/shm/stash")}) {
    if (access(path.c_str(), F_OK) == 0) {
      fprintf(stderr, "found %s\n", path.c_str());
      g_found = true;
    }
  }
  if (shmget(0x4d58, 0, 0) >= 0) {
    fprintf(stderr, "found the shared memory segment\n");
    g_found = true;
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
      v = v < 0.f ? 0.f : v;  // relu (NaN stays NaN, as in torch)
      v = tanhf(v);
      y[r * cols + c] = g_found ? 0.f : v * v - 0.5f;
    }
  return 0;
}
