// MaxSim training on the GPU: see train_engine.h and kernels/maxsim_train.cu.
#include "train_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "kernels/maxsim_loss_params.h"

namespace maxsim_cuda::train {

namespace {

int32_t TrainDType(DType t) {
  switch (t) {
    case DType::Float16: return kTrainF16;
    case DType::BFloat16: return kTrainBF16;
    default: return kTrainF32;
  }
}

const char* KernelSuffix(DType t) {
  switch (t) {
    case DType::Float16: return "f16";
    case DType::BFloat16: return "bf16";
    default: return "f32";
  }
}

template <typename P>
P* DevPtr(cu::CUdeviceptr p) {
  return reinterpret_cast<P*>(static_cast<uintptr_t>(p));
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

[[noreturn]] void PlanError(const std::string& field, const std::string& expected, const std::string& received) {
  throw std::invalid_argument("Expected " + expected + " for plan." + field + " but received " + received);
}

// ---------------------------------------------------------------------------------------------
// Worker-thread helpers

int64_t TokensOf(const TokenSet& t) {
  int64_t n = 0;
  for (int64_t i = 0; i < t.count; i++) n += t.lengths[i];
  return n;
}

std::shared_ptr<DeviceTokens> UploadSet(Runtime* rt, const TokenSet& t) {
  auto dev = rt->AllocTokens(t.dtype, t.dim, TokensOf(t), t.count);
  rt->Append(*dev, t);
  return dev;
}

// Both sides on the device (host batches uploaded now) and the lengths of the device-resident ones
// on the host. With `own`, the uploaded host batches become device-resident sides of `a` (a state
// that outlives the job must not point into JS arrays).
void Materialize(Runtime* rt, Problem& a, bool own, std::shared_ptr<DeviceTokens>* q, std::shared_ptr<DeviceTokens>* d) {
  auto side = [&](TokenSet& t, std::shared_ptr<DeviceTokens>& dev, std::vector<int32_t>& len, const char* name) {
    if (dev) {
      // The JS thread read the set's size when the call was made; an append still running then
      // would have changed it under the job's plan.
      if (dev->count != t.count || dev->tokens * dev->dim != t.elements) {
        throw std::invalid_argument(std::string("Expected ") + name + " to keep its " + std::to_string(t.count) +
                                    " items during the call but received a set of " + std::to_string(dev->count) +
                                    " items (await append() before training)");
      }
      len.resize(static_cast<size_t>(t.count));
      if (t.count > 0) rt->Download(len.data(), dev->lengths, static_cast<uint64_t>(t.count) * sizeof(int32_t));
      t.lengths = len.data();
      return dev;
    }
    auto up = UploadSet(rt, t);
    if (own) {
      len.assign(t.lengths, t.lengths + t.count);
      t.lengths = len.data();
      t.data = nullptr;
      t.starts = nullptr;
      dev = up;
    }
    return up;
  };
  *q = side(a.q, a.q_dev, a.q_len, "queries");
  *d = side(a.d, a.d_dev, a.d_len, "docs");
}

MaxsimTrainParams BaseParams(const Problem& a, const DeviceTokens& q, const DeviceTokens& d) {
  MaxsimTrainParams p;
  std::memset(&p, 0, sizeof(p));
  p.queries = DevPtr<const void>(q.data);
  p.query_starts = DevPtr<const int64_t>(q.starts);
  p.query_lengths = DevPtr<const int32_t>(q.lengths);
  p.docs = DevPtr<const void>(d.data);
  p.doc_starts = DevPtr<const int64_t>(d.starts);
  p.doc_lengths = DevPtr<const int32_t>(d.lengths);
  p.num_pairs = a.num_pairs;
  p.stride = a.stride;
  p.doc_tokens = TokensOf(a.d);  // the problem's documents (a device set may have grown since)
  p.num_queries = static_cast<int32_t>(a.q.count);
  p.num_docs = static_cast<int32_t>(a.d.count);
  p.dim = static_cast<int32_t>(a.q.dim);
  p.pairs = a.pairs;
  p.query_dtype = TrainDType(a.q.dtype);
  p.doc_dtype = TrainDType(a.d.dtype);
  return p;
}

// The wgmma forward's TMA box: a 64-element K half of MAXSIM_TRAIN_FWD_WGMMA_TILE document tokens.
constexpr unsigned kWgmmaTmaBox[2] = {64, MAXSIM_TRAIN_FWD_WGMMA_TILE};

// map: the documents' tensor map for a kernel that takes one (the wgmma forward's TMA twin).
void Launch1D(Runtime* rt, const std::string& kernel, int64_t blocks, unsigned threads, const MaxsimTrainParams& p,
              unsigned smem = 0, const cu::CUtensorMap* map = nullptr, cu::CUstream on = nullptr) {
  if (blocks <= 0) return;
  LaunchSpec spec;
  spec.kernel = kernel;
  spec.grid[0] = static_cast<unsigned>(std::min(blocks, kMaxGrid));
  spec.block[0] = threads;
  spec.smem = smem;
  if (map) {
    spec.tma_box[0] = kWgmmaTmaBox[0];
    spec.tma_box[1] = kWgmmaTmaBox[1];
  }
  rt->LaunchWithParams(spec, &p, map, on);
}

void ZeroWords(Runtime* rt, cu::CUdeviceptr ptr, uint64_t words) {
  if (words > 0) Check(Api().cuMemsetD32Async(ptr, 0u, words, rt->stream()), "cuMemsetD32Async");
}

// Copies packed rows [T, d] back into a host buffer in the batch's own layout (zeros elsewhere).
void ScatterRows(const TokenSet& t, const std::vector<float>& packed, float* out) {
  const int64_t d = t.dim;
  int64_t at = 0;
  for (int64_t i = 0; i < t.count; i++) {
    const int64_t len = t.lengths[i];
    if (len > 0) {
      std::memcpy(out + static_cast<int64_t>(t.starts[i]) * d, packed.data() + at * d,
                  static_cast<size_t>(len * d) * sizeof(float));
    }
    at += len;
  }
}

// Whether the packed device rows of t are already its host layout (items back to back from token 0,
// as in a dense batch without padding): then gradients download straight into the output array.
bool PackedIsLayout(const TokenSet& t) {
  int64_t at = 0;
  for (int64_t i = 0; i < t.count; i++) {
    if (t.lengths[i] > 0 && static_cast<int64_t>(t.starts[i]) != at) return false;
    at += t.lengths[i];
  }
  return true;
}

// Downloads packed gradient rows [tokens, dim] into out (the batch's layout, zero-filled by the caller).
void DownloadRows(Runtime* rt, const TokenSet& t, cu::CUdeviceptr src, uint64_t elems, float* out) {
  if (elems == 0) return;
  if (PackedIsLayout(t)) {
    rt->Download(out, src, elems * sizeof(float));
    return;
  }
  std::vector<float> packed(static_cast<size_t>(elems));
  rt->Download(packed.data(), src, elems * sizeof(float));
  ScatterRows(t, packed, out);
}

// Copies `slots` argmax entries (int16 when argmax16) from the device into an Int32Array's memory,
// widened a chunk at a time (no full-size host copy).
void DownloadArgmax(Runtime* rt, cu::CUdeviceptr src, uint64_t slots, bool argmax16, int32_t* out) {
  if (!argmax16) {
    rt->Download(out, src, slots * sizeof(int32_t));
    return;
  }
  constexpr uint64_t kChunk = uint64_t(1) << 22;
  std::vector<int16_t> buf(static_cast<size_t>(std::min<uint64_t>(slots, kChunk)));
  for (uint64_t off = 0; off < slots; off += kChunk) {
    const uint64_t n = std::min(kChunk, slots - off);
    rt->Download(buf.data(), src + off * sizeof(int16_t), n * sizeof(int16_t));
    for (uint64_t e = 0; e < n; e++) out[off + e] = buf[e];
  }
}

// Profiling: wall time of the host phases and device time (CUDA events on the stream) of the
// kernels (for the benchmarks; off by default, costs nothing then).
class PhaseTimer {
 public:
  PhaseTimer(Runtime* rt, bool on) : rt_(rt), on_(on) {}
  ~PhaseTimer() {
    for (cu::CUevent e : events_) Api().cuEventDestroy(e);
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;
  bool on() const { return on_; }
  // Host: the wall time since the previous Host() call (or construction) is added to `name`.
  void Host(const char* name) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    phases_.emplace_back(name, std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
  }
  // Device: records an event (returns its mark); Device(name) charges the time since the previous
  // event, or since the mark `from`, to `name`.
  size_t Mark() {
    if (!on_) return 0;
    cu::CUevent e = nullptr;
    Check(Api().cuEventCreate(&e, cu::CU_EVENT_DEFAULT), "cuEventCreate");
    events_.push_back(e);
    Check(Api().cuEventRecord(e, rt_->stream()), "cuEventRecord");
    return events_.size() - 1;
  }
  void Device(const char* name, size_t from = SIZE_MAX) {
    if (!on_) return;
    Mark();
    pending_.push_back({name, from == SIZE_MAX ? events_.size() - 2 : from, events_.size() - 1});
  }
  // After the stream has passed every mark: resolves the device phases (a name charged several
  // times, e.g. once per CSR block, reports the sum).
  Phases Finish() {
    Phases out = phases_;
    for (const Pending& e : pending_) {
      const std::string& name = e.name;
      float ms = 0.f;
      Check(Api().cuEventElapsedTime(&ms, events_[e.start], events_[e.end]), "cuEventElapsedTime");
      auto same = std::find_if(out.begin(), out.end(), [&](const auto& x) { return x.first == name; });
      if (same != out.end()) {
        same->second += static_cast<double>(ms);
      } else {
        out.emplace_back(name, static_cast<double>(ms));
      }
    }
    return out;
  }

 private:
  Runtime* rt_;
  bool on_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::vector<cu::CUevent> events_;
  struct Pending {
    std::string name;
    size_t start, end;  // events_ indices
  };
  std::vector<Pending> pending_;
  Phases phases_;
};

// ---------------------------------------------------------------------------------------------
// The CSR blocks of the deterministic dD

struct DocBlock {
  int32_t doc_begin = 0, doc_end = 0;
  int64_t row_begin = 0, row_end = 0;
  int64_t bound = 0;  // most sources the block can have
  int32_t longest = 0;  // its longest document
  bool by_block = false;  // count and place with one CTA per (document, query block)
  int32_t qblocks = 1, qblock_size = 1;
  int64_t cells() const { return (row_end - row_begin) * qblocks; }
};

// The plan's CSR blocks with their rows, source bounds and longest documents (from the lengths),
// checked: consecutive blocks covering every document, the query blocks covering every query once,
// the block-wide walk only where the block's documents fit its shared memory, and each block's
// sources and cells within the CSR's 32-bit counts. The budgets (how many sources and cells a block
// may have) are TypeScript's; a block over them only takes more memory.
std::vector<DocBlock> ExpandBlocks(const Problem& a, const BackwardPlan& plan) {
  constexpr int64_t kU32 = int64_t(std::numeric_limits<uint32_t>::max());
  auto fail = [](size_t k, const std::string& expected, const std::string& received) {
    PlanError("blocks[" + std::to_string(k) + "]", expected, received);
  };
  if (plan.blocks.empty()) PlanError("blocks", "at least one CSR block for dD '" + std::string(plan.dd == DDPath::kAuto ? "auto" : "csr") + "'", "none");
  int64_t tq = 0;  // sources of one document, at most: every query token (all pairs)
  for (int64_t i = 0; i < a.q.count; i++) tq += a.q.lengths[i];
  std::vector<DocBlock> blocks;
  int64_t row = 0;
  int32_t begin = 0;
  for (size_t k = 0; k < plan.blocks.size(); k++) {
    const CsrBlock& c = plan.blocks[k];
    if (c.doc_end < begin || c.doc_end > a.d.count || (k + 1 == plan.blocks.size() && c.doc_end != a.d.count)) {
      fail(k, "a document end in [" + std::to_string(begin) + ", " + std::to_string(a.d.count) + "]" +
                  (k + 1 == plan.blocks.size() ? " equal to the document count (the last block)" : ""),
           std::to_string(c.doc_end));
    }
    DocBlock b;
    b.doc_begin = begin;
    b.doc_end = c.doc_end;
    b.row_begin = row;
    for (int32_t j = begin; j < c.doc_end; j++) {
      const int64_t ld = std::max<int32_t>(a.d.lengths[j], 0);
      b.bound += ld == 0 ? 0 : (a.pairs == 0 ? tq : a.q.lengths[j]);
      b.longest = std::max<int32_t>(b.longest, static_cast<int32_t>(ld));
      row += ld;
    }
    b.row_end = row;
    b.by_block = c.by_block;
    b.qblocks = c.qblocks;
    b.qblock_size = c.qblock_size;
    if (b.by_block && b.longest > MAXSIM_TRAIN_WALK_MAX_LENGTH) {
      fail(k, "byBlock false for a block with a document of more than " + std::to_string(MAXSIM_TRAIN_WALK_MAX_LENGTH) +
                  " tokens (the block-wide walk's shared memory)",
           "true with a document of " + std::to_string(b.longest));
    }
    const bool split = a.pairs == 0 && a.q.count > 0;
    const bool cover = split ? b.qblock_size >= 1 && b.qblocks == CeilDiv(a.q.count, b.qblock_size) : b.qblocks == 1 && b.qblock_size == 1;
    if (!cover) {
      fail(k, split ? "query blocks of q >= 1 queries, ceil(" + std::to_string(a.q.count) + " / q) of them" : "1 query block of 1 (diagonal pairs)",
           std::to_string(b.qblocks) + " of " + std::to_string(b.qblock_size));
    }
    if (b.bound > kU32 && b.doc_end - b.doc_begin > 1) {
      fail(k, "at most 2^32 - 1 sources (the CSR counts them in 32 bits)", std::to_string(b.bound) + " in " + std::to_string(b.doc_end - b.doc_begin) + " documents");
    }
    if (b.cells() > kU32 - 1) fail(k, "fewer than 2^32 - 1 cells", std::to_string(b.cells()));
    blocks.push_back(b);
    begin = c.doc_end;
  }
  return blocks;
}

// A set of `dtype` for the gradient of the first lengths.size() items of `like` (a packed set: item
// i starts at the sum of the lengths before it; items appended after the forward are not included).
std::shared_ptr<DeviceTokens> GradientSet(Runtime* rt, const DeviceTokens& like, const std::vector<int32_t>& lengths,
                                          DType dtype) {
  std::vector<int64_t> starts(lengths.size());
  int64_t at = 0;
  int32_t longest = 0;
  for (size_t i = 0; i < lengths.size(); i++) {
    starts[i] = at;
    at += lengths[i];
    longest = std::max(longest, lengths[i]);
  }
  if (at > like.tokens) {
    throw std::logic_error("a device-resident training operand is not packed (" + std::to_string(at) +
                           " tokens in its items, " + std::to_string(like.tokens) + " in the set)");
  }
  const int64_t items = static_cast<int64_t>(lengths.size());
  auto g = rt->AllocTokens(dtype, like.dim, at, items);
  if (!lengths.empty()) {
    rt->Upload(g->starts, starts.data(), starts.size() * sizeof(int64_t));
    rt->Upload(g->lengths, lengths.data(), lengths.size() * sizeof(int32_t));
  }
  g->count = items;
  g->tokens = at;
  g->max_length = longest;
  g->host_starts = std::move(starts);  // the host mirror of the spans (views need no download)
  g->host_lengths = lengths;
  return g;
}

// Checks every entry the kernels read (query token s < the query's length: -1 or a token of the
// document; the array is caller-visible, so an edit must not send a read out of bounds) and uploads,
// narrowed to int16 when argmax16, a chunk of whole pairs at a time (the checked values are the
// uploaded ones). Entries past a query's length are never read; they go up as -1.
void UploadArgmax(Runtime* rt, const Problem& a, const int32_t* argmax_in, bool argmax16, cu::CUdeviceptr dst) {
  const int64_t stride = a.stride;
  if (stride == 0) return;
  constexpr int64_t kChunkSlots = int64_t(1) << 22;
  const int64_t pairs_per_chunk = std::max<int64_t>(1, kChunkSlots / stride);
  std::vector<int16_t> narrow(argmax16 ? static_cast<size_t>(std::min<int64_t>(a.num_pairs, pairs_per_chunk) * stride) : 0);
  for (int64_t p0 = 0; p0 < a.num_pairs; p0 += pairs_per_chunk) {
    const int64_t p1 = std::min(a.num_pairs, p0 + pairs_per_chunk);
    for (int64_t p = p0; p < p1; p++) {
      const int64_t i = a.pairs == 0 ? p / a.d.count : p;
      const int64_t j = a.pairs == 0 ? p % a.d.count : p;
      const int32_t lq = a.q.lengths[i];
      const int32_t ld = a.d.lengths[j];
      const int32_t* src = argmax_in + p * stride;
      // Branch-free check (t + 1 > ld unsigned <=> t < -1 or t >= ld) fused with the narrowing: one
      // vectorizable pass; the first bad entry is looked up only for the message.
      const uint32_t limit = static_cast<uint32_t>(std::max<int32_t>(ld, 0));
      uint32_t bad = 0;
      if (argmax16) {
        int16_t* out = narrow.data() + (p - p0) * stride;
        for (int64_t s = 0; s < lq; s++) {
          bad |= static_cast<uint32_t>(static_cast<uint32_t>(src[s]) + 1u > limit);
          out[s] = static_cast<int16_t>(src[s]);
        }
        for (int64_t s = std::max<int32_t>(lq, 0); s < stride; s++) out[s] = -1;
      } else {
        for (int64_t s = 0; s < lq; s++) bad |= static_cast<uint32_t>(static_cast<uint32_t>(src[s]) + 1u > limit);
      }
      if (bad) {
        for (int64_t s = 0; s < lq; s++) {
          if (src[s] < -1 || src[s] >= ld) {
            throw std::invalid_argument("Expected argmax entries in [-1, " + std::to_string(ld) + ") for pair " +
                                        std::to_string(p) + " but received " + std::to_string(src[s]));
          }
        }
      }
    }
    const uint64_t n = static_cast<uint64_t>((p1 - p0) * stride);
    if (argmax16) {
      rt->Upload(dst + static_cast<uint64_t>(p0 * stride) * sizeof(int16_t), narrow.data(), n * sizeof(int16_t));
    } else {
      rt->Upload(dst + static_cast<uint64_t>(p0 * stride) * sizeof(int32_t), argmax_in + p0 * stride,
                 n * sizeof(int32_t));
    }
  }
}

// The deterministic dD: document block after document block, count -> scan -> place -> gather.
// Returns false without touching dD when the plan's path is 'auto' and the first block's contention is low.
bool RunCsr(Runtime* rt, const Problem& a, const BackwardPlan& plan, MaxsimTrainParams p, PhaseTimer& timer) {
  constexpr int64_t kPartialCols = MAXSIM_TRAIN_PARTIAL_COLS;
  constexpr int64_t kScanTile = MAXSIM_TRAIN_SCAN_TILE;
  const int64_t csr_chunk = plan.csr_chunk;
  const std::vector<DocBlock> blocks = ExpandBlocks(a, plan);
  int64_t max_cells = 1, max_bound = 1;
  for (const DocBlock& b : blocks) {
    max_cells = std::max(max_cells, b.cells());
    max_bound = std::max(max_bound, b.bound);
  }
  int64_t max_rows = 1;
  for (const DocBlock& b : blocks) max_rows = std::max(max_rows, b.row_end - b.row_begin);
  const int64_t max_chunks = 2 * max_bound / csr_chunk + 1;
  const int64_t max_tiles = CeilDiv(max_cells, kScanTile);
  ScopedBlock counts(rt->allocator(), static_cast<uint64_t>(max_cells) * sizeof(uint32_t));
  ScopedBlock offsets(rt->allocator(), static_cast<uint64_t>(max_cells + 1) * sizeof(uint32_t));
  ScopedBlock block_sums(rt->allocator(), static_cast<uint64_t>(max_tiles) * sizeof(uint32_t));
  ScopedBlock sources(rt->allocator(), static_cast<uint64_t>(max_bound) * sizeof(uint32_t));
  ScopedBlock stats(rt->allocator(), 2 * sizeof(unsigned long long));
  ScopedBlock chunk_off(rt->allocator(), static_cast<uint64_t>(max_rows + 1) * sizeof(uint32_t));
  ScopedBlock chunk_row(rt->allocator(), static_cast<uint64_t>(max_chunks) * sizeof(uint32_t));
  ScopedBlock partials(rt->allocator(), static_cast<uint64_t>(max_chunks * kPartialCols) * sizeof(double));
  p.counts = DevPtr<uint32_t>(counts.get());
  p.offsets = DevPtr<uint32_t>(offsets.get());
  p.block_sums = DevPtr<uint32_t>(block_sums.get());
  p.sources = DevPtr<uint32_t>(sources.get());
  p.stats = DevPtr<unsigned long long>(stats.get());
  p.chunk_off = DevPtr<uint32_t>(chunk_off.get());
  p.chunk_row = DevPtr<uint32_t>(chunk_row.get());
  p.partials = DevPtr<double>(partials.get());
  p.chunk = csr_chunk;
  p.max_chunks = max_chunks;
  const std::string gather = std::string("maxsim_train_dd_gather_") + KernelSuffix(a.q.dtype);
  const std::string gather_split = std::string("maxsim_train_dd_gather_split_") + KernelSuffix(a.q.dtype);
  bool decided = plan.dd != DDPath::kAuto;
  for (size_t k = 0; k < blocks.size(); k++) {
    const DocBlock& b = blocks[k];
    p.doc_begin = b.doc_begin;
    p.doc_end = b.doc_end;
    p.row_begin = b.row_begin;
    p.row_end = b.row_end;
    p.qblocks = b.qblocks;
    p.qblock_size = b.qblock_size;
    p.cells = b.cells();
    if (b.row_end == b.row_begin) continue;  // only empty documents: no rows to write
    timer.Mark();
    const int64_t units = static_cast<int64_t>(b.doc_end - b.doc_begin) * b.qblocks;
    const int64_t tiles = CeilDiv(p.cells, kScanTile);
    // The block-wide walk: a word per token of the longest document (count), 2 per warp (place).
    const unsigned words = static_cast<unsigned>(b.longest) * sizeof(uint32_t);
    auto walk = [&](bool place) {
      if (b.by_block) {
        Launch1D(rt, place ? "maxsim_train_dd_place_block" : "maxsim_train_dd_count_block", units,
                 32 * MAXSIM_TRAIN_WALK_WARPS, p, place ? 2 * MAXSIM_TRAIN_WALK_WARPS * words : words);
      } else {
        Launch1D(rt, place ? "maxsim_train_dd_place" : "maxsim_train_dd_count", CeilDiv(units, 4), 128, p);
      }
    };
    if (!b.by_block) ZeroWords(rt, counts.get(), static_cast<uint64_t>(p.cells));  // the block walk writes every cell
    walk(false);
    Launch1D(rt, "maxsim_train_dd_scan_reduce", tiles, 1024, p);
    Launch1D(rt, "maxsim_train_dd_scan_top", 1, 1024, p);
    Launch1D(rt, "maxsim_train_dd_scan_down", tiles, 1024, p);
    if (!decided) {  // 'auto': the first block with rows measures the contention
      decided = true;
      ZeroWords(rt, stats.get(), 4);
      Launch1D(rt, "maxsim_train_dd_stats", std::min<int64_t>(CeilDiv(b.row_end - b.row_begin, 256), 1024), 256, p);
      uint32_t total = 0;
      unsigned long long distinct = 0;
      rt->Download(&total, offsets.get() + static_cast<uint64_t>(p.cells) * sizeof(uint32_t), sizeof(total));
      rt->Download(&distinct, stats.get(), sizeof(distinct));
      if (total > 0 && static_cast<double>(distinct) >= plan.auto_atomic_distinct * static_cast<double>(total)) {
        return false;
      }
    }
    walk(true);
    timer.Device("dDBuild");  // count, scan, place (and the 'auto' measurement)
    timer.Mark();
    const int64_t rows = b.row_end - b.row_begin;
    Launch1D(rt, gather, CeilDiv(rows, 4), 128, p);  // rows of at most csr_chunk sources
    // Split rows: chunks per row (into counts, free after place) -> chunk_off (the scan kernels on
    // rows instead of cells) -> chunk -> row map -> per column slice: chunk sums, then the rows.
    const int64_t row_threads = std::min<int64_t>(CeilDiv(rows, 256), 4096);
    Launch1D(rt, "maxsim_train_dd_chunk_count", row_threads, 256, p);
    MaxsimTrainParams pc = p;
    pc.offsets = p.chunk_off;
    pc.cells = rows;
    const int64_t row_tiles = CeilDiv(rows, kScanTile);
    Launch1D(rt, "maxsim_train_dd_scan_reduce", row_tiles, 1024, pc);
    Launch1D(rt, "maxsim_train_dd_scan_top", 1, 1024, pc);
    Launch1D(rt, "maxsim_train_dd_scan_down", row_tiles, 1024, pc);
    Launch1D(rt, "maxsim_train_dd_chunk_map", row_threads, 256, p);
    const int64_t chunk_bound = std::min(max_chunks, 2 * b.bound / csr_chunk + 1);
    for (int64_t k0 = 0; k0 < a.q.dim; k0 += kPartialCols) {
      p.k_begin = k0;
      Launch1D(rt, gather_split, CeilDiv(chunk_bound, 4), 128, p);
      Launch1D(rt, "maxsim_train_dd_combine", CeilDiv(rows, 4), 128, p);
    }
    timer.Device("dDGather");
  }
  // The CSR blocks go back to the allocator when this scope ends: finish using them first.
  rt->Synchronize();
  return true;
}

std::string Int(int64_t v) { return std::to_string(v); }

// gradScores from the contrastive loss of the state's scores, written into `grad` ([rows, cols] f64),
// and the loss into c.loss. Reads the loss and the empty-positive flag back (one small synchronous
// copy) so that a bad step fails before the backward kernels are enqueued.
void RunContrastiveLoss(Runtime* rt, const TrainState* state, ContrastiveLoss& c, cu::CUdeviceptr grad) {
  if (!state) throw std::invalid_argument("Expected a device-resident training state for the contrastive loss but received none");
  const Problem& a = state->a;
  CheckContrastive(c, a);
  const int64_t rows = a.q.count, cols = a.d.count;
  if (!state->scores) throw std::invalid_argument("Expected the forward's scores kept in the training state but received none");
  std::unique_ptr<ScopedBlock> labels;
  if (!c.labels.empty()) {
    labels = std::make_unique<ScopedBlock>(rt->allocator(), static_cast<uint64_t>(rows) * sizeof(int32_t));
    rt->Upload(labels->get(), c.labels.data(), static_cast<uint64_t>(rows) * sizeof(int32_t));
  }
  ScopedBlock row_loss(rt->allocator(), static_cast<uint64_t>(rows) * sizeof(double));
  // out: the loss (f64), then the lowest row with an empty positive (int32, INT32_MAX for none)
  ScopedBlock out(rt->allocator(), 2 * sizeof(double));
  Check(Api().cuMemsetD32Async(out.get() + sizeof(double), static_cast<unsigned>(std::numeric_limits<int32_t>::max()), 1,
                               rt->stream()),
        "cuMemsetD32Async");
  MaxsimLossParams p;
  std::memset(&p, 0, sizeof(p));
  p.scores = DevPtr<const float>(state->scores);
  p.labels = labels ? DevPtr<const int32_t>(labels->get()) : nullptr;
  p.grad = DevPtr<double>(grad);
  p.row_loss = DevPtr<double>(row_loss.get());
  p.loss = DevPtr<double>(out.get());
  p.bad_row = DevPtr<int32_t>(out.get() + sizeof(double));
  p.rows = rows;
  p.cols = cols;
  p.tau = c.tau;
  LaunchSpec spec;
  spec.kernel = "maxsim_loss_rows";
  spec.grid[0] = static_cast<unsigned>(std::min(rows, kMaxGrid));
  spec.block[0] = MAXSIM_LOSS_THREADS;
  rt->LaunchWithParams(spec, &p);
  spec.kernel = "maxsim_loss_total";
  spec.grid[0] = 1;
  spec.block[0] = 1;
  rt->LaunchWithParams(spec, &p);
  struct {
    double loss;
    int32_t bad_row;
    int32_t pad;
  } back{};
  static_assert(sizeof(back) == 2 * sizeof(double), "the read-back block");
  rt->Download(&back, out.get(), sizeof(back));  // synchronizes: the scratch above may be freed after
  if (back.bad_row != std::numeric_limits<int32_t>::max()) {
    const int64_t i = back.bad_row;
    const int64_t label = c.labels.empty() ? i : c.labels[static_cast<size_t>(i)];
    throw EmptyPositiveError(i, label);
  }
  c.loss = back.loss;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Plans

void CheckForwardPlan(const ForwardPlan& plan) {
  const bool wg = plan.kernel == FwdKernel::kWgmma;
  const uint32_t threads = wg ? MAXSIM_TRAIN_FWD_WGMMA_THREADS : MAXSIM_TRAIN_FWD_THREADS;
  if (plan.threads != threads) {
    PlanError("threads", Int(threads) + " (the forward kernel's block size)", Int(plan.threads));
  }
  const uint32_t smem = wg ? MAXSIM_TRAIN_FWD_WGMMA_SMEM : plan.kernel == FwdKernel::kMma ? MAXSIM_TRAIN_FWD_MMA_SMEM : 0;
  if (plan.smem != smem) {
    PlanError("smem", Int(smem) + std::string(" (the dynamic shared memory of the ") +
                          (wg ? "wgmma" : plan.kernel == FwdKernel::kMma ? "tensor-core" : "CUDA-core") + " forward)",
              Int(plan.smem));
  }
  if (plan.grid < 0 || plan.grid > kMaxGrid) PlanError("grid", "an integer in [0, " + Int(kMaxGrid) + "]", Int(plan.grid));
  if (wg ? plan.query_chunk < 1 : plan.query_chunk != 0) {
    PlanError("queryChunk", wg ? "an integer >= 1 for 'wgmma'" : "0 (only 'wgmma' takes query chunks)", Int(plan.query_chunk));
  }
  if (wg ? (plan.doc_groups < 1 || plan.doc_groups > std::numeric_limits<int32_t>::max()) : plan.doc_groups != 0) {
    PlanError("docGroups", wg ? "an integer in [1, 2^31) for 'wgmma'" : "0 (only 'wgmma' deals documents into groups)",
              Int(plan.doc_groups));
  }
  if (plan.tma && !wg) PlanError("tma", "false (only 'wgmma' reads documents through a tensor map)", "true");
}

void CheckForwardPlan(const ForwardPlan& plan, const Problem& a, int cc_major) {
  CheckForwardPlan(plan);
  const bool wg = plan.kernel == FwdKernel::kWgmma;
  if (a.num_pairs > 0 ? (plan.grid < 1 || (!wg && plan.grid > a.num_pairs)) : plan.grid != 0) {
    PlanError("grid", a.num_pairs > 0 ? "an integer in [1, " + Int(wg ? kMaxGrid : a.num_pairs) + "]" : "0 (no pairs)",
              Int(plan.grid));
  }
  if (wg) {
    if (cc_major != MAXSIM_TRAIN_WGMMA_CC || a.pairs != 0) {
      PlanError("kernel", "'wgmma' only for all pairs on compute capability " + Int(MAXSIM_TRAIN_WGMMA_CC) + ".x",
                std::string(a.pairs != 0 ? "diagonal pairs" : "all pairs") + " on compute capability " + Int(cc_major));
    }
    // the kernel indexes query slices as int: a launch's chunk * ceil(stride / 16) < 2^31
    const int64_t slices = std::min<int64_t>(plan.query_chunk, a.q.count) * std::max<int64_t>(1, CeilDiv(a.stride, 16));
    if (slices > std::numeric_limits<int32_t>::max()) {
      PlanError("queryChunk", "at most " + Int(std::numeric_limits<int32_t>::max() / std::max<int64_t>(1, CeilDiv(a.stride, 16))) +
                                  " queries of this stride per launch", Int(plan.query_chunk));
    }
  }
  if (plan.kernel == FwdKernel::kMma || wg) {
    const bool half = a.d.dtype == DType::Float16 || a.d.dtype == DType::BFloat16;
    const bool applies = half && a.q.dtype == a.d.dtype && a.q.dim % MAXSIM_TRAIN_MMA_DIM_MULTIPLE == 0 &&
                         a.q.dim >= MAXSIM_TRAIN_MMA_DIM_MULTIPLE && a.q.dim <= MAXSIM_TRAIN_MMA_MAX_DIM &&
                         cc_major >= MAXSIM_TRAIN_MMA_MIN_CC;
    if (!applies) {
      PlanError("kernel",
                "float16 or bfloat16 queries and docs of one dtype, dim a multiple of " +
                    Int(MAXSIM_TRAIN_MMA_DIM_MULTIPLE) + " up to " + Int(MAXSIM_TRAIN_MMA_MAX_DIM) +
                    " and compute capability >= " + Int(MAXSIM_TRAIN_MMA_MIN_CC) + " for 'mma' and 'wgmma'",
                std::string(DTypeName(a.q.dtype)) + " queries, " + DTypeName(a.d.dtype) + " docs, dim " + Int(a.q.dim) +
                    ", compute capability " + Int(cc_major));
    }
  }
  if (plan.argmax16 && a.d.max_length > std::numeric_limits<int16_t>::max()) {
    PlanError("argmax16", "false for documents of " + Int(int64_t(std::numeric_limits<int16_t>::max()) + 1) +
                              " tokens or more", "true with a document of " + Int(a.d.max_length));
  }
}

void CheckBackwardPlan(const BackwardPlan& plan) {
  if (!(plan.auto_atomic_distinct >= 0 && std::isfinite(plan.auto_atomic_distinct))) {
    PlanError("autoAtomicDistinct", "a finite number >= 0", std::to_string(plan.auto_atomic_distinct));
  }
  if (plan.csr_chunk < 1) PlanError("csrChunk", "an integer >= 1", Int(plan.csr_chunk));
  if (plan.dd == DDPath::kAtomic && !plan.blocks.empty()) {
    PlanError("blocks", "none for dD 'atomic'", Int(static_cast<int64_t>(plan.blocks.size())) + " blocks");
  }
}

void CheckBackwardPlan(const BackwardPlan& plan, const Problem& a) {
  CheckBackwardPlan(plan);
  // The CSR lists argmax slots as u32 (half the bytes of its largest buffer)
  const int64_t slots = a.num_pairs * a.stride;
  if (plan.dd != DDPath::kAtomic && slots > int64_t(std::numeric_limits<uint32_t>::max())) {
    PlanError("dD", "'atomic' (dDPath) when pairs x the longest query exceed 2^32 - 1 argmax slots",
              "'" + std::string(plan.dd == DDPath::kAuto ? "auto" : "csr") + "' with " + Int(slots) + " slots");
  }
  if (plan.argmax16 && a.d.max_length > std::numeric_limits<int16_t>::max()) {
    PlanError("argmax16", "false for documents of " + Int(int64_t(std::numeric_limits<int16_t>::max()) + 1) +
                              " tokens or more", "true with a document of " + Int(a.d.max_length));
  }
  if (plan.dd != DDPath::kAtomic && a.q.lengths && a.d.lengths) ExpandBlocks(a, plan);
}

void CheckContrastive(const ContrastiveLoss& c, const Problem& a) {
  if (a.pairs != 0) {
    throw std::invalid_argument("Expected a training state of pairs 'all' for the contrastive loss but received one of pairs 'diagonal'");
  }
  const int64_t rows = a.q.count, cols = a.d.count;
  if (!(c.tau > 0 && std::isfinite(c.tau))) {
    throw std::invalid_argument("Expected a finite number > 0 for temperature but received " + std::to_string(c.tau));
  }
  if (rows < 1) throw std::invalid_argument("Expected at least 1 query for queries.count but received " + Int(rows));
  if (rows > std::numeric_limits<int32_t>::max() - 1) {
    throw std::invalid_argument("Expected fewer than 2^31 - 1 queries for the contrastive loss but received " + Int(rows));
  }
  if (c.labels.empty()) {
    if (rows > cols) {
      throw std::invalid_argument("Expected at least " + Int(rows) +
                                  " documents (query i's positive is document i without labels) for docs.count but received " +
                                  Int(cols));
    }
    return;
  }
  if (static_cast<int64_t>(c.labels.size()) != rows) {
    throw std::invalid_argument("Expected an Int32Array of " + Int(rows) + " entries (one per query) for labels but received " +
                                Int(static_cast<int64_t>(c.labels.size())) + " entries");
  }
  for (size_t i = 0; i < c.labels.size(); i++) {
    if (c.labels[i] < 0 || c.labels[i] >= cols) {
      throw std::invalid_argument("Expected a document index in [0, " + Int(cols) + ") for labels[" + Int(static_cast<int64_t>(i)) +
                                  "] but received " + Int(c.labels[i]));
    }
  }
}

TrainState::~TrainState() {
  if (!argmax && !scores) return;
  Runtime* r = rt;
  r->Post([r, p = argmax, s = scores] {
    if (p) r->allocator().Free(p);
    if (s) r->allocator().Free(s);
  });
}

// ---------------------------------------------------------------------------------------------
// Jobs

void RunForward(Runtime* rt, ForwardJob& job) {
  rt->EnsureReady();
  const ForwardPlan& plan = job.plan;
  const bool argmax16 = plan.argmax16;
  PhaseTimer timer(rt, job.profile);
  std::shared_ptr<DeviceTokens> q, d;
  Materialize(rt, job.a, job.keep, &q, &d);
  const uint64_t slots = static_cast<uint64_t>(job.a.num_pairs) * static_cast<uint64_t>(job.a.stride);
  const uint64_t entry = argmax16 ? sizeof(int16_t) : sizeof(int32_t);
  std::unique_ptr<ScopedBlock> argmax_scoped;
  cu::CUdeviceptr argmax = 0;
  if (job.keep) {
    job.state = std::make_shared<TrainState>();
    job.state->rt = rt;
    job.state->argmax16 = argmax16;
    job.state->argmax = rt->allocator().Alloc(std::max<uint64_t>(slots, 1) * entry);
    argmax = job.state->argmax;
    job.state->a = std::move(job.a);  // usable below through the state (vectors move with their data)
    job.state->a.Rebind();
  } else {
    argmax_scoped = std::make_unique<ScopedBlock>(rt->allocator(), std::max<uint64_t>(slots, 1) * entry);
    argmax = argmax_scoped->get();
  }
  const Problem& a = job.keep ? job.state->a : job.a;
  if (a.num_pairs == 0) return;
  const int64_t grid = plan.grid;
  const bool wg = plan.kernel == FwdKernel::kWgmma;
  // best[]: one stride-long stripe per CTA (simt, mma), or a slot per pair of one query chunk (wgmma)
  const uint64_t chunk_pairs = wg ? static_cast<uint64_t>(std::min<int64_t>(plan.query_chunk, a.q.count)) * a.d.count : 0;
  const uint64_t best_floats = (wg ? chunk_pairs : static_cast<uint64_t>(grid)) * static_cast<uint64_t>(a.stride);
  // A kept state keeps the scores on the device too (the contrastive loss of the step reads them).
  const uint64_t score_bytes = static_cast<uint64_t>(a.num_pairs) * sizeof(float);
  std::unique_ptr<ScopedBlock> scores_scoped;
  if (job.keep) {
    job.state->scores = rt->allocator().Alloc(score_bytes);
  } else {
    scores_scoped = std::make_unique<ScopedBlock>(rt->allocator(), score_bytes);
  }
  const cu::CUdeviceptr scores = job.keep ? job.state->scores : scores_scoped->get();
  ScopedBlock best(rt->allocator(), std::max<uint64_t>(best_floats, 1) * sizeof(float));
  MaxsimTrainParams p = BaseParams(a, *q, *d);
  p.scores = DevPtr<float>(scores);
  p.best = DevPtr<float>(best.get());
  p.argmax = DevPtr<void>(argmax);
  p.argmax16 = argmax16 ? 1 : 0;
  if (timer.on()) rt->Synchronize();
  timer.Host("upload");
  timer.Mark();
  if (wg) {
    // Launches over query chunks: each sees queries [q0, q0 + n) as its own (offset tables, scores
    // and argmax), reusing best[]; maxsim_train_fwd_sum then finishes the chunk's pairs.
    const std::string name = std::string(plan.tma ? "maxsim_train_fwd_wgmma_tma_" : "maxsim_train_fwd_wgmma_") +
                             KernelSuffix(a.d.dtype);
    cu::CUtensorMap map{};
    if (plan.tma) map = rt->TokensTensorMap(*d, kWgmmaTmaBox);
    const uint64_t entry = argmax16 ? sizeof(int16_t) : sizeof(int32_t);
    for (int64_t q0 = 0; q0 < a.q.count; q0 += plan.query_chunk) {
      const int64_t n = std::min<int64_t>(plan.query_chunk, a.q.count - q0);
      MaxsimTrainParams c = p;
      c.query_starts = DevPtr<const int64_t>(q->starts + static_cast<uint64_t>(q0) * sizeof(int64_t));
      c.query_lengths = DevPtr<const int32_t>(q->lengths + static_cast<uint64_t>(q0) * sizeof(int32_t));
      c.num_queries = static_cast<int32_t>(n);
      c.num_pairs = n * a.d.count;
      c.scores = DevPtr<float>(scores + static_cast<uint64_t>(q0 * a.d.count) * sizeof(float));
      c.argmax = DevPtr<void>(argmax + static_cast<uint64_t>(q0 * a.d.count) * static_cast<uint64_t>(a.stride) * entry);
      c.doc_groups = static_cast<int32_t>(plan.doc_groups);
      Launch1D(rt, name, grid, plan.threads, c, plan.smem, plan.tma ? &map : nullptr);
      Launch1D(rt, "maxsim_train_fwd_sum", CeilDiv(c.num_pairs, 4), 128, c);
    }
  } else {
    const std::string name = plan.kernel == FwdKernel::kMma ? "maxsim_train_fwd_mma_" : "maxsim_train_fwd_";
    Launch1D(rt, name + KernelSuffix(a.d.dtype), grid, plan.threads, p, plan.smem);
  }
  timer.Device("forwardKernel");
  if (timer.on()) rt->Synchronize();
  timer.Host("forwardWait");
  rt->Download(job.scores_out, scores, score_bytes);
  if (!job.keep) DownloadArgmax(rt, argmax, slots, argmax16, job.argmax_out);
  timer.Host("download");
  if (timer.on()) job.phases = timer.Finish();
}

void RunBackward(Runtime* rt, BackwardJob& job) {
  rt->EnsureReady();
  Problem& a = job.a;
  const std::shared_ptr<TrainState>& state = job.state;
  const bool argmax16 = state ? state->argmax16 : job.plan.argmax16;
  if (!state && a.num_pairs == 0) return;
  PhaseTimer timer(rt, job.profile);
  std::shared_ptr<DeviceTokens> q = a.q_dev, d = a.d_dev;
  if (!state) Materialize(rt, a, false, &q, &d);
  if (timer.on()) rt->Synchronize();
  timer.Host("uploadTokens");
  const int64_t dim = a.q.dim;
  const uint64_t slots = static_cast<uint64_t>(a.num_pairs) * static_cast<uint64_t>(a.stride);
  std::unique_ptr<ScopedBlock> argmax_scoped;
  cu::CUdeviceptr argmax = state ? state->argmax : 0;
  if (!state) {
    argmax_scoped = std::make_unique<ScopedBlock>(
        rt->allocator(), std::max<uint64_t>(slots, 1) * (argmax16 ? sizeof(int16_t) : sizeof(int32_t)));
    argmax = argmax_scoped->get();
    UploadArgmax(rt, a, job.argmax_in, argmax16, argmax);
  }
  ScopedBlock grad(rt->allocator(), std::max<uint64_t>(static_cast<uint64_t>(a.num_pairs), 1) * sizeof(double));
  if (job.contrastive) {
    timer.Mark();
    RunContrastiveLoss(rt, state.get(), *job.contrastive, grad.get());
    timer.Device("loss");
  } else if (a.num_pairs > 0) {
    rt->Upload(grad.get(), job.grad_in, static_cast<uint64_t>(a.num_pairs) * sizeof(double));
  }
  if (timer.on()) rt->Synchronize();
  timer.Host("uploadArgmax");
  // Tokens of the problem's items: a device set appended to after the forward holds more, which
  // this pass neither reads nor writes.
  const uint64_t dq_elems = static_cast<uint64_t>(TokensOf(a.q)) * static_cast<uint64_t>(dim);
  const uint64_t dd_elems = static_cast<uint64_t>(TokensOf(a.d)) * static_cast<uint64_t>(dim);
  // The kernels write float32: into the gradient set itself, or into scratch that is then cast
  // into a float16 / bfloat16 set (device, input_dtype), or into scratch that is downloaded.
  std::unique_ptr<ScopedBlock> dq_scoped, dd_scoped;
  cu::CUdeviceptr dq = 0, dd = 0;
  auto& dq_set = job.dq_set;
  auto& dd_set = job.dd_set;
  if (state) {
    dq_set = GradientSet(rt, *q, a.q_len, job.input_dtype ? a.q.dtype : DType::Float32);
    dd_set = GradientSet(rt, *d, a.d_len, job.input_dtype ? a.d.dtype : DType::Float32);
  }
  if (dq_set && dq_set->dtype == DType::Float32) {
    dq = dq_set->data;
  } else {
    dq_scoped = std::make_unique<ScopedBlock>(rt->allocator(), std::max<uint64_t>(dq_elems, 1) * sizeof(float));
    dq = dq_scoped->get();
  }
  if (dd_set && dd_set->dtype == DType::Float32) {
    dd = dd_set->data;
  } else {
    dd_scoped = std::make_unique<ScopedBlock>(rt->allocator(), std::max<uint64_t>(dd_elems, 1) * sizeof(float));
    dd = dd_scoped->get();
  }
  if (a.num_pairs == 0) {  // no queries or no documents: the gradients are zero
    ZeroWords(rt, dq, dq_elems);
    ZeroWords(rt, dd, dd_elems);
    if (dq_set && dq != dq_set->data) rt->CastFromF32(dq, dq_set->data, dq_set->dtype, dq_elems);
    if (dd_set && dd != dd_set->data) rt->CastFromF32(dd, dd_set->data, dd_set->dtype, dd_elems);
    rt->Synchronize();
    return;
  }
  MaxsimTrainParams p = BaseParams(a, *q, *d);
  p.argmax = DevPtr<void>(argmax);
  p.argmax16 = argmax16 ? 1 : 0;
  p.grad_scores = DevPtr<const double>(grad.get());
  p.dq = DevPtr<float>(dq);
  p.dd = DevPtr<float>(dd);

  // dQ: one warp per query token, 8 tokens of one query per block; every real row is written. On the
  // side stream, overlapping dD (its CSR build is latency-bound): the outputs are disjoint and both
  // only read the operands, the argmax and the score gradients. Not when profiling (phases in turn).
  const bool overlap = !timer.on() && q->tokens > 0 && d->tokens > 0;
  // Joins the side stream back on every way out (an exception included), so that work enqueued on
  // the stream later (and the allocator's reuse of this job's blocks) waits for dQ.
  struct Joiner {
    Runtime* rt;
    bool pending = false;
    void Join() {
      if (pending) rt->Join();
      pending = false;
    }
    ~Joiner() {
      try {
        Join();
      } catch (...) {  // a failing driver: the job's own error is the one reported
      }
    }
  } joiner{rt};
  timer.Mark();
  if (q->tokens > 0) {
    if (overlap) {
      rt->Fork();
      joiner.pending = true;
    }
    Launch1D(rt, std::string("maxsim_train_dq_") + KernelSuffix(a.d.dtype), a.q.count * CeilDiv(a.stride, 8), 256, p,
             0, nullptr, overlap ? rt->side_stream() : nullptr);
  }
  timer.Device("dQ");
  const size_t dd_from = timer.Mark();

  if (d->tokens > 0) {
    bool atomic = job.plan.dd == DDPath::kAtomic;
    if (!atomic) atomic = !RunCsr(rt, a, job.plan, p, timer);  // false: 'auto' chose the atomic scatter before writing dD
    if (atomic) {
      job.ran_atomic = true;
      ZeroWords(rt, dd, dd_elems);
      Launch1D(rt, "maxsim_train_dd_atomic", CeilDiv(static_cast<int64_t>(slots), 4), 128, p);
    }
  }
  joiner.Join();  // before anything reads dq
  timer.Device("dD", dd_from);
  if (timer.on()) rt->Synchronize();
  timer.Host("kernelsWait");
  if (state) {
    if (dq != dq_set->data) rt->CastFromF32(dq, dq_set->data, dq_set->dtype, dq_elems);
    if (dd != dd_set->data) rt->CastFromF32(dd, dd_set->data, dd_set->dtype, dd_elems);
    // The gradients stay on the device; the scratch blocks above go back to the allocator when
    // this scope ends, and other jobs may use other streams: finish first.
    rt->Synchronize();
  } else {
    // Downloads synchronize the stream before the scratch blocks are released.
    DownloadRows(rt, a.q, dq, dq_elems, job.dq_out);
    DownloadRows(rt, a.d, dd, dd_elems, job.dd_out);
    timer.Host("download");
  }
  if (timer.on()) job.phases = timer.Finish();
}

// contrastiveLoss's InvalidArgumentError, word for word
EmptyPositiveError::EmptyPositiveError(int64_t row, int64_t label)
    : std::invalid_argument("Expected a positive document with tokens for labels[" + Int(row) +
                            "] but received empty document " + Int(label)),
      row(row) {}

void RunStep(Runtime* rt, StepJob& job) {
  job.forward.keep = true;
  RunForward(rt, job.forward);
  BackwardJob& b = job.backward;
  b.state = std::move(job.forward.state);
  b.a = b.state->a;
  b.a.Rebind();
  try {
    RunBackward(rt, b);
  } catch (const EmptyPositiveError& e) {
    job.empty_positive = e.row;
  }
  b.state.reset();  // the argmax and the scores go back to the allocator (posted)
}

void DownloadStateArgmax(Runtime* rt, const TrainState& state, int32_t* out) {
  rt->EnsureReady();
  const uint64_t slots = static_cast<uint64_t>(state.a.num_pairs) * static_cast<uint64_t>(state.a.stride);
  if (slots > 0) DownloadArgmax(rt, state.argmax, slots, state.argmax16, out);
}

}  // namespace maxsim_cuda::train
