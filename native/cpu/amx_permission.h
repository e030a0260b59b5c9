// Linux hands out AMX tile state only after the process asks for it (XFEATURE_XTILEDATA = 18).
// Shared by the AMX translation units (bf16 and int8). `static inline`: every TU keeps its own copy,
// so code built with one TU's -m flags never stands in for another's.
#pragma once
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>

static inline bool RequestAmxPermission() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}
#else
static inline bool RequestAmxPermission() { return false; }
#endif
