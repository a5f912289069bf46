// Wrong ABI: compiles, but defines no maxcode_run.
#include <dlpack/dlpack.h>
extern "C" int not_the_entry(const DLTensor*) { return 0; }
