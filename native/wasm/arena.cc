#include "arena.h"

extern "C" unsigned char __heap_base;

namespace maxsim_wasm {

namespace {

uintptr_t g_top = 0;

uintptr_t HeapBase() { return (reinterpret_cast<uintptr_t>(&__heap_base) + 63) & ~uintptr_t{63}; }

}  // namespace

void* Alloc(uint32_t bytes) {
  if (g_top == 0) g_top = HeapBase();
  const uintptr_t p = g_top;
  const uint64_t end = static_cast<uint64_t>(p) + ((static_cast<uint64_t>(bytes) + 63) & ~uint64_t{63});
  if (end > 0xFFFF0000ull) return nullptr;
  const uint64_t have = static_cast<uint64_t>(__builtin_wasm_memory_size(0)) << 16;
  if (end > have) {
    const uint64_t pages = (end - have + 65535) >> 16;
    if (__builtin_wasm_memory_grow(0, static_cast<unsigned long>(pages)) == static_cast<unsigned long>(-1)) return nullptr;
  }
  g_top = static_cast<uintptr_t>(end);
  return reinterpret_cast<void*>(p);
}

extern "C" {

__attribute__((export_name("alloc"))) void* wasm_alloc(uint32_t bytes) { return Alloc(bytes); }
__attribute__((export_name("reset"))) void wasm_reset() { g_top = HeapBase(); }
// Where the next allocation starts: the caller keeps a resident corpus below it across calls.
__attribute__((export_name("mark"))) uint32_t wasm_mark() { return static_cast<uint32_t>(g_top ? g_top : HeapBase()); }
__attribute__((export_name("release"))) void wasm_release(uint32_t mark) { g_top = mark; }

}  // extern "C"

}  // namespace maxsim_wasm
