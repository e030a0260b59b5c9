#include "stream_scan.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace maxsim_cuda {

namespace {

using Clock = std::chrono::steady_clock;

int64_t ElementBytes(DType t) { return t == DType::Float32 ? 4 : t == DType::Int8 ? 1 : 2; }

// O_DIRECT needs file offsets, lengths and buffers aligned to the device's logical block size; 4 KiB
// covers every common one (the slots are page-aligned, cuMemHostAlloc).
constexpr uint64_t kDirectAlign = 4096;

// The files of a scan, opened once and closed at the end.
struct Files {
  std::vector<int> fds;
  std::vector<std::pair<void*, size_t>> maps;  // register mode: each file mapped whole, read-only
  std::vector<int> direct_fds;                 // direct I/O: each file opened again with O_DIRECT
  // Opens every file with O_DIRECT; on refusal closes what it opened and returns why ("" on success).
  std::string OpenDirect(const std::vector<std::string>& paths) {
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
  // The fraction of the files' pages in the page cache, from `samples` pages spread evenly over their
  // bytes (mincore on a read-only mapping; a file that cannot be mapped counts as not cached).
  double CachedFraction(int samples) const {
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
  void CloseDirect() {
    for (int fd : direct_fds) close(fd);
    direct_fds.clear();
  }
  // Maps every file (register mode).
  void MapAll(const std::vector<std::string>& paths) {
    for (size_t i = 0; i < fds.size(); i++) {
      struct stat st;
      if (fstat(fds[i], &st) != 0) throw std::runtime_error("cannot stat " + paths[i] + ": " + std::strerror(errno));
      const size_t n = static_cast<size_t>(st.st_size);
      void* p = n ? mmap(nullptr, n, PROT_READ, MAP_SHARED, fds[i], 0) : nullptr;
      if (p == MAP_FAILED) throw std::runtime_error("cannot map " + paths[i] + ": " + std::strerror(errno));
      maps.emplace_back(p, n);
    }
  }
  explicit Files(const std::vector<std::string>& paths) {
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
  void Close() {
    for (auto& m : maps) {
      if (m.first) munmap(m.first, m.second);
    }
    maps.clear();
    CloseDirect();
    for (int fd : fds) close(fd);
    fds.clear();
  }
  ~Files() { Close(); }
};

// One pipeline slot: pinned host staging and device buffers for the largest block.
struct Slot {
  void* host_tokens = nullptr;
  uint64_t staging_bytes = 0;      // direct I/O: host_tokens is anonymous memory registered, this long
  int64_t* host_starts = nullptr;
  int32_t* host_lengths = nullptr;
  float* host_scores = nullptr;
  float* host_token_scales = nullptr;  // int8: the block's per-token scales
  std::shared_ptr<DeviceTokens> device;
  cu::CUdeviceptr device_scores = 0;
  cu::CUevent copied = nullptr, scored = nullptr;
  void* registered = nullptr;      // register mode: the page-locked range of the block in the slot
  const uint8_t* tokens = nullptr; // where the copy reads the block's tokens from
  // Register mode: a block registers its whole pages only (a page it shares with the next block is
  // that block's); the bytes past its last page boundary come through this small pinned buffer.
  uint64_t direct_bytes = 0;       // bytes copied from `tokens`; the rest of the block is in `tail`
  uint8_t* tail = nullptr;
};

// Everything the scan allocates, released in the right order on every exit path: reader threads
// first (they write into pinned memory), then the GPU work, then the memory.
struct Pipeline {
  Runtime& rt;
  std::vector<Slot> slots;
  cu::CUstream copy_stream = nullptr;
  std::vector<std::thread> readers;

  // reader <-> worker coordination
  std::mutex mutex;
  std::condition_variable cv;
  int64_t readable_below = 0;       // blocks < this may be read (their slot is free)
  std::vector<int> parts_done;      // per slot: reader slices finished for the block in it
  std::string read_error;
  bool stop = false;

  explicit Pipeline(Runtime& r) : rt(r) {}
  ~Pipeline() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    cv.notify_all();
    for (auto& t : readers) t.join();
    // Best effort and never throwing: after a sticky error these calls fail too (or Api() throws),
    // and there is nothing better to do than leak.
    try {
      const Driver& d = Api();
      if (copy_stream) d.cuStreamSynchronize(copy_stream);
      d.cuStreamSynchronize(rt.stream());
      for (auto& s : slots) {
        if (s.staging_bytes) {
          d.cuMemHostUnregister(s.host_tokens);
          munmap(s.host_tokens, s.staging_bytes);
          s.host_tokens = nullptr;
        }
        for (void* p : {s.host_tokens, static_cast<void*>(s.host_starts), static_cast<void*>(s.host_lengths),
                        static_cast<void*>(s.host_scores), static_cast<void*>(s.host_token_scales),
                        static_cast<void*>(s.tail)}) {
          if (p) d.cuMemFreeHost(p);
        }
        if (s.registered) d.cuMemHostUnregister(s.registered);
        if (s.device_scores) rt.allocator().Free(s.device_scores);
        if (s.copied) d.cuEventDestroy(s.copied);
        if (s.scored) d.cuEventDestroy(s.scored);
        s.device.reset();
      }
      if (copy_stream) d.cuStreamDestroy(copy_stream);
    } catch (...) {
    }
  }
};

void* PinnedAlloc(uint64_t bytes) {
  void* p = nullptr;
  Check(Api().cuMemHostAlloc(&p, std::max<uint64_t>(bytes, 64), cu::CU_MEMHOSTALLOC_DEFAULT), "cuMemHostAlloc");
  return p;
}

// Page-locked staging for O_DIRECT reads: anonymous pages registered with the driver. (Memory from
// cuMemHostAlloc is mapped by the driver, and the kernel may refuse to DMA a file into it, EFAULT.)
void* RegisteredAlloc(uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("cannot map " + std::to_string(bytes) + " bytes of staging: " + std::strerror(errno));
  madvise(p, bytes, MADV_HUGEPAGE);  // fewer pages to lock where transparent huge pages are on (else a no-op)
  const cu::CUresult rc = Api().cuMemHostRegister(p, bytes, 0);
  if (rc != 0) munmap(p, bytes);
  Check(rc, "cuMemHostRegister");
  return p;
}

// Reads bytes [offset, offset + n) of fd into dst; an error message (naming the file) or "".
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

// O_DIRECT read of `len` bytes at `offset` (both aligned) into dst (aligned), of which the first `need`
// matter: a read may stop at the end of the file past `need`. An O_DIRECT read refused part-way
// (EINVAL: the file system; EFAULT: the buffer) gets the rest read through the page cache.
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

// a ranks before b: higher score, then lower index (the library-wide tie rule)
struct Hit {
  float score;
  int64_t index;
};
inline bool Better(const Hit& a, const Hit& b) { return a.score > b.score || (a.score == b.score && a.index < b.index); }

}  // namespace

StreamScanResult RunStreamScan(Runtime& rt, const DeviceTokens& queries, const StreamScanSpec& spec) {
  const Driver& d = Api();
  const auto t0 = Clock::now();
  StreamScanResult result;
  const int64_t nq = queries.count;
  const int64_t nblocks = static_cast<int64_t>(spec.blocks.size());
  const int depth = std::max(1, spec.depth);
  const int nreaders = std::max(1, spec.readers);
  const uint64_t row_bytes = static_cast<uint64_t>(spec.dim * ElementBytes(spec.dtype));
  const uint64_t in_use_before = rt.allocator().stats().in_use;
  rt.allocator().ResetPeak();

  Files files(spec.files);
  const bool pinned = spec.pinned != nullptr;
  const bool ahead = pinned && spec.pinned->chunk > 0;  // register the chunks as the blocks need them
  const bool direct = spec.register_pages || pinned;  // the copy engine reads the page cache itself
  if (spec.register_pages && !pinned) files.MapAll(spec.files);
  bool direct_io = spec.direct_io && !direct;
  if (direct_io && spec.direct_io_unless_cached) {
    // O_DIRECT reads the disk: files the page cache holds are read faster from there
    const double cached = files.CachedFraction(2048);
    if (cached >= 0.5) {
      direct_io = false;
      result.transfer_note = "the files are " + std::to_string(static_cast<int>(cached * 100)) +
                             "% in the page cache (O_DIRECT would read them from the disk)";
    }
  }
  if (direct_io) {
    result.transfer_note = files.OpenDirect(spec.files);
    direct_io = result.transfer_note.empty();
  }
  std::atomic<uint64_t> registered_now{0};
  Pipeline pipe(rt);
  Check(d.cuStreamCreate(&pipe.copy_stream, cu::CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  pipe.slots.resize(depth);
  pipe.parts_done.assign(depth, 0);
  // direct I/O reads whole aligned pages around the block: up to one page of slack at each end
  const uint64_t slot_token_bytes =
      static_cast<uint64_t>(spec.capacity_tokens) * row_bytes + (spec.direct_io ? 2 * kDirectAlign : 0);
  const uint64_t score_count = static_cast<uint64_t>(std::max<int64_t>(nq, 1)) * static_cast<uint64_t>(spec.capacity_docs);
  // One slot's buffers. Slot 0 is made before the readers start, the others while they read the first
  // block, so the first block does not wait for every slot's pinned staging.
  auto make_slot = [&](Slot& s) {
    if (!direct && direct_io) {
      s.host_tokens = RegisteredAlloc(slot_token_bytes);
      s.staging_bytes = slot_token_bytes;
    } else if (!direct) {
      s.host_tokens = PinnedAlloc(slot_token_bytes);
    }
    if (spec.register_pages && !pinned) s.tail = static_cast<uint8_t*>(PinnedAlloc(4096));
    s.host_starts = static_cast<int64_t*>(PinnedAlloc(spec.capacity_docs * sizeof(int64_t)));
    s.host_lengths = static_cast<int32_t*>(PinnedAlloc(spec.capacity_docs * sizeof(int32_t)));
    s.host_scores = static_cast<float*>(PinnedAlloc(score_count * sizeof(float)));
    if (spec.dtype == DType::Int8) s.host_token_scales = static_cast<float*>(PinnedAlloc(std::max<int64_t>(spec.capacity_tokens, 1) * sizeof(float)));
    s.device = rt.AllocTokens(spec.dtype, spec.dim, std::max<int64_t>(spec.capacity_tokens, 1), std::max<int64_t>(spec.capacity_docs, 1));
    s.device_scores = rt.allocator().Alloc(score_count * sizeof(float));
    Check(d.cuEventCreate(&s.copied, cu::CU_EVENT_DEFAULT), "cuEventCreate");
    Check(d.cuEventCreate(&s.scored, cu::CU_EVENT_DEFAULT), "cuEventCreate");
    result.pinned_bytes += (direct ? 0 : slot_token_bytes) + spec.capacity_docs * 12 + score_count * 4 +
                           (s.host_token_scales ? spec.capacity_tokens * 4 : 0);
  };
  make_slot(pipe.slots[0]);
  pipe.readable_below = 1;
  if (direct_io && !spec.files.empty()) {
    // A file system may accept O_DIRECT at open and refuse the reads (EINVAL): try one page first.
    const ssize_t r = pread(files.direct_fds[0], pipe.slots[0].host_tokens, kDirectAlign, 0);
    if (r < 0) {
      result.transfer_note = "O_DIRECT reads of " + spec.files[0] + " refused (" + std::strerror(errno) + ")";
      files.CloseDirect();
      direct_io = false;
    }
  }
  if (!result.transfer_note.empty()) result.transfer_note += "; read through the page cache instead";
  result.transfer_mode = ahead ? "pinned-ahead" : pinned ? "pinned" : spec.register_pages ? "register" : direct_io ? "direct" : "copy";

  // Reader r reads slice r of every block, in block order, as soon as the block's slot is free.
  for (int r = 0; r < nreaders; r++) {
    pipe.readers.emplace_back([&, r] {
      for (int64_t b = 0; b < nblocks; b++) {
        {
          std::unique_lock<std::mutex> lock(pipe.mutex);
          pipe.cv.wait(lock, [&] { return pipe.stop || b < pipe.readable_below; });
          if (pipe.stop) return;
        }
        const StreamBlock& blk = spec.blocks[b];
        const uint64_t total = static_cast<uint64_t>(blk.tokens) * row_bytes;
        Slot& slot = pipe.slots[b % depth];
        std::string err;
        if (pinned) {
          const auto& m = spec.pinned->maps[blk.file];
          const uint64_t end = blk.tokens_offset + total;
          if (end > m.second) {
            if (b % nreaders == r) {
              err = spec.files[blk.file] + " is truncated: bytes up to " + std::to_string(end) + " were expected";
            }
          } else if (ahead && total > 0) {
            // the block's chunks not yet registered, shared among the readers (every nreaders-th)
            const uint64_t c0 = blk.tokens_offset / spec.pinned->chunk, c1 = (end - 1) / spec.pinned->chunk;
            for (uint64_t c = c0 + r; c <= c1 && err.empty(); c += nreaders) {
              uint64_t added = 0;
              err = spec.pinned->Ensure(rt, blk.file, c, &added);
              registered_now += added;
            }
          }
          if (b % nreaders == r) {
            slot.tokens = static_cast<const uint8_t*>(m.first) + blk.tokens_offset;
            slot.direct_bytes = total;
          }
        } else if (spec.register_pages) {
          // One reader registers the block's whole pages (block b goes to reader b % nreaders).
          if (b % nreaders == r) {
            auto* base = static_cast<uint8_t*>(files.maps[blk.file].first);
            const uint64_t start = blk.tokens_offset, end = blk.tokens_offset + total;
            const uint64_t from = start & ~uint64_t(4095), to = end & ~uint64_t(4095);
            slot.registered = nullptr;
            slot.tokens = base + start;
            slot.direct_bytes = to > start ? to - start : 0;
            if (end > files.maps[blk.file].second) {
              err = spec.files[blk.file] + " is truncated: bytes up to " + std::to_string(end) + " were expected";
            } else {
              if (to > from) {
                cu::CUresult rc = d.cuCtxSetCurrent(rt.context());
                if (rc == 0) rc = d.cuMemHostRegister(base + from, to - from, cu::CU_MEMHOSTREGISTER_READ_ONLY);
                if (rc != 0) err = "cuMemHostRegister of " + spec.files[blk.file] + " failed: " + DescribeResult(rc);
                else slot.registered = base + from;
              }
              if (err.empty() && end > start + slot.direct_bytes) {
                const uint64_t tail_from = start + slot.direct_bytes;
                err = ReadRange(files.fds[blk.file], spec.files[blk.file], slot.tail, tail_from, end - tail_from);
              }
            }
          }
        } else if (direct_io) {
          // The block's bytes widened to whole aligned pages, in aligned slices per reader; the copy
          // starts at the block's offset inside the first page.
          const uint64_t a0 = blk.tokens_offset & ~(kDirectAlign - 1);
          const uint64_t need = total > 0 ? blk.tokens_offset + total - a0 : 0;
          const uint64_t span = (need + kDirectAlign - 1) & ~(kDirectAlign - 1);
          const uint64_t per = (span / nreaders + kDirectAlign - 1) & ~(kDirectAlign - 1);
          const uint64_t from = std::min(span, per * r), to = std::min(span, per * (r + 1));
          if (r == 0) {
            slot.tokens = static_cast<const uint8_t*>(slot.host_tokens) + (blk.tokens_offset - a0);
            slot.direct_bytes = total;
          }
          if (to > from && from < need) {
            err = ReadDirect(files.direct_fds[blk.file], files.fds[blk.file], spec.files[blk.file],
                             static_cast<uint8_t*>(slot.host_tokens) + from, a0 + from, to - from, std::min(to, need) - from);
          }
        } else {
          // 4 KiB-aligned slices, so each pread covers whole pages of the page cache
          const uint64_t per = (total / nreaders + 4095) & ~uint64_t(4095);
          const uint64_t from = std::min(total, per * r), to = std::min(total, per * (r + 1));
          if (r == 0) {  // one writer of the slot's fields (the worker reads them after every slice is in)
            slot.tokens = static_cast<const uint8_t*>(slot.host_tokens);
            slot.direct_bytes = total;
          }
          if (to > from) {
            auto* dst = static_cast<uint8_t*>(slot.host_tokens) + from;
            err = ReadRange(files.fds[blk.file], spec.files[blk.file], dst, blk.tokens_offset + from, to - from);
          }
        }
        if (err.empty() && slot.host_token_scales && blk.tokens > 0) {
          // the int8 scales: a slice per reader too
          const uint64_t sb = static_cast<uint64_t>(blk.tokens) * sizeof(float);
          const uint64_t per = (sb / nreaders + 4095) & ~uint64_t(4095);
          const uint64_t from = std::min(sb, per * r), to = std::min(sb, per * (r + 1));
          if (to > from) {
            err = ReadRange(files.fds[blk.file], spec.files[blk.file], reinterpret_cast<uint8_t*>(slot.host_token_scales) + from,
                            blk.scales_offset + from, to - from);
          }
        }
        {
          std::lock_guard<std::mutex> lock(pipe.mutex);
          if (!err.empty() && pipe.read_error.empty()) pipe.read_error = err;
          pipe.parts_done[b % depth]++;
        }
        pipe.cv.notify_all();
        if (!err.empty()) return;
      }
    });
  }

  for (int i = 1; i < depth; i++) {
    make_slot(pipe.slots[i]);
    {
      std::lock_guard<std::mutex> lock(pipe.mutex);
      pipe.readable_below = i + 1;
    }
    pipe.cv.notify_all();
  }

  const int64_t k = std::min<int64_t>(spec.k, [&] {
    int64_t n = 0;
    for (const auto& b : spec.blocks) n += b.docs;
    return n;
  }());
  std::vector<std::vector<Hit>> best(nq);
  std::vector<Hit> candidates, merged;
  double docs_done = 0, bytes_done = 0;

  // Merges block b (already scored) into the running top-K and frees its slot for the readers.
  auto finish = [&](int64_t b) {
    Slot& s = pipe.slots[b % depth];
    Check(d.cuEventSynchronize(s.scored), "cuEventSynchronize");
    if (s.registered) {  // its copy is done: unlock the pages before the slot is reused
      Check(d.cuMemHostUnregister(s.registered), "cuMemHostUnregister");
      s.registered = nullptr;
    }
    const StreamBlock& blk = spec.blocks[b];
    for (int64_t q = 0; q < nq && k > 0; q++) {
      const float* row = s.host_scores + q * blk.docs;
      candidates.clear();
      for (int64_t i = 0; i < blk.docs; i++) candidates.push_back({row[i], blk.first_doc + i});
      const int64_t take = std::min<int64_t>(k, blk.docs);
      std::partial_sort(candidates.begin(), candidates.begin() + take, candidates.end(), Better);
      merged.clear();
      std::merge(best[q].begin(), best[q].end(), candidates.begin(), candidates.begin() + take, std::back_inserter(merged), Better);
      if (static_cast<int64_t>(merged.size()) > k) merged.resize(k);
      best[q].swap(merged);
    }
    {
      std::lock_guard<std::mutex> lock(pipe.mutex);
      pipe.readable_below = b + depth + 1;
    }
    pipe.cv.notify_all();
    docs_done += static_cast<double>(blk.docs);
    bytes_done += static_cast<double>(blk.tokens) * static_cast<double>(row_bytes + (s.host_token_scales ? 4 : 0));
    if (spec.progress) {
      spec.progress[0] = docs_done;
      spec.progress[1] = bytes_done;
    }
    if (b == 0) result.first_block_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  };

  for (int64_t b = 0; b < nblocks; b++) {
    // Aborted: the Pipeline's destructor stops the readers and drains both streams.
    if (spec.cancel && *spec.cancel) throw ScanAborted();
    Slot& s = pipe.slots[b % depth];
    {
      std::unique_lock<std::mutex> lock(pipe.mutex);
      pipe.cv.wait(lock, [&] { return !pipe.read_error.empty() || pipe.parts_done[b % depth] == nreaders; });
      if (!pipe.read_error.empty()) throw std::runtime_error(pipe.read_error);
      pipe.parts_done[b % depth] = 0;
    }
    const StreamBlock& blk = spec.blocks[b];
    for (int64_t i = 0; i < blk.docs; i++) {
      s.host_starts[i] = static_cast<int64_t>(spec.doc_starts[blk.spans_at + i]);
      s.host_lengths[i] = spec.doc_lengths[blk.spans_at + i];
    }
    DeviceTokens& dev = *s.device;
    const uint64_t token_bytes = static_cast<uint64_t>(blk.tokens) * row_bytes;
    // Pinned ahead, a copy never spans two registrations (each chunk is its own): one per chunk.
    const uint64_t piece = ahead ? spec.pinned->chunk : 0;
    for (uint64_t at = 0; at < s.direct_bytes;) {
      uint64_t n = s.direct_bytes - at;
      if (piece) n = std::min(n, piece - (blk.tokens_offset + at) % piece);
      Check(d.cuMemcpyHtoDAsync(dev.data + at, s.tokens + at, n, pipe.copy_stream), "cuMemcpyHtoDAsync");
      at += n;
    }
    if (token_bytes > s.direct_bytes) {
      Check(d.cuMemcpyHtoDAsync(dev.data + s.direct_bytes, s.tail, token_bytes - s.direct_bytes, pipe.copy_stream), "cuMemcpyHtoDAsync");
    }
    if (s.host_token_scales && blk.tokens > 0) {
      Check(d.cuMemcpyHtoDAsync(dev.scales, s.host_token_scales, blk.tokens * sizeof(float), pipe.copy_stream), "cuMemcpyHtoDAsync");
    }
    if (blk.docs > 0) {
      Check(d.cuMemcpyHtoDAsync(dev.starts, s.host_starts, blk.docs * sizeof(int64_t), pipe.copy_stream), "cuMemcpyHtoDAsync");
      Check(d.cuMemcpyHtoDAsync(dev.lengths, s.host_lengths, blk.docs * sizeof(int32_t), pipe.copy_stream), "cuMemcpyHtoDAsync");
    }
    Check(d.cuEventRecord(s.copied, pipe.copy_stream), "cuEventRecord");
    Check(d.cuStreamWaitEvent(rt.stream(), s.copied, 0), "cuStreamWaitEvent");
    dev.count = blk.docs;
    dev.tokens = blk.tokens;
    dev.max_length = blk.max_length;
    if (nq > 0 && blk.docs > 0) {
      rt.Launch(queries, dev, spec.launch, s.device_scores);
      Check(d.cuMemcpyDtoHAsync(s.host_scores, s.device_scores, nq * blk.docs * sizeof(float), rt.stream()), "cuMemcpyDtoHAsync");
    }
    Check(d.cuEventRecord(s.scored, rt.stream()), "cuEventRecord");
    // Keep depth - 1 blocks in flight; merge the oldest while the GPU works on the newer ones.
    if (b - (depth - 1) >= 0) finish(b - (depth - 1));
  }
  for (int64_t b = std::max<int64_t>(0, nblocks - (depth - 1)); b < nblocks; b++) finish(b);

  result.k = k;
  result.scores.resize(nq * k);
  result.indices.resize(nq * k);
  for (int64_t q = 0; q < nq; q++) {
    for (int64_t i = 0; i < k; i++) {
      result.scores[q * k + i] = best[q][i].score;
      result.indices[q * k + i] = best[q][i].index;
    }
  }
  result.bytes = static_cast<uint64_t>(bytes_done);
  result.registered_bytes = registered_now;
  const uint64_t peak = rt.allocator().stats().peak;
  result.device_peak = peak > in_use_before ? peak - in_use_before : 0;
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return result;
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
