// The scan's files and page-locked staging (stream_files.cc, pinned_host.cc); internal to
// stream_scan.cc and PinFiles, not a public header.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace maxsim_cuda {

// O_DIRECT needs file offsets, lengths and buffers aligned to the device's logical block size; 4 KiB
// covers every common one (the slots are page-aligned, cuMemHostAlloc).
inline constexpr uint64_t kDirectAlign = 4096;

// The files of a scan, opened once and closed at the end.
struct Files {
  std::vector<int> fds;
  std::vector<std::pair<void*, size_t>> maps;  // register mode: each file mapped whole, read-only
  std::vector<int> direct_fds;                 // direct I/O: each file opened again with O_DIRECT
  // Opens every file with O_DIRECT; on refusal closes what it opened and returns why ("" on success).
  std::string OpenDirect(const std::vector<std::string>& paths);
  // The fraction of the files' pages in the page cache, from `samples` pages spread evenly over their
  // bytes (mincore on a read-only mapping; a file that cannot be mapped counts as not cached).
  double CachedFraction(int samples) const;
  void CloseDirect();
  // Maps every file (register mode).
  void MapAll(const std::vector<std::string>& paths);
  explicit Files(const std::vector<std::string>& paths);
  void Close();
  ~Files();
};

void* PinnedAlloc(uint64_t bytes);
// Page-locked staging for O_DIRECT reads: anonymous pages registered with the driver. (Memory from
// cuMemHostAlloc is mapped by the driver, and the kernel may refuse to DMA a file into it, EFAULT.)
void* RegisteredAlloc(uint64_t bytes);
// Reads bytes [offset, offset + n) of fd into dst; an error message (naming the file) or "".
std::string ReadRange(int fd, const std::string& path, uint8_t* dst, uint64_t offset, uint64_t n);
// O_DIRECT read of `len` bytes at `offset` (both aligned) into dst (aligned), of which the first `need`
// matter: a read may stop at the end of the file past `need`. An O_DIRECT read refused part-way
// (EINVAL: the file system; EFAULT: the buffer) gets the rest read through the page cache.
std::string ReadDirect(int direct_fd, int fd, const std::string& path, uint8_t* dst, uint64_t offset, uint64_t len,
                       uint64_t need);

}  // namespace maxsim_cuda
