// File mappings the addon hands to JS (file_binding.cc's mapFile), owned by shares: the external
// ArrayBuffer holds one and every job that reads the memory takes one (token_set.h), so a mapping is
// unmapped when the last of them lets go, not when the JS object is collected, and pinning it needs
// neither a copy nor V8's C++ API. A registry of live mappings by address finds the share of a typed
// array that views one.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

struct MappedMemory {
  void* base;     // the whole mapping, page-aligned
  size_t length;
  ~MappedMemory();
};

namespace mapped_detail {
inline std::mutex& Lock() {
  static std::mutex m;
  return m;
}
inline std::map<uintptr_t, std::weak_ptr<MappedMemory>>& Live() {
  static std::map<uintptr_t, std::weak_ptr<MappedMemory>> live;
  return live;
}
}  // namespace mapped_detail

inline MappedMemory::~MappedMemory() {
  {
    // erased before the address range is released, so a later mapping at the same address is new
    std::lock_guard<std::mutex> g(mapped_detail::Lock());
    auto& live = mapped_detail::Live();
    auto it = live.find(reinterpret_cast<uintptr_t>(base));
    if (it != live.end() && it->second.expired()) live.erase(it);
  }
  munmap(base, length);
}

// Takes ownership of a mapping made with mmap and registers it.
inline std::shared_ptr<MappedMemory> AdoptMapping(void* base, size_t length) {
  std::shared_ptr<MappedMemory> m(new MappedMemory{base, length});
  std::lock_guard<std::mutex> g(mapped_detail::Lock());
  mapped_detail::Live()[reinterpret_cast<uintptr_t>(base)] = m;
  return m;
}

// A share in the live mapping that holds bytes [p, p + n), or null when the addon mapped none.
inline std::shared_ptr<MappedMemory> FindMapping(const void* p, size_t n) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> g(mapped_detail::Lock());
  auto& live = mapped_detail::Live();
  auto it = live.upper_bound(at);
  if (it == live.begin()) return nullptr;
  std::shared_ptr<MappedMemory> m = std::prev(it)->second.lock();
  if (!m) return nullptr;
  const uintptr_t base = reinterpret_cast<uintptr_t>(m->base);
  return at >= base && n <= m->length && at - base <= m->length - n ? m : nullptr;
}
