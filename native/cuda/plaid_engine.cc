// The compressed index on the GPU: the encoder (assignment + residual codes) and the device index's
// batched search (plaid_engine.h). Kernels and their argument blocks: kernels/maxsim_plaid.cu,
// kernels/maxsim_plaid_params.h.
#include "plaid_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "kernels/maxsim_plaid_params.h"

namespace maxsim_cuda {

namespace {

template <typename P>
P* Dev(cu::CUdeviceptr p) {
  return reinterpret_cast<P*>(static_cast<uintptr_t>(p));
}

int64_t Div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename P>
void Go(Runtime& rt, const char* kernel, int64_t gx, int64_t gy, unsigned block, unsigned smem, const P& p) {
  if (gx <= 0 || gy <= 0) return;
  LaunchSpec spec;
  spec.kernel = kernel;
  spec.grid[0] = static_cast<unsigned>(gx);
  spec.grid[1] = static_cast<unsigned>(gy);
  spec.block[0] = block;
  spec.smem = smem;
  rt.LaunchWithParams(spec, &p);
}

std::unique_ptr<ScopedBlock> Block(Runtime& rt, uint64_t bytes) {
  return std::make_unique<ScopedBlock>(rt.allocator(), std::max<uint64_t>(bytes, 16));
}

void Zero(Runtime& rt, cu::CUdeviceptr ptr, uint64_t bytes) {
  if (bytes >= 4) Check(Api().cuMemsetD32Async(ptr, 0u, bytes / 4, rt.stream()), "cuMemsetD32Async");
}

// -|c|^2 / 2 in double, rounded once: the CPU's PackCentroids bias.
std::vector<float> Bias(const float* c, int64_t n, int64_t d) {
  std::vector<float> b(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; j++) {
    double sq = 0.0;
    for (int64_t k = 0; k < d; k++) sq += static_cast<double>(c[j * d + k]) * c[j * d + k];
    b[j] = static_cast<float>(-0.5 * sq);
  }
  return b;
}

cu::CUdeviceptr Put(Runtime& rt, const void* src, uint64_t bytes) {
  cu::CUdeviceptr p = rt.allocator().Alloc(std::max<uint64_t>(bytes, 16));
  if (bytes > 0) rt.Upload(p, src, bytes);
  return p;
}

float KeyScore(unsigned long long key) {
  if (key == 0) return -INFINITY;
  const uint32_t ord = static_cast<uint32_t>(key >> 32);
  const uint32_t u = (ord & 0x80000000u) ? (ord & 0x7FFFFFFFu) : ~ord;
  float s;
  std::memcpy(&s, &u, 4);
  return s;
}

class Events {
 public:
  explicit Events(Runtime& rt, int n) : rt_(rt), ev_(static_cast<size_t>(n), nullptr) {
    for (auto& e : ev_) Check(Api().cuEventCreate(&e, cu::CU_EVENT_DEFAULT), "cuEventCreate");
  }
  ~Events() {
    for (auto e : ev_) Api().cuEventDestroy(e);
  }
  void Mark(int i) { Check(Api().cuEventRecord(ev_[i], rt_.stream()), "cuEventRecord"); }
  double Ms(int a, int b) {
    Check(Api().cuEventSynchronize(ev_[b]), "cuEventSynchronize");
    float ms = 0;
    Check(Api().cuEventElapsedTime(&ms, ev_[a], ev_[b]), "cuEventElapsedTime");
    return ms;
  }

 private:
  Runtime& rt_;
  std::vector<cu::CUevent> ev_;
};

}  // namespace

// ---- encoder ------------------------------------------------------------------------------------

PlaidEncoder::PlaidEncoder(Runtime& rt, const float* centroids, int64_t k, int64_t d, const PlaidGroupsHost* groups,
                           const float* cutoffs, const float* tables, int bits)
    : rt_(rt), k_(k), d_(d), bits_(bits) {
  try {
    cent_ = Put(rt, centroids, static_cast<uint64_t>(k * d) * 4);
    const std::vector<float> b = Bias(centroids, k, d);
    bias_ = Put(rt, b.data(), static_cast<uint64_t>(k) * 4);
    if (groups) {
      g_ = groups->g;
      probe_ = groups->probe;
      coarse_ = Put(rt, groups->coarse, static_cast<uint64_t>(g_ * d) * 4);
      const std::vector<float> cb = Bias(groups->coarse, g_, d);
      coarse_bias_ = Put(rt, cb.data(), static_cast<uint64_t>(g_) * 4);
      offsets_host_.assign(groups->offsets, groups->offsets + g_ + 1);
      group_off_ = Put(rt, offsets_host_.data(), static_cast<uint64_t>(g_ + 1) * 4);
      members_ = Put(rt, groups->members, static_cast<uint64_t>(offsets_host_[g_]) * 4);
    }
    if (cutoffs && tables) {
      cutoffs_ = Put(rt, cutoffs, static_cast<uint64_t>(d * ((1 << bits) - 1)) * 4);
      tables_ = Put(rt, tables, static_cast<uint64_t>(d * 16) * 4);
    }
  } catch (...) {
    for (cu::CUdeviceptr p : {cent_, bias_, coarse_, coarse_bias_, group_off_, members_, cutoffs_, tables_})
      rt.allocator().Free(p);
    throw;
  }
}

PlaidEncoder::~PlaidEncoder() {
  Runtime* rt = &rt_;
  rt->Post([rt, blocks = std::vector<cu::CUdeviceptr>{cent_, bias_, coarse_, coarse_bias_, group_off_, members_,
                                                      cutoffs_, tables_}] {
    for (cu::CUdeviceptr b : blocks) rt->allocator().Free(b);
  });
}

void PlaidEncoder::AssignDevice(cu::CUdeviceptr x, int dtype, int64_t n, cu::CUdeviceptr best) {
  Zero(rt_, best, static_cast<uint64_t>(n) * 8);
  if (n == 0) return;
  PlaidAssignParams p{};
  p.x = Dev<const void>(x);
  p.dtype = dtype;
  p.d = d_;
  p.n = n;
  p.best = Dev<unsigned long long>(best);
  p.bias = Dev<const float>(bias_);
  p.cent = Dev<const float>(cent_);
  const int64_t row_tiles = Div(n, PLAID_TILE_M);
  if (g_ == 0) {
    p.k = k_;
    // enough blocks for every SM: split the centroids when the rows are few
    p.split = std::max<int64_t>(1, std::min<int64_t>(Div(k_, PLAID_TILE_N), Div(1024, row_tiles)));
    Go(rt_, "plaid_assign_best", row_tiles, p.split, PLAID_THREADS, 0, p);
    return;
  }
  // two-level: coarse scores, each row's groups, rows scattered to groups, the fine pass per tile
  auto scores = Block(rt_, static_cast<uint64_t>(n * g_) * 4);
  auto pick = Block(rt_, static_cast<uint64_t>(n * probe_) * 4);
  auto count = Block(rt_, static_cast<uint64_t>(g_) * 4);
  PlaidAssignParams c = p;
  c.cent = Dev<const float>(coarse_);
  c.bias = Dev<const float>(coarse_bias_);
  c.k = g_;
  c.ld = 1;
  c.scores = Dev<float>(scores->get());
  Go(rt_, "plaid_dots", row_tiles, Div(g_, PLAID_TILE_N), PLAID_THREADS, 0, c);
  c.g = g_;
  c.probe = probe_;
  c.group_off = Dev<const int32_t>(group_off_);
  c.pick = Dev<int32_t>(pick->get());
  c.group_count = Dev<int32_t>(count->get());
  Zero(rt_, count->get(), static_cast<uint64_t>(g_) * 4);
  Go(rt_, "plaid_pick_groups", Div(n * 32, 256), 1, 256, 0, c);
  std::vector<int32_t> counts(static_cast<size_t>(g_));
  rt_.Download(counts.data(), count->get(), static_cast<uint64_t>(g_) * 4);
  std::vector<int32_t> first(static_cast<size_t>(g_));
  std::vector<int32_t> tiles;
  int64_t slots = 0;
  for (int64_t j = 0; j < g_; j++) {
    first[j] = static_cast<int32_t>(slots);
    for (int64_t r = 0; r < counts[j]; r += PLAID_TILE_M) {
      tiles.push_back(static_cast<int32_t>(j));
      tiles.push_back(static_cast<int32_t>(slots + r));
      tiles.push_back(static_cast<int32_t>(std::min<int64_t>(PLAID_TILE_M, counts[j] - r)));
    }
    slots += counts[j];
  }
  auto first_d = Block(rt_, static_cast<uint64_t>(g_) * 4);
  rt_.Upload(first_d->get(), first.data(), static_cast<uint64_t>(g_) * 4);
  auto rows = Block(rt_, static_cast<uint64_t>(slots) * 4);
  c.group_first = Dev<const int32_t>(first_d->get());
  c.group_cursor = Dev<int32_t>(count->get());
  c.rows_out = Dev<int32_t>(rows->get());
  Zero(rt_, count->get(), static_cast<uint64_t>(g_) * 4);
  Go(rt_, "plaid_scatter_rows", Div(n * probe_, 256), 1, 256, 0, c);
  const int64_t num_tiles = static_cast<int64_t>(tiles.size() / 3);
  auto tiles_d = Block(rt_, tiles.size() * 4);
  rt_.Upload(tiles_d->get(), tiles.data(), tiles.size() * 4);
  PlaidAssignParams f = p;
  f.k = k_;
  f.tiles = Dev<const int32_t>(tiles_d->get());
  f.rows_of = Dev<const int32_t>(rows->get());
  f.members = Dev<const int32_t>(members_);
  f.group_off = Dev<const int32_t>(group_off_);
  f.split = 1;
  Go(rt_, "plaid_assign_best", num_tiles, 1, PLAID_THREADS, 0, f);
  rt_.Synchronize();  // the scoped blocks go back to the cache with the stream idle
}

void PlaidEncoder::Assign(const void* x, DType dtype, int64_t n, int32_t* ids, float* scores) {
  const auto t0 = std::chrono::steady_clock::now();
  auto xd = Block(rt_, static_cast<uint64_t>(n * d_) * DTypeSize(dtype));
  rt_.Upload(xd->get(), x, static_cast<uint64_t>(n * d_) * DTypeSize(dtype));
  auto best = Block(rt_, static_cast<uint64_t>(n) * 8);
  AssignDevice(xd->get(), static_cast<int>(dtype), n, best->get());
  std::vector<unsigned long long> keys(static_cast<size_t>(n));
  rt_.Download(keys.data(), best->get(), static_cast<uint64_t>(n) * 8);
  for (int64_t r = 0; r < n; r++) {
    ids[r] = keys[r] == 0 ? 0 : PlaidKeyId(keys[r]);
    if (scores) scores[r] = KeyScore(keys[r]);
  }
  last_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double PlaidEncoder::Encode(const TokenSet& docs, int64_t first, int32_t* cids, uint8_t* codes) {
  if (!can_encode()) throw std::invalid_argument("Expected an encoder with cutoffs and tables for encode");
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t d = d_;
  const int esize = DTypeSize(docs.dtype);
  int64_t n = 0;
  for (int64_t b = 0; b < docs.count; b++) n += docs.lengths[b];
  if (n == 0) return 0.0;
  // the documents' rows back to back, in their dtype
  std::vector<uint8_t> rows(static_cast<size_t>(n * d * esize));
  int64_t at = 0;
  for (int64_t b = 0; b < docs.count; b++) {
    const uint64_t bytes = static_cast<uint64_t>(docs.lengths[b]) * d * esize;
    std::memcpy(rows.data() + at, static_cast<const uint8_t*>(docs.data) + static_cast<int64_t>(docs.starts[b]) * d * esize,
                bytes);
    at += static_cast<int64_t>(bytes);
  }
  auto xd = Block(rt_, rows.size());
  rt_.Upload(xd->get(), rows.data(), rows.size());
  auto best = Block(rt_, static_cast<uint64_t>(n) * 8);
  AssignDevice(xd->get(), static_cast<int>(docs.dtype), n, best->get());
  const int64_t b0 = first / 16;
  const int64_t blocks = (first + n + 15) / 16 - b0;
  const int64_t block_bytes = d * 2 * bits_;
  auto codes_d = Block(rt_, static_cast<uint64_t>(blocks * block_bytes));
  auto cids_d = Block(rt_, static_cast<uint64_t>(n) * 4);
  auto err = Block(rt_, 8);
  Zero(rt_, err->get(), 8);
  PlaidAssignParams p{};
  p.x = Dev<const void>(xd->get());
  p.dtype = static_cast<int32_t>(docs.dtype);
  p.cent = Dev<const float>(cent_);
  p.best = Dev<unsigned long long>(best->get());
  p.cutoffs = Dev<const float>(cutoffs_);
  p.tables = Dev<const float>(tables_);
  p.cids = Dev<int32_t>(cids_d->get());
  p.codes = Dev<uint8_t>(codes_d->get());
  p.sq_error = Dev<double>(err->get());
  p.n = n;
  p.d = d;
  p.first = first;
  p.bits = bits_;
  Go(rt_, "plaid_encode", Div(blocks * d, 256), 1, 256, 0, p);
  rt_.Download(cids + first, cids_d->get(), static_cast<uint64_t>(n) * 4);
  std::vector<uint8_t> out(static_cast<size_t>(blocks * block_bytes));
  rt_.Download(out.data(), codes_d->get(), out.size());
  uint8_t* dst = codes + b0 * block_bytes;
  // the edge blocks may hold another call's tokens: or them in; the blocks between are ours alone
  for (int64_t i = 0; i < block_bytes; i++) dst[i] |= out[i];
  if (blocks > 1) {
    if (blocks > 2) std::memcpy(dst + block_bytes, out.data() + block_bytes, static_cast<size_t>((blocks - 2) * block_bytes));
    const int64_t last = (blocks - 1) * block_bytes;
    for (int64_t i = 0; i < block_bytes; i++) dst[last + i] |= out[last + i];
  }
  double sq = 0.0;
  rt_.Download(&sq, err->get(), 8);
  last_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return sq;
}

// ---- device index -------------------------------------------------------------------------------

namespace {

std::vector<int64_t> Int64s(const double* v, int64_t n) {
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) out[i] = static_cast<int64_t>(v[i]);
  return out;
}

}  // namespace

PlaidDeviceIndex::PlaidDeviceIndex(Runtime& rt, const PlaidIndexHost& ix,
                                   const std::vector<std::pair<const void*, uint64_t>>& token_chunks, DType tokens_dtype)
    : rt_(rt), k_(ix.k), d_(ix.d), docs_(ix.docs), tokens_n_(ix.tokens), bits_(ix.bits) {
  const int64_t padded = Div(ix.tokens, 16) * 16;
  try {
    auto put = [&](const void* src, uint64_t bytes) {
      bytes_ += bytes;
      return Put(rt, src, bytes);
    };
    cent_ = put(ix.centroids, static_cast<uint64_t>(k_ * d_) * 4);
    double most = 0.0;
    for (int64_t c = 0; c < k_; c++) {
      double sq = 0.0;
      for (int64_t j = 0; j < d_; j++) sq += static_cast<double>(ix.centroids[c * d_ + j]) * ix.centroids[c * d_ + j];
      most = std::max(most, sq);
    }
    // rounded up a little: qc is a product of float16 copies, which may exceed the float32 bound
    cent_norm_ = static_cast<float>(std::sqrt(most) * (1.0 + 1.0 / 512));
    tables_ = put(ix.tables, static_cast<uint64_t>(d_ * 16) * 4);
    cids_ = put(ix.cids, static_cast<uint64_t>(padded) * 4);
    codes_ = put(ix.codes, static_cast<uint64_t>(padded / 16 * d_ * 2 * bits_));
    const auto doc_off = Int64s(ix.doc_off, docs_ + 1);
    const auto bag_off = Int64s(ix.bag_off, docs_ + 1);
    const auto ivf_off = Int64s(ix.ivf_off, k_ + 1);
    doc_off_ = put(doc_off.data(), doc_off.size() * 8);
    bag_off_ = put(bag_off.data(), bag_off.size() * 8);
    ivf_off_ = put(ivf_off.data(), ivf_off.size() * 8);
    bags_ = put(ix.bags, static_cast<uint64_t>(bag_off.back()) * 4);
    ivf_ = put(ix.ivf, static_cast<uint64_t>(ivf_off.back()) * 4);
    if (!token_chunks.empty()) {
      tokens_dtype_ = static_cast<int>(tokens_dtype);
      const uint64_t bytes = static_cast<uint64_t>(ix.tokens * d_) * DTypeSize(tokens_dtype);
      uint64_t sum = 0;
      for (const auto& c : token_chunks) sum += c.second;
      if (sum != bytes) throw std::invalid_argument("Expected " + std::to_string(bytes) + " bytes of tokens but received " + std::to_string(sum));
      tokens_ = rt.allocator().Alloc(std::max<uint64_t>(bytes, 16));
      bytes_ += bytes;
      uint64_t at = 0;
      for (const auto& c : token_chunks) {
        rt.Upload(tokens_ + at, c.first, c.second);
        at += c.second;
      }
      rt.Synchronize();
    }
  } catch (...) {
    for (cu::CUdeviceptr p : {cent_, tables_, cids_, codes_, doc_off_, bag_off_, bags_, ivf_off_, ivf_, tokens_})
      rt.allocator().Free(p);
    throw;
  }
}

PlaidDeviceIndex::~PlaidDeviceIndex() {
  Runtime* rt = &rt_;
  rt->Post([rt, blocks = std::vector<cu::CUdeviceptr>{cent_, tables_, cids_, codes_, doc_off_, bag_off_, bags_,
                                                      ivf_off_, ivf_, tokens_},
            pinned = std::vector<void*>{pinned_[0], pinned_[1]}] {
    for (cu::CUdeviceptr b : blocks) rt->allocator().Free(b);
    for (void* h : pinned)
      if (h) FreePinned(h);
  });
}

void CheckPlaidPlan(const PlaidSearchPlan& p, int64_t k, int64_t d, int64_t max_len) {
  auto fail = [](const std::string& name, const std::string& want, int64_t got) {
    throw std::invalid_argument("Expected " + want + " for plan." + name + " but received " + std::to_string(got));
  };
  if (p.lq < 32 || p.lq > 256 || p.lq % 32 != 0) fail("lq", "a multiple of 32 in [32, 256]", p.lq);
  if (k > PLAID_MAX_SEARCH_CENTROIDS)
    fail("centroids", "at most " + std::to_string(PLAID_MAX_SEARCH_CENTROIDS) + " on the GPU search path", k);
  if (p.lq < max_len) fail("lq", "at least the longest query (" + std::to_string(max_len) + ")", p.lq);
  if (p.nprobe < 1 || p.nprobe > std::min<int64_t>(k, PLAID_MAX_NPROBE))
    fail("nprobe", "an integer in [1, min(K, " + std::to_string(PLAID_MAX_NPROBE) + ")]", p.nprobe);
  if ((p.np != 4 && p.np != 8 && p.np != 16 && p.np != 32) || p.np < p.nprobe)
    fail("np", "4, 8, 16 or 32, at least nprobe", p.np);
  if (p.candidates < 1) fail("candidates", "a positive integer", p.candidates);
  if (p.rescore < 1 || p.rescore > p.candidates) fail("rescore", "an integer in [1, candidates]", p.rescore);
  if (p.batch < 1 || p.batch > 65535) fail("batch", "an integer in [1, 65535]", p.batch);
  if (d < 1 || d > PLAID_MAX_DIM) fail("d", "a dimension in [1, " + std::to_string(PLAID_MAX_DIM) + "]", d);
  if ((d * p.lq + d * 16) * 4 > 200 * 1024) fail("lq", "d * (lq + 16) * 4 <= 200 KiB (shared memory)", p.lq);
  if (p.fp16 && (d % 16 != 0 || d > 128)) fail("precision", "'float32' unless d is a multiple of 16 in [16, 128]", d);
  if (p.fp16 && !p.exact) fail("precision", "'float32' unless the final list is re-scored exactly", 0);
}

PlaidSearchResult PlaidDeviceIndex::Search(const float* queries, const int32_t* lengths, int64_t num_q,
                                           const PlaidSearchPlan& plan) {
  int64_t max_len = 0;
  for (int64_t i = 0; i < num_q; i++) max_len = std::max<int64_t>(max_len, lengths[i]);
  CheckPlaidPlan(plan, k_, d_, max_len);
  const auto t0 = std::chrono::steady_clock::now();
  PlaidSearchResult out;
  out.off.push_back(0);
  for (void*& h : pinned_)
    if (!h) h = NewPinned();
  SearchBatches(queries, lengths, num_q, plan, &out);
  out.ms_total = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace maxsim_cuda
