// The out-of-core scan (see stream_scan.h): its steps, from the slots and readers to the merge of hits.
#include "stream_scan.h"

#include <sys/mman.h>
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

#include "stream_files.h"

namespace maxsim_cuda {

namespace {

using Clock = std::chrono::steady_clock;

int64_t ElementBytes(DType t) { return t == DType::Float32 ? 4 : t == DType::Int8 ? 1 : 2; }

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

// a ranks before b: higher score, then lower index (the library-wide tie rule)
struct Hit {
  float score;
  int64_t index;
};
inline bool Better(const Hit& a, const Hit& b) { return a.score > b.score || (a.score == b.score && a.index < b.index); }

// The scan's files and how their bytes reach the device, decided before any slot exists.
struct Transfer {
  Files files;
  const bool pinned;
  const bool ahead;   // register the chunks as the blocks need them
  const bool direct;  // the copy engine reads the page cache itself
  bool direct_io;
  Transfer(const StreamScanSpec& spec, StreamScanResult& result);
};

Transfer::Transfer(const StreamScanSpec& spec, StreamScanResult& result)
    : files(spec.files),
      pinned(spec.pinned != nullptr),
      ahead(pinned && spec.pinned->chunk > 0),
      direct(spec.register_pages || pinned) {
  if (spec.register_pages && !pinned) files.MapAll(spec.files);
  direct_io = spec.direct_io && !direct;
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
}

// One scan's state and its steps. Transfer is the base so that the files outlive the reader
// threads (~Pipeline, a member, joins them first).
struct StreamScan : Transfer {
  Runtime& rt;
  const Driver& d;
  const DeviceTokens& queries;
  const StreamScanSpec& spec;
  StreamScanResult& result;
  const int64_t nq;
  const int64_t nblocks;
  const int depth;
  const int nreaders;
  const uint64_t row_bytes;
  std::atomic<uint64_t> registered_now{0};
  Pipeline pipe;
  // direct I/O reads whole aligned pages around the block: up to one page of slack at each end
  const uint64_t slot_token_bytes;
  const uint64_t score_count;

  StreamScan(Runtime& r, const Driver& drv, const DeviceTokens& q, const StreamScanSpec& s, StreamScanResult& res)
      : Transfer(s, res),
        rt(r),
        d(drv),
        queries(q),
        spec(s),
        result(res),
        nq(q.count),
        nblocks(static_cast<int64_t>(s.blocks.size())),
        depth(std::max(1, s.depth)),
        nreaders(std::max(1, s.readers)),
        row_bytes(static_cast<uint64_t>(s.dim * ElementBytes(s.dtype))),
        pipe(r),
        slot_token_bytes(static_cast<uint64_t>(s.capacity_tokens) * row_bytes + (s.direct_io ? 2 * kDirectAlign : 0)),
        score_count(static_cast<uint64_t>(std::max<int64_t>(nq, 1)) * static_cast<uint64_t>(s.capacity_docs)) {}

  void Open();
  void MakeSlot(Slot& s);
  void OpenRest();
  void Read(int r);
  std::string ReadPart(int r, int64_t b);
  std::string ReadPinned(int r, int64_t b, Slot& slot, uint64_t total);
  std::string ReadRegistered(int r, int64_t b, Slot& slot, uint64_t total);
  std::string ReadAligned(int r, int64_t b, Slot& slot, uint64_t total);
  std::string ReadCopy(int r, int64_t b, Slot& slot, uint64_t total);
  void Score(int64_t b);
};

// The copy stream and slot 0 (the readers may start on block 0 then), the O_DIRECT probe and the
// transfer mode.
void StreamScan::Open() {
  Check(d.cuStreamCreate(&pipe.copy_stream, cu::CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  pipe.slots.resize(depth);
  pipe.parts_done.assign(depth, 0);
  MakeSlot(pipe.slots[0]);
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
}

// One slot's buffers. Slot 0 is made before the readers start, the others while they read the first
// block, so the first block does not wait for every slot's pinned staging.
void StreamScan::MakeSlot(Slot& s) {
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
}

// Slots 1 .. depth - 1, each handed to the readers as soon as it exists.
void StreamScan::OpenRest() {
  for (int i = 1; i < depth; i++) {
    MakeSlot(pipe.slots[i]);
    {
      std::lock_guard<std::mutex> lock(pipe.mutex);
      pipe.readable_below = i + 1;
    }
    pipe.cv.notify_all();
  }
}

// Reader r reads slice r of every block, in block order, as soon as the block's slot is free.
void StreamScan::Read(int r) {
  for (int64_t b = 0; b < nblocks; b++) {
    {
      std::unique_lock<std::mutex> lock(pipe.mutex);
      pipe.cv.wait(lock, [&] { return pipe.stop || b < pipe.readable_below; });
      if (pipe.stop) return;
    }
    const std::string err = ReadPart(r, b);
    {
      std::lock_guard<std::mutex> lock(pipe.mutex);
      if (!err.empty() && pipe.read_error.empty()) pipe.read_error = err;
      pipe.parts_done[b % depth]++;
    }
    pipe.cv.notify_all();
    if (!err.empty()) return;
  }
}

// Reader r's part of block b by the transfer mode, then its slice of the int8 scales; "" or why not.
std::string StreamScan::ReadPart(int r, int64_t b) {
  const StreamBlock& blk = spec.blocks[b];
  const uint64_t total = static_cast<uint64_t>(blk.tokens) * row_bytes;
  Slot& slot = pipe.slots[b % depth];
  std::string err;
  if (pinned) {
    err = ReadPinned(r, b, slot, total);
  } else if (spec.register_pages) {
    err = ReadRegistered(r, b, slot, total);
  } else if (direct_io) {
    err = ReadAligned(r, b, slot, total);
  } else {
    err = ReadCopy(r, b, slot, total);
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
  return err;
}

// Files pinned whole or ahead: the copy reads their mapping (pinned ahead, once the readers have
// registered the block's chunks).
std::string StreamScan::ReadPinned(int r, int64_t b, Slot& slot, uint64_t total) {
  const StreamBlock& blk = spec.blocks[b];
  std::string err;
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
  return err;
}

// Register mode: page-lock the block in the mapped file, the bytes past its last whole page via `tail`.
std::string StreamScan::ReadRegistered(int r, int64_t b, Slot& slot, uint64_t total) {
  const StreamBlock& blk = spec.blocks[b];
  std::string err;
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
  return err;
}

// Direct I/O: O_DIRECT preads into the registered slot.
std::string StreamScan::ReadAligned(int r, int64_t b, Slot& slot, uint64_t total) {
  const StreamBlock& blk = spec.blocks[b];
  std::string err;
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
  return err;
}

// Copy mode: preads into the pinned slot.
std::string StreamScan::ReadCopy(int r, int64_t b, Slot& slot, uint64_t total) {
  const StreamBlock& blk = spec.blocks[b];
  std::string err;
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
  return err;
}

// The device pass of block b once its readers are done: its copies on the copy stream, then the
// kernel and the scores' download on the compute stream.
void StreamScan::Score(int64_t b) {
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
}

// The running top-K per query, merged block after block as they finish.
struct HitMerge {
  const Driver& d;
  const StreamScanSpec& spec;
  StreamScanResult& result;
  Pipeline& pipe;
  const int64_t nq;
  const int depth;
  const uint64_t row_bytes;
  const Clock::time_point t0;
  const int64_t k;
  std::vector<std::vector<Hit>> best;
  std::vector<Hit> candidates, merged;
  double docs_done = 0, bytes_done = 0;
  HitMerge(StreamScan& s, Clock::time_point start)
      : d(s.d),
        spec(s.spec),
        result(s.result),
        pipe(s.pipe),
        nq(s.nq),
        depth(s.depth),
        row_bytes(s.row_bytes),
        t0(start),
        k(std::min<int64_t>(s.spec.k, [&] {
          int64_t n = 0;
          for (const auto& b : s.spec.blocks) n += b.docs;
          return n;
        }())),
        best(s.nq) {}
  void Finish(int64_t b);
  void Collect(StreamScanResult& result) const;
};

// Merges block b (already scored) into the running top-K and frees its slot for the readers.
void HitMerge::Finish(int64_t b) {
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
}

// The hits kept per query, best first.
void HitMerge::Collect(StreamScanResult& result) const {
  result.k = k;
  result.scores.resize(nq * k);
  result.indices.resize(nq * k);
  for (int64_t q = 0; q < nq; q++) {
    for (int64_t i = 0; i < k; i++) {
      result.scores[q * k + i] = best[q][i].score;
      result.indices[q * k + i] = best[q][i].index;
    }
  }
}

}  // namespace

StreamScanResult RunStreamScan(Runtime& rt, const DeviceTokens& queries, const StreamScanSpec& spec) {
  const Driver& d = Api();
  const auto t0 = Clock::now();
  StreamScanResult result;
  const uint64_t in_use_before = rt.allocator().stats().in_use;
  rt.allocator().ResetPeak();

  StreamScan scan(rt, d, queries, spec, result);  // opens the files, picks the transfer
  scan.Open();
  for (int r = 0; r < scan.nreaders; r++) scan.pipe.readers.emplace_back([&scan, r] { scan.Read(r); });
  scan.OpenRest();

  HitMerge merge(scan, t0);
  for (int64_t b = 0; b < scan.nblocks; b++) {
    // Aborted: the Pipeline's destructor stops the readers and drains both streams.
    if (spec.cancel && *spec.cancel) throw ScanAborted();
    scan.Score(b);
    // Keep depth - 1 blocks in flight; merge the oldest while the GPU works on the newer ones.
    if (b - (scan.depth - 1) >= 0) merge.Finish(b - (scan.depth - 1));
  }
  for (int64_t b = std::max<int64_t>(0, scan.nblocks - (scan.depth - 1)); b < scan.nblocks; b++) merge.Finish(b);

  merge.Collect(result);
  result.bytes = static_cast<uint64_t>(merge.bytes_done);
  result.registered_bytes = scan.registered_now;
  const uint64_t peak = rt.allocator().stats().peak;
  result.device_peak = peak > in_use_before ? peak - in_use_before : 0;
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return result;
}

}  // namespace maxsim_cuda
