// The shim's dlopen and dlmopen (what they answer: shim/hooks_driver_entry.cc).
//
// They carry glibc's symbol versions -- GLIBC_2.34, and the GLIBC_2.2.5 /
// GLIBC_2.3.4 ones that binaries linked against libdl reference -- so the
// application's versioned references bind to them; the generated shim.map
// defines those version nodes. Linked into librevenant_shim.so only (a link
// without that version script cannot define these versions).
//
// glibc's dlopen takes its caller from its return address: the caller's
// RUNPATH is searched and its namespace used (libcudnn loads its parts from
// $ORIGIN, libtorch_cuda finds libnvrtc by its RUNPATH). So a request that
// is not for the driver must enter the real dlopen with the application's
// own return address: on x86-64 the entry points are assembly trampolines
// that ask the shim and either return its answer or jump to the real
// function with the caller's frame intact (//shim:dlopen_caller_test).
#include "shim/call.h"
#include "shim/driver_entry.h"

extern "C" {
__attribute__((visibility("hidden"))) void* revenant_real_dlopen = nullptr;
__attribute__((visibility("hidden"))) void* revenant_real_dlmopen = nullptr;

// 1 with *handle set: answered (the driver, or no real loader); 0: enter
// the real function (its address is in revenant_real_dlopen/_dlmopen then).
__attribute__((visibility("hidden"), used)) int revenant_dlopen_hook(const char* file, int mode,
                                                                    void** handle) {
  if (revenant::shim::AnswerDriverLoad(file, mode, handle)) return 1;
  void* real = revenant::shim::RealDlopenAddress();
  if (real == nullptr) {
    *handle = nullptr;
    return 1;
  }
  __atomic_store_n(&revenant_real_dlopen, real, __ATOMIC_RELEASE);
  return 0;
}

__attribute__((visibility("hidden"), used)) int revenant_dlmopen_hook(const char* file, int mode,
                                                                     void** handle) {
  if (revenant::shim::AnswerDriverLoad(file, mode, handle)) return 1;
  void* real = revenant::shim::RealDlmopenAddress();
  if (real == nullptr) {
    *handle = nullptr;
    return 1;
  }
  __atomic_store_n(&revenant_real_dlmopen, real, __ATOMIC_RELEASE);
  return 0;
}
}  // extern "C"

#if defined(__x86_64__)
// void* dlopen(const char* file, int mode): file in rdi, mode in esi.
// Stack at entry is 8 mod 16; two pushes and 24 bytes (the answer's slot at
// (%rsp)) make it 16-aligned for the call.
__asm__(R"(
  .text
  .p2align 4
  .globl revenant_dlopen
  .globl revenant_dlopen_2_2_5
  .type revenant_dlopen, @function
  .type revenant_dlopen_2_2_5, @function
revenant_dlopen:
revenant_dlopen_2_2_5:
  .cfi_startproc
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $24, %rsp
  .cfi_adjust_cfa_offset 24
  movq %rsp, %rdx
  call revenant_dlopen_hook
  movq (%rsp), %rcx
  addq $24, %rsp
  .cfi_adjust_cfa_offset -24
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  testl %eax, %eax
  jz 1f
  movq %rcx, %rax
  ret
1:
  jmpq *revenant_real_dlopen(%rip)
  .cfi_endproc
  .size revenant_dlopen, .-revenant_dlopen
  .size revenant_dlopen_2_2_5, .-revenant_dlopen_2_2_5

  .p2align 4
  .globl revenant_dlmopen
  .globl revenant_dlmopen_2_3_4
  .type revenant_dlmopen, @function
  .type revenant_dlmopen_2_3_4, @function
revenant_dlmopen:
revenant_dlmopen_2_3_4:
  .cfi_startproc
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  pushq %rdx
  .cfi_adjust_cfa_offset 8
  subq $16, %rsp
  .cfi_adjust_cfa_offset 16
  movq %rsi, %rdi
  movl %edx, %esi
  movq %rsp, %rdx
  call revenant_dlmopen_hook
  movq (%rsp), %rcx
  addq $16, %rsp
  .cfi_adjust_cfa_offset -16
  popq %rdx
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  testl %eax, %eax
  jz 1f
  movq %rcx, %rax
  ret
1:
  jmpq *revenant_real_dlmopen(%rip)
  .cfi_endproc
  .size revenant_dlmopen, .-revenant_dlmopen
  .size revenant_dlmopen_2_3_4, .-revenant_dlmopen_2_3_4
)");
#else
// Elsewhere the forwarding relies on the compiler's tail call.
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
#endif
__asm__(".symver revenant_dlopen, dlopen@@GLIBC_2.34");
__asm__(".symver revenant_dlopen_2_2_5, dlopen@GLIBC_2.2.5");
__asm__(".symver revenant_dlmopen, dlmopen@@GLIBC_2.34");
__asm__(".symver revenant_dlmopen_2_3_4, dlmopen@GLIBC_2.3.4");
