// The shim's dlopen and dlmopen (what they answer: shim/hooks_driver_entry.cc).
// They carry glibc's symbol versions -- GLIBC_2.34, and the GLIBC_2.2.5 /
// GLIBC_2.3.4 ones that binaries linked against libdl reference -- so the
// application's versioned references bind to them; the generated shim.map
// defines those version nodes. Linked into librevenant_shim.so only (a link
// without that version script cannot define these versions).
#include "shim/call.h"
#include "shim/driver_entry.h"

extern "C" REVENANT_EXPORT void* revenant_dlopen(const char* file, int mode) {
  return revenant::shim::Dlopen(file, mode);
}
extern "C" REVENANT_EXPORT void* revenant_dlopen_2_2_5(const char* file, int mode) {
  return revenant::shim::Dlopen(file, mode);
}
extern "C" REVENANT_EXPORT void* revenant_dlmopen(Lmid_t lmid, const char* file, int mode) {
  return revenant::shim::Dlmopen(lmid, file, mode);
}
extern "C" REVENANT_EXPORT void* revenant_dlmopen_2_3_4(Lmid_t lmid, const char* file, int mode) {
  return revenant::shim::Dlmopen(lmid, file, mode);
}
__asm__(".symver revenant_dlopen, dlopen@@GLIBC_2.34");
__asm__(".symver revenant_dlopen_2_2_5, dlopen@GLIBC_2.2.5");
__asm__(".symver revenant_dlmopen, dlmopen@@GLIBC_2.34");
__asm__(".symver revenant_dlmopen_2_3_4, dlmopen@GLIBC_2.3.4");
