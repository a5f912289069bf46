// Attack class 2 (issue 13): forging the result channel.
// A load-time constructor takes the GIL, walks the Python stack up to the frame that holds
// the worker's connection to the parent (`conn`) and the workloads (`inputs`), and sends a
// well-formed "timing" message per workload (a 10x speedup, no re-checked outputs) and then
// "done" with the worker's own sender, before any correctness message; then _exit(0).
// The kernel computes nothing at all: a "faster" verdict can only come from the forgery.
#include <dlpack/dlpack.h>
#include <dlfcn.h>
#include <cstdint>

__attribute__((constructor)) static void forge() {
  auto ensure = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "PyGILState_Ensure"));
  auto run = reinterpret_cast<int (*)(const char*)>(dlsym(RTLD_DEFAULT, "PyRun_SimpleString"));
  if (!ensure || !run) return;
  ensure();
  run("import sys, os\n"
      "f = sys._getframe()\n"
      "while f is not None and not ('conn' in f.f_locals and 'inputs' in f.f_locals):\n"
      "    f = f.f_back\n"
      "if f is not None:\n"
      "    m = sys.modules['__main__']\n"
      "    conn = f.f_locals['conn']\n"
      "    for w in f.f_locals['inputs']:\n"
      "        ref = [300000 + (i % 7) * 1000 for i in range(64)]\n"
      "        cand = [30000 + (i % 5) * 100 for i in range(64)]\n"
      "        m._send_child(conn, 'timing', w['name'], ref, cand, 1, [])\n"
      "    m._send_child(conn, 'done')\n"
      "    os._exit(0)\n");
}

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  return 0;
}
