// Page-locked host memory: the scan slots' staging and the segment files pinned across scans.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "stream_files.h"
#include "stream_scan.h"

namespace maxsim_cuda {

void* PinnedAlloc(uint64_t bytes) {
  void* p = nullptr;
  Check(Api().cuMemHostAlloc(&p, std::max<uint64_t>(bytes, 64), cu::CU_MEMHOSTALLOC_DEFAULT), "cuMemHostAlloc");
  return p;
}

void* RegisteredAlloc(uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("cannot map " + std::to_string(bytes) + " bytes of staging: " + std::strerror(errno));
  madvise(p, bytes, MADV_HUGEPAGE);  // fewer pages to lock where transparent huge pages are on (else a no-op)
  const cu::CUresult rc = Api().cuMemHostRegister(p, bytes, 0);
  if (rc != 0) munmap(p, bytes);
  Check(rc, "cuMemHostRegister");
  return p;
}

PinnedFiles::~PinnedFiles() {
  if (maps.empty()) return;
  // the registrations: each file whole, or each registered chunk
  std::vector<void*> regs;
  for (size_t f = 0; f < maps.size(); f++) {
    if (!maps[f].first) continue;
    if (chunk == 0) {
      regs.push_back(maps[f].first);
      continue;
    }
    for (size_t c = 0; c < state[f].size(); c++) {
      if (state[f][c] == 2) regs.push_back(static_cast<uint8_t*>(maps[f].first) + c * chunk);
    }
  }
  Runtime* rt = runtime;
  auto m = maps;
  rt->Post([m, regs] {
    try {
      const Driver& d = Api();
      for (void* p : regs) d.cuMemHostUnregister(p);
    } catch (...) {
    }
    for (const auto& x : m) {
      if (x.first) munmap(x.first, x.second);
    }
  });
}

std::string PinnedFiles::Ensure(Runtime& rt, int file, uint64_t c, uint64_t* added) {
  auto& st = state[file];
  {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return st[c] != 1; });  // another reader (or scan) is registering it
    if (st[c] == 2) return "";
    st[c] = 1;
  }
  const uint64_t from = c * chunk, to = std::min<uint64_t>(maps[file].second, from + chunk);
  const Driver& d = Api();
  cu::CUresult rc = d.cuCtxSetCurrent(rt.context());
  if (rc == 0) {
    rc = d.cuMemHostRegister(static_cast<uint8_t*>(maps[file].first) + from, to - from,
                             cu::CU_MEMHOSTREGISTER_READ_ONLY | cu::CU_MEMHOSTREGISTER_PORTABLE);
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    st[c] = rc == 0 ? 2 : 0;  // a failure leaves it unregistered (a later scan may try again)
  }
  cv.notify_all();
  if (rc != 0) return "cuMemHostRegister of " + paths[file] + " failed: " + DescribeResult(rc);
  registered += to - from;
  *added += to - from;
  return "";
}

std::shared_ptr<PinnedFiles> PinFiles(Runtime& rt, const std::vector<std::string>& paths, uint64_t chunk_bytes) {
  const Driver& d = Api();
  auto pin = std::make_shared<PinnedFiles>();
  pin->runtime = &rt;
  pin->paths = paths;
  pin->chunk = chunk_bytes;
  Files files(paths);
  files.MapAll(paths);
  // The mappings move to the pin; each is registered whole unless pinned ahead (failures release
  // what was done).
  for (size_t i = 0; i < files.maps.size(); i++) {
    auto& m = files.maps[i];
    if (m.first && chunk_bytes == 0) {
      // portable: pinned for every context, so scans on all GPUs of the host DMA from the one pin
      const cu::CUresult rc =
          d.cuMemHostRegister(m.first, m.second, cu::CU_MEMHOSTREGISTER_READ_ONLY | cu::CU_MEMHOSTREGISTER_PORTABLE);
      if (rc != 0) throw std::runtime_error("cuMemHostRegister of " + paths[i] + " failed: " + DescribeResult(rc));
      pin->registered += m.second;
    }
    pin->maps.push_back(m);
    pin->state.emplace_back(chunk_bytes ? (m.second + chunk_bytes - 1) / chunk_bytes : 0, uint8_t(0));
    pin->bytes += m.second;
    m = {nullptr, 0};
  }
  return pin;
}

}  // namespace maxsim_cuda
