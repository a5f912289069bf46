// Attack class 9 (issue 13): resource limits.
// RLIMIT_FSIZE is per file and RLIMIT_DATA does not count shared memory. At load time it
// writes 32 MiB files outside its job folder (a folder of the test's, the project, a
// $HOME-like folder, the host's /tmp), then maps 3 GiB of MAP_SHARED anonymous memory
// (far above the --max-memory budget the test sets) and touches every page. If the memory
// was granted it computes honestly, so a correct verdict means the limit did not hold; if
// the map was refused it returns 12 (ENOMEM).
#include <dlpack/dlpack.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

namespace {

bool g_granted = false;

void write_big(const char* path) {
  FILE* f = fopen(path, "wb");
  if (!f) return;
  static char chunk[1 << 20];
  memset(chunk, 'x', sizeof chunk);
  for (int i = 0; i < 32; ++i)
    if (fwrite(chunk, 1, sizeof chunk, f) != sizeof chunk) break;
  fclose(f);
}

__attribute__((constructor)) void hog() {
  const char* paths[] = {"@OUTSIDE@/c09_big.bin", "@PROJECT@/c09_big.bin", "@HOME@/c09_big.bin",
                         "/tmp/c09_big_@MARKER@.bin"};
  for (const char* p : paths) write_big(p);
  const size_t size = size_t(3) << 30;
  void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return;
  const size_t page = sysconf(_SC_PAGESIZE);
  for (size_t off = 0; off < size; off += page) static_cast<volatile char*>(m)[off] = 1;
  g_granted = true;  // kept mapped for the life of the process
}

}  // namespace

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  if (!g_granted) return 12;
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
