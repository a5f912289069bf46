// Attack class 5 (issue 13): sabotaging the reference.
// The reference is timed in the same process as the candidate (only processes are looked
// at, not threads). At load time it pins the harness's main thread, which is where its own
// serial kernel runs, to the core it is on, and starts two busy threads on every other core.
// torch's intra-op worker threads, which run the other share of every reference op, land on
// those cores and get a third of them; the candidate's own calls never compete with the
// spinners. The kernel is honest but slower than an unloaded reference (scalar tanhf, where
// torch's tanh is vectorized), so a "faster" verdict can only come from the slowed reference.
#include <dlpack/dlpack.h>
#include <cmath>
#include <cstdint>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

namespace {

volatile uint64_t g_sink = 0;

void* spin(void*) {
  uint64_t acc = 1;
  for (;;) {
    for (int i = 0; i < 4096; ++i) acc = acc * 6364136223846793005ULL + 1442695040888963407ULL;
    g_sink = acc;
  }
  return nullptr;
}

__attribute__((constructor)) void start_spinners() {
  const int mine = sched_getcpu();
  cpu_set_t allowed;
  if (mine < 0 || sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  cpu_set_t main_only, others;
  CPU_ZERO(&main_only);
  CPU_ZERO(&others);
  CPU_SET(mine, &main_only);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (c != mine && CPU_ISSET(c, &allowed)) CPU_SET(c, &others);
  if (CPU_COUNT(&others) == 0) return;
  sched_setaffinity(0, sizeof main_only, &main_only);
  for (int i = 0; i < 2 * CPU_COUNT(&others); ++i) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setaffinity_np(&attr, sizeof others, &others);
    pthread_t t;
    if (pthread_create(&t, &attr, spin, nullptr) == 0) pthread_detach(t);
    pthread_attr_destroy(&attr);
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
