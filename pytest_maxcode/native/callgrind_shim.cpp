// Callgrind client requests for the instruction-count timer (--timer instructions).
// The worker runs uninstrumented (--instr-atstart=no: importing torch is then 3x faster),
// starts instrumentation before its first measured call, and brackets each measured call
// with toggle/toggle/dump, so every dump holds exactly one call's instructions, all threads included.
#include <valgrind/callgrind.h>

extern "C" {
void maxcode_cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void maxcode_cg_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
void maxcode_cg_dump(const char* tag) { CALLGRIND_DUMP_STATS_AT(tag); }
int maxcode_cg_running(void) { return RUNNING_ON_VALGRIND; }
}
