// The scan's files: opened, mapped, sampled for the page cache, and read (pread, O_DIRECT).
#include "stream_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace maxsim_cuda {

std::string Files::OpenDirect(const std::vector<std::string>& paths) {
  for (const auto& p : paths) {
    const int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0) {
      const std::string why = std::strerror(errno);
      CloseDirect();
      return "O_DIRECT open of " + p + " refused (" + why + ")";
    }
    direct_fds.push_back(fd);
  }
  return "";
}

double Files::CachedFraction(int samples) const {
  const long page = sysconf(_SC_PAGESIZE);
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (int fd : fds) {
    struct stat st;
    sizes.push_back(fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0);
    total += sizes.back();
  }
  if (total == 0) return 0;
  int hits = 0, seen = 0;
  uint64_t base = 0;
  for (size_t f = 0; f < fds.size(); f++) {
    const uint64_t n = sizes[f];
    void* map = n ? mmap(nullptr, n, PROT_READ, MAP_SHARED, fds[f], 0) : MAP_FAILED;
    for (int i = 0; i < samples; i++) {
      const uint64_t at = static_cast<uint64_t>((static_cast<double>(i) + 0.5) * static_cast<double>(total) / samples);
      if (at < base || at >= base + n) continue;
      seen++;
      unsigned char v = 0;
      const uint64_t off = (at - base) & ~static_cast<uint64_t>(page - 1);
      if (map != MAP_FAILED && mincore(static_cast<uint8_t*>(map) + off, 1, &v) == 0 && (v & 1)) hits++;
    }
    if (map != MAP_FAILED) munmap(map, n);
    base += n;
  }
  return seen ? static_cast<double>(hits) / seen : 0;
}

void Files::CloseDirect() {
  for (int fd : direct_fds) close(fd);
  direct_fds.clear();
}

void Files::MapAll(const std::vector<std::string>& paths) {
  for (size_t i = 0; i < fds.size(); i++) {
    struct stat st;
    if (fstat(fds[i], &st) != 0) throw std::runtime_error("cannot stat " + paths[i] + ": " + std::strerror(errno));
    const size_t n = static_cast<size_t>(st.st_size);
    void* p = n ? mmap(nullptr, n, PROT_READ, MAP_SHARED, fds[i], 0) : nullptr;
    if (p == MAP_FAILED) throw std::runtime_error("cannot map " + paths[i] + ": " + std::strerror(errno));
    maps.emplace_back(p, n);
  }
}

Files::Files(const std::vector<std::string>& paths) {
  for (const auto& p : paths) {
    const int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const std::string why = std::strerror(errno);
      Close();
      throw std::runtime_error("cannot open " + p + ": " + why);
    }
    fds.push_back(fd);
  }
}

void Files::Close() {
  for (auto& m : maps) {
    if (m.first) munmap(m.first, m.second);
  }
  maps.clear();
  CloseDirect();
  for (int fd : fds) close(fd);
  fds.clear();
}

Files::~Files() { Close(); }

std::string ReadRange(int fd, const std::string& path, uint8_t* dst, uint64_t offset, uint64_t n) {
  uint64_t done = 0;
  while (done < n) {
    const ssize_t r = pread(fd, dst + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return "reading " + path + " failed: " + std::strerror(errno);
    }
    if (r == 0) return path + " is truncated: bytes up to " + std::to_string(offset + n) + " were expected";
    done += static_cast<uint64_t>(r);
  }
  return "";
}

std::string ReadDirect(int direct_fd, int fd, const std::string& path, uint8_t* dst, uint64_t offset, uint64_t len,
                       uint64_t need) {
  uint64_t done = 0;
  while (done < need) {
    const ssize_t r = pread(direct_fd, dst + done, len - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EINVAL || errno == EFAULT) return ReadRange(fd, path, dst + done, offset + done, need - done);
      return "reading " + path + " failed: " + std::strerror(errno);
    }
    if (r == 0) return path + " is truncated: bytes up to " + std::to_string(offset + need) + " were expected";
    done += static_cast<uint64_t>(r);
  }
  return "";
}

}  // namespace maxsim_cuda
