// The shim's answer to the application loading the driver itself
// (shim/hooks_driver_entry.cc): dlopen/dlmopen of libcuda.so.1 or libcuda.so
// return a handle of the shim; anything else goes to the real loader.
#ifndef REVENANT_SHIM_DRIVER_ENTRY_H_
#define REVENANT_SHIM_DRIVER_ENTRY_H_

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>

namespace revenant {
namespace shim {

void* Dlopen(const char* file, int mode);
void* Dlmopen(Lmid_t lmid, const char* file, int mode);

// The parts of those for an interposer that must enter the real dlopen with
// its caller's own frame (glibc finds the caller's RUNPATH and namespace from
// the return address): true with *handle set when `file` is the driver.
bool AnswerDriverLoad(const char* file, int mode, void** handle);
// The real dlopen / dlmopen (null if the loader has none).
void* RealDlopenAddress();
void* RealDlmopenAddress();

}  // namespace shim
}  // namespace revenant

#endif  // REVENANT_SHIM_DRIVER_ENTRY_H_
