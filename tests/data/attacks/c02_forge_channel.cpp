// Attack class 2 (issue 13): forging the result channel.
// A load-time constructor takes the GIL, walks the Python stack up to the frame that holds
// the worker's connection to the parent (`conn`) and the workloads (`inputs`) and, with the
// worker's own sender, claims the work is done before any correctness message: "loaded" then
// "done" in the protocol of named events with keyword data, or in the older positional one a
// "timing" message per workload (a 10x speedup, no re-checked outputs) then "done"; then
// _exit(0).
// The kernel computes nothing at all: a "faster" verdict can only come from the forgery.
#include <dlpack/dlpack.h>
#include <dlfcn.h>
#include <cstdint>

__attribute__((constructor)) static void forge() {
  auto ensure = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "PyGILState_Ensure"));
  auto run = reinterpret_cast<int (*)(const char*)>(dlsym(RTLD_DEFAULT, "PyRun_SimpleString"));
  if (!ensure || !run) return;
  ensure();
  run(
      "import sys, os\n"
      "def _forge():\n"
      "    f = sys._getframe()\n"
      "    while f is not None and not ('conn' in f.f_locals and 'inputs' in f.f_locals):\n"
      "        f = f.f_back\n"
      "    if f is None:\n"
      "        return\n"
      "    send = sys.modules['__main__']._send_child\n"
      "    conn = f.f_locals['conn']\n"
      "    ref = [300000 + (i % 7) * 1000 for i in range(64)]\n"
      "    cand = [30000 + (i % 5) * 100 for i in range(64)]\n"
      "    try:  # the protocol of named events with keyword data: loaded, then straight to done\n"
      "        send(conn, 'loaded', load_s=0.0)\n"
      "    except TypeError:  # the older positional one: a timing message per workload, then done\n"
      "        for w in f.f_locals['inputs']:\n"
      "            send(conn, 'timing', w['name'], ref, cand, 1, [])\n"
      "    send(conn, 'done')\n"
      "    os._exit(0)\n"
      "_forge()\n");
}

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  return 0;
}
