// Leaves a stash for the candidate after it (issue 13): a candidate can record what it saw
// (the range sets' inputs and its outputs, say) where the next candidate of the same worker
// finds it. At load time it writes a file into the job folder the worker shares ($TMPDIR's
// parent), into the sandbox's /tmp and /dev/shm, and makes a System V shared memory segment.
// The kernel is honest.
#include <dlpack/dlpack.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/ipc.h>
#include <sys/shm.h>

namespace {

__attribute__((constructor)) void stash() {
  const char* tmpdir = getenv("TMPDIR");
  std::string job = tmpdir ? std::string(tmpdir) + "/.." : ".";
  for (const std::string& path : {job + "/stash", std::string("/tmp/stash"), std::string("/dev/shm/stash")}) {
    if (FILE* f = fopen(path.c_str(), "w")) {
      fputs("answers", f);
      fclose(f);
    }
  }
  int id = shmget(0x4d58, 4096, IPC_CREAT | 0600);
  if (id >= 0) {
    if (void* p = shmat(id, nullptr, 0); p != reinterpret_cast<void*>(-1)) {
      strcpy(static_cast<char*>(p), "answers");
      shmdt(p);
    }
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
      y[r * cols + c] = v * v - 0.5f;
    }
  return 0;
}
