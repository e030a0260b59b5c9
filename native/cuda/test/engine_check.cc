// A standalone check of the CUDA engine (native/cuda/engine.h) without Node, on the GPU: fresh random
// ragged inputs (empty queries and documents among them) through score, topK and twoStage, against
// a float64 reference and against each other, for float32, float16 and bfloat16 (the SIMT kernels,
// whose launch is the dispatcher's perPair one: grid [docs, queries], block 128), with host and
// device queries, float32 host queries cast on the GPU, a select() view and a download round trip.
// Build and run on a GPU host, from the repository root (the fatbins come from build/kernels):
//   node scripts/build-native.mjs cuda-check && build/check/engine_check [seed]
// Exit status 0 when every check passes; 1 on a wrong result; 2 when no usable GPU or kernels.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <future>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../common/half_bits.h"
#include "../engine.h"
#include "../query_convert.h"
#include "../allocator.h"

using maxsim_cuda::DeviceTokens;
using maxsim_cuda::Heaps;
using maxsim_cuda::LaunchSpec;
using maxsim_cuda::QuerySource;
using maxsim_cuda::Runtime;

namespace {

int failures = 0;
int checks = 0;

void Fail(const std::string& what) {
  if (failures < 20) std::fprintf(stderr, "FAIL %s\n", what.c_str());
  failures++;
}

// Runs f on the runtime's worker thread (where every job runs) and waits for its result.
template <typename F>
auto OnWorker(Runtime* rt, F f) -> decltype(f()) {
  using R = decltype(f());
  std::promise<R> done;
  rt->Post([&] {
    try {
      done.set_value(f());
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  });
  return done.get_future().get();
}

uint16_t ToBf16(float x) {  // round to nearest even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

uint16_t ToF16(float x) {  // |x| <= 1 here; results below 2^-14 flush to signed zero
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t sign = (u >> 16) & 0x8000;
  const int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  if (exp <= 0) return static_cast<uint16_t>(sign);
  uint32_t man = u & 0x7fffff;
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (man >> 13);
  const uint32_t rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
  return static_cast<uint16_t>(sign | h);
}

double FromBits(uint16_t h, DType t) { return t == DType::BFloat16 ? Bf16BitsValue(h) : F16BitsValue(h); }

// A host batch of random tokens in [-1, 1]: the encoded elements and the exact values they hold.
struct Batch {
  DType dtype = DType::Float32;
  int64_t dim = 0;
  std::vector<float> f32;
  std::vector<uint16_t> bits;
  std::vector<double> value;  // [tokens * dim], what the elements hold
  std::vector<double> starts;
  std::vector<int32_t> lengths;

  TokenSet View() const {
    TokenSet t;
    t.dtype = dtype;
    t.dim = dim;
    t.count = static_cast<int64_t>(lengths.size());
    t.data = dtype == DType::Float32 ? static_cast<const void*>(f32.data()) : static_cast<const void*>(bits.data());
    t.elements = static_cast<int64_t>(value.size());
    t.starts = starts.data();
    t.lengths = lengths.data();
    for (int32_t l : lengths) t.max_length = std::max<int64_t>(t.max_length, l);
    return t;
  }
  // The same values as float32 elements (exact: every half is a float).
  Batch AsFloat32() const {
    Batch b = *this;
    b.dtype = DType::Float32;
    b.bits.clear();
    b.f32.assign(value.begin(), value.end());
    return b;
  }
};

// `count` items of random lengths in [min_len, max_len], with a gap of unused tokens between some
// items (so starts are not simply packed).
Batch RandomBatch(std::mt19937_64& rng, DType dtype, int64_t dim, int64_t count, int min_len, int max_len) {
  Batch b;
  b.dtype = dtype;
  b.dim = dim;
  std::uniform_int_distribution<int> len(min_len, max_len), gap(0, 2);
  std::uniform_real_distribution<float> val(-1.f, 1.f);
  int64_t at = 0;
  for (int64_t i = 0; i < count; i++) {
    at += gap(rng) == 0 ? 1 : 0;
    b.starts.push_back(static_cast<double>(at));
    b.lengths.push_back(len(rng));
    at += b.lengths.back();
  }
  const int64_t n = at * dim;
  for (int64_t e = 0; e < n; e++) {
    const float x = val(rng);
    if (dtype == DType::Float32) {
      b.f32.push_back(x);
      b.value.push_back(x);
    } else {
      const uint16_t h = dtype == DType::BFloat16 ? ToBf16(x) : ToF16(x);
      b.bits.push_back(h);
      b.value.push_back(FromBits(h, dtype));
    }
  }
  return b;
}

// The float64 scores [nq, nd] and a bound on the float32 kernel's error for each: every dot product
// of dim terms errs by at most dim * u * sum|q_k d_k| (so does the max over document tokens), and the
// sum over query tokens by lq * u * sum|max_i|.
struct Reference {
  std::vector<double> score, bound;
};
Reference ReferenceScores(const Batch& q, const Batch& d) {
  const int64_t nq = static_cast<int64_t>(q.lengths.size()), nd = static_cast<int64_t>(d.lengths.size()), dim = q.dim;
  const double u = std::ldexp(1.0, -24);
  Reference r;
  r.score.resize(static_cast<size_t>(nq * nd));
  r.bound.resize(r.score.size());
  for (int64_t i = 0; i < nq; i++) {
    for (int64_t j = 0; j < nd; j++) {
      const int lq = q.lengths[i], ld = d.lengths[j];
      double total = 0, err = 0, magnitude = 0;
      if (ld == 0) total = -INFINITY;  // a document without tokens scores -Infinity (src/backends/reference.ts)
      for (int s = 0; s < lq && ld > 0; s++) {
        const double* qv = q.value.data() + (static_cast<int64_t>(q.starts[i]) + s) * dim;
        double best = -INFINITY, best_abs = 0;
        for (int t = 0; t < ld; t++) {
          const double* dv = d.value.data() + (static_cast<int64_t>(d.starts[j]) + t) * dim;
          double dot = 0, abs = 0;
          for (int64_t k = 0; k < dim; k++) {
            dot += qv[k] * dv[k];
            abs += std::fabs(qv[k] * dv[k]);
          }
          best = std::max(best, dot);
          best_abs = std::max(best_abs, abs);
        }
        total += best;
        magnitude += std::fabs(best);
        err += dim * u * best_abs * 1.01;
      }
      r.score[i * nd + j] = total;
      r.bound[i * nd + j] = err + lq * u * magnitude * 1.01 + 1e-6;
    }
  }
  return r;
}

const char* Suffix(DType t) { return t == DType::Float32 ? "f32" : t == DType::Float16 ? "f16" : "bf16"; }

// The dispatcher's launch of the SIMT variant (src/backends/cuda-dispatch.ts, launchFor, perPair).
LaunchSpec SimtLaunch(DType t, int64_t nq, int64_t nd) {
  LaunchSpec s;
  s.kernel = std::string("maxsim_simt_") + Suffix(t);
  s.grid[0] = static_cast<unsigned>(std::max<int64_t>(1, nd));
  s.grid[1] = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(nq, 65535)));
  s.block[0] = 128;
  if (nq > 65535) s.query_tile = 65535;
  return s;
}

// Each row's heap as (score, index) pairs ranked: score descending, ties to the lower index.
std::vector<std::pair<float, int32_t>> Ranked(const Heaps& h, int64_t row) {
  std::vector<std::pair<float, int32_t>> v;
  for (int64_t j = 0; j < h.n; j++) v.emplace_back(h.scores[row * h.n + j], h.indices[row * h.n + j]);
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  return v;
}

void CheckScores(const std::string& what, const std::vector<float>& got, const Reference& ref) {
  checks++;
  if (got.size() != ref.score.size()) return Fail(what + ": " + std::to_string(got.size()) + " scores, expected " + std::to_string(ref.score.size()));
  for (size_t e = 0; e < got.size(); e++) {
    const double want = ref.score[e];
    const bool ok = std::isinf(want) ? (std::isinf(got[e]) && got[e] < 0) : std::fabs(got[e] - want) <= ref.bound[e];
    if (!ok) return Fail(what + ": score " + std::to_string(e) + " = " + std::to_string(got[e]) + ", reference " + std::to_string(want) + " +- " + std::to_string(ref.bound[e]));
  }
}

// A top-K result against the selection of the same job's score matrix by the host heaps (the order
// every path must give: the device selection, the host heaps and the two stages), and its scores
// against the reference.
void CheckTopK(const std::string& what, const Heaps& got, const std::vector<float>& matrix, int64_t rows, int64_t cols, int64_t k,
               const Reference& ref) {
  checks++;
  const Heaps want = maxsim_cuda::HostTopK(matrix.data(), rows, cols, k);
  if (got.n != want.n) return Fail(what + ": n " + std::to_string(got.n) + ", expected " + std::to_string(want.n));
  for (int64_t r = 0; r < rows; r++) {
    const auto a = Ranked(got, r), b = Ranked(want, r);
    for (size_t j = 0; j < a.size(); j++) {
      if (a[j].second != b[j].second || std::memcmp(&a[j].first, &b[j].first, 4) != 0) {
        return Fail(what + ": row " + std::to_string(r) + " rank " + std::to_string(j) + " got (" + std::to_string(a[j].first) + ", " +
                    std::to_string(a[j].second) + "), the score matrix's selection (" + std::to_string(b[j].first) + ", " +
                    std::to_string(b[j].second) + ")");
      }
      const size_t e = static_cast<size_t>(r * cols + a[j].second);
      if (!std::isinf(ref.score[e]) && std::fabs(a[j].first - ref.score[e]) > ref.bound[e]) {
        return Fail(what + ": row " + std::to_string(r) + " hit " + std::to_string(a[j].second) + " scores " + std::to_string(a[j].first) +
                    ", reference " + std::to_string(ref.score[e]));
      }
    }
    // nothing left out scores clearly above the last kept (by the reference)
    if (!a.empty()) {
      const size_t last = static_cast<size_t>(r * cols + a.back().second);
      for (int64_t c = 0; c < cols; c++) {
        const size_t e = static_cast<size_t>(r * cols + c);
        const bool kept = std::any_of(a.begin(), a.end(), [&](const auto& p) { return p.second == c; });
        if (!kept && ref.score[e] > ref.score[last] + ref.bound[e] + ref.bound[last]) {
          return Fail(what + ": row " + std::to_string(r) + " left out document " + std::to_string(c) + " (reference " +
                      std::to_string(ref.score[e]) + ") above its last hit (" + std::to_string(ref.score[last]) + ")");
        }
      }
    }
  }
}

void Round(Runtime* rt, std::mt19937_64& rng, DType dtype, int64_t dim, int64_t nq, int64_t nd, int max_q, int max_d) {
  const std::string shape = std::string(Suffix(dtype)) + " dim " + std::to_string(dim) + ", " + std::to_string(nq) + " x " + std::to_string(nd);
  const Batch q = RandomBatch(rng, dtype, dim, nq, 0, max_q);
  const Batch d = RandomBatch(rng, dtype, dim, nd, 0, max_d);
  const Reference ref = ReferenceScores(q, d);
  const LaunchSpec launch = SimtLaunch(dtype, nq, nd);
  std::shared_ptr<DeviceTokens> docs = OnWorker(rt, [&] { return maxsim_cuda::UploadSet(*rt, d.View()); });

  // score: host queries (uploaded by the job) and device queries
  QuerySource hq = maxsim_cuda::HostQueries(q.View());
  const std::vector<float> scores = OnWorker(rt, [&] { return maxsim_cuda::Score(*rt, hq, *docs, launch); });
  CheckScores("score " + shape + " (host queries)", scores, ref);
  {
    // small matrices are written into pinned host memory by default (UseMappedScores): the device path's bits
    maxsim_cuda::JobOptions o;
    o.mapped_scores = false;
    QuerySource hd = maxsim_cuda::HostQueries(q.View());
    const std::vector<float> kept = OnWorker(rt, [&] { return maxsim_cuda::Score(*rt, hd, *docs, launch, o); });
    checks++;
    if (kept.size() != scores.size() || std::memcmp(kept.data(), scores.data(), scores.size() * sizeof(float)) != 0) {
      Fail("score " + shape + ": scores kept on the device differ from those written to host memory");
    }
  }
  std::shared_ptr<DeviceTokens> dq = OnWorker(rt, [&] { return maxsim_cuda::UploadSet(*rt, q.View()); });
  QuerySource dqs = maxsim_cuda::DeviceQueries(dq);
  CheckScores("score " + shape + " (device queries)", OnWorker(rt, [&] { return maxsim_cuda::Score(*rt, dqs, *docs, launch); }), ref);
  if (dtype != DType::Float32) {
    // float32 host queries holding the same values, cast on the GPU (CastSet): the same scores
    const Batch keep = q.AsFloat32();  // the host batch must outlive the job
    QuerySource fq = maxsim_cuda::HostQueries(keep.View());
    maxsim_cuda::ConvertHostQueriesFor(fq, dtype, false);
    const std::vector<float> cast = OnWorker(rt, [&] { return maxsim_cuda::Score(*rt, fq, *docs, launch); });
    checks++;
    if (cast != scores) Fail("score " + shape + ": float32 queries cast on the GPU differ from " + Suffix(dtype) + " queries");
  }

  // topK: k within the device selection's range, past it (host heaps), and past the column count; each
  // selection on the host and, where its limits take the shape, on the device (TypeScript's plan chooses
  // in the product; a 'device' choice past the limits is refused)
  using maxsim_cuda::SelectWhere;
  const auto wheres = [](int64_t rows, int64_t cols, int64_t keep) {
    std::vector<SelectWhere> w{SelectWhere::kHost};
    if (maxsim_cuda::DeviceSelectLimitBreach(rows, cols, keep).empty()) w.push_back(SelectWhere::kDevice);
    return w;
  };
  const auto name = [](SelectWhere w) { return std::string(w == SelectWhere::kDevice ? ", device" : ", host"); };
  for (int64_t k : {int64_t(1), int64_t(7), std::min<int64_t>(nd, 100), int64_t(300), nd + 3}) {
    for (SelectWhere w : wheres(nq, nd, std::min(k, nd))) {
      QuerySource src = maxsim_cuda::DeviceQueries(dq);
      const Heaps h = OnWorker(rt, [&] { return maxsim_cuda::TopK(*rt, src, *docs, launch, k, w); });
      CheckTopK("topK " + shape + ", k " + std::to_string(k) + name(w), h, scores, nq, nd, k, ref);
      // host queries, with small score matrices in pinned host memory (the default) and on the device
      for (const bool mapped : {true, false}) {
        maxsim_cuda::JobOptions o;
        o.mapped_scores = mapped;
        QuerySource hs = maxsim_cuda::HostQueries(q.View());
        const Heaps hh = OnWorker(rt, [&] { return maxsim_cuda::TopK(*rt, hs, *docs, launch, k, w, o); });
        CheckTopK("topK " + shape + ", k " + std::to_string(k) + name(w) + ", host queries" + (mapped ? "" : ", device scores"), hh,
                  scores, nq, nd, k, ref);
      }
    }
    if (!maxsim_cuda::DeviceSelectLimitBreach(nq, nd, std::min(k, nd)).empty()) {
      QuerySource src = maxsim_cuda::DeviceQueries(dq);
      bool refused = false;
      try {
        OnWorker(rt, [&] { return maxsim_cuda::TopK(*rt, src, *docs, launch, k, SelectWhere::kDevice); });
      } catch (const std::invalid_argument& e) {
        refused = std::string(e.what()).find("select") != std::string::npos;
      }
      checks++;
      if (!refused) Fail("topK " + shape + ", k " + std::to_string(k) + ": a device selection past its limits was not refused");
    }
    // two stages over the same set: the candidates rescored by the same kernel give the same hits
    for (int64_t candidates : {k, k + 5}) {
      maxsim_cuda::TwoStageJob job;
      job.scan_queries = maxsim_cuda::DeviceQueries(dq);
      job.exact_queries = maxsim_cuda::DeviceQueries(dq);
      job.scan_docs = job.exact_docs = docs;
      job.scan_launch = launch;
      job.exact_launch = SimtLaunch(dtype, nq, std::min(nd, nq * std::min(candidates, nd)));
      job.k = k;
      job.candidates = candidates;
      job.count = nd;
      for (SelectWhere w : wheres(nq, nd, std::min(candidates, nd))) {
        job.select = w;
        const Heaps t = OnWorker(rt, [&] { return maxsim_cuda::TwoStage(*rt, job); });
        CheckTopK("twoStage " + shape + ", k " + std::to_string(k) + ", candidates " + std::to_string(candidates) + name(w), t, scores,
                  nq, nd, std::min(k, candidates), ref);
      }
    }
  }
  // the matrix selection on its own (deviceTopK): the device path and the host path agree
  {
    const int64_t k = std::min<int64_t>(nd, 16);
    for (SelectWhere w : wheres(nq, nd, k)) {
      const Heaps h = OnWorker(rt, [&] { return maxsim_cuda::SelectMatrix(*rt, scores, nq, nd, k, w); });
      CheckTopK("selectMatrix " + shape + name(w), h, scores, nq, nd, k, ref);
    }
  }

  // select: a view of every other document in reverse scores as those columns
  if (nd > 1) {
    std::vector<int64_t> pick;
    for (int64_t j = nd - 1; j >= 0; j -= 2) pick.push_back(j);
    std::shared_ptr<DeviceTokens> view = OnWorker(rt, [&] {
      auto v = maxsim_cuda::Select(*rt, docs, pick);
      rt->Synchronize();
      return v;
    });
    QuerySource src = maxsim_cuda::DeviceQueries(dq);
    const int64_t nv = static_cast<int64_t>(pick.size());
    const std::vector<float> vs = OnWorker(rt, [&] { return maxsim_cuda::Score(*rt, src, *view, SimtLaunch(dtype, nq, nv)); });
    checks++;
    for (int64_t i = 0; i < nq && vs.size() == static_cast<size_t>(nq * nv); i++) {
      for (int64_t j = 0; j < nv; j++) {
        const float a = vs[i * nv + j], b = scores[i * nd + pick[j]];
        if (std::memcmp(&a, &b, 4) != 0) {
          Fail("select " + shape + ": view column " + std::to_string(j) + " differs from document " + std::to_string(pick[j]));
          i = nq;
          break;
        }
      }
    }
  }

  // download: the packed tokens and spans come back as uploaded
  const maxsim_cuda::HostCopy back = OnWorker(rt, [&] { return maxsim_cuda::DownloadSet(*rt, *docs); });
  checks++;
  const size_t es = static_cast<size_t>(DTypeSize(dtype));
  const auto* raw = static_cast<const uint8_t*>(d.View().data);
  for (int64_t j = 0, at = 0; j < nd; j++) {
    const size_t bytes = static_cast<size_t>(d.lengths[j] * dim) * es;
    if (back.starts[j] != at || back.lengths[j] != d.lengths[j] ||
        std::memcmp(back.data.data() + static_cast<size_t>(at * dim) * es, raw + static_cast<size_t>(d.starts[j] * dim) * es, bytes) != 0) {
      Fail("download " + shape + ": item " + std::to_string(j) + " differs");
      break;
    }
    at += d.lengths[j];
  }
}

// The host conversion of small float32 query batches (query_convert.h) against the cast kernel it
// replaces: the same bits for every finite value, normal, subnormal and overflowing, at the halfway
// points of both formats, and for random values of every magnitude.
void CheckConvert(Runtime* rt, std::mt19937_64& rng) {
  std::vector<float> v;
  auto bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  for (uint32_t h = 0; h < 0x7C00u; h++) {  // every finite float16 and the midpoints next to it
    const double x = F16BitsValue(static_cast<uint16_t>(h)), y = F16BitsValue(static_cast<uint16_t>(h + 1));
    for (const double z : {x, (x + y) / 2}) {
      v.push_back(static_cast<float>(z));
      v.push_back(-static_cast<float>(z));
      v.push_back(std::nextafter(static_cast<float>(z), 0.f));
      v.push_back(std::nextafter(static_cast<float>(z), 1e30f));
    }
  }
  for (uint32_t e = 0; e < 255; e++)  // bfloat16 midpoints at every exponent, and their neighbours
    for (const uint32_t m : {0x8000u, 0x18000u, 0x7F8000u, 0x7FFFu, 0x8001u}) v.push_back(bits((e << 23) | m));
  std::uniform_int_distribution<uint32_t> any(0, 0xFFFFFFFFu);
  while (v.size() < (1u << 20)) {
    const uint32_t u = any(rng);
    if ((u & 0x7F800000u) != 0x7F800000u) v.push_back(bits(u));
  }
  const uint64_t n = v.size();
  for (DType to : {DType::Float16, DType::BFloat16}) {
    checks++;
    std::vector<uint16_t> host(n), device(n);
    maxsim_cuda::ConvertF32(v.data(), host.data(), n, to);
    OnWorker(rt, [&] {
      maxsim_cuda::ScopedBlock src(rt->allocator(), n * 4), dst(rt->allocator(), n * 2);
      rt->Upload(src.get(), v.data(), n * 4);
      rt->CastFromF32(src.get(), dst.get(), to, n);
      rt->Download(device.data(), dst.get(), n * 2);
      return 0;
    });
    for (uint64_t i = 0; i < n; i++) {
      if (host[i] != device[i]) {
        char msg[160];
        std::snprintf(msg, sizeof msg, "host conversion to %s of %a: 0x%04x, cast kernel 0x%04x", Suffix(to), v[i], host[i], device[i]);
        Fail(msg);
        break;
      }
    }
  }
}

// The worker's int8 quantize of small float32 query batches (query_convert.h, QuantizeTokenInt8)
// against the device quantizer it replaces (Quantize8, per token): the same codes and scales for
// random tokens of every magnitude, exact halfway quotients (ties to even), a token of zeros and
// one-value tokens, at awkward dims.
void CheckQuantizeInt8(Runtime* rt, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-40, 40);
  for (const int64_t dim : {1, 7, 37, 128, 300}) {
    const int64_t tokens = 1500;
    std::vector<float> v(static_cast<size_t>(tokens * dim));
    for (int64_t t = 0; t < tokens; t++) {
      float* x = v.data() + t * dim;
      const double mag = std::ldexp(1.0, exponent(rng));
      for (int64_t k = 0; k < dim; k++) x[k] = static_cast<float>(unit(rng) * mag);
      if (t == 0) std::fill(x, x + dim, 0.f);  // zeros: scale 0
      if (t == 1) {                            // max 127 -> scale 1: halfway quotients round to even
        const float ties[] = {127.f, 2.5f, -3.5f, 0.5f, -0.5f, 1.5f, 126.5f, -126.5f};
        for (int64_t k = 0; k < dim; k++) x[k] = ties[k % 8];
      }
      if (t == 2) {  // one non-zero value
        std::fill(x, x + dim, 0.f);
        x[dim - 1] = -3e-39f;  // subnormal
      }
    }
    std::vector<int8_t> host(v.size());
    std::vector<float> host_scales(static_cast<size_t>(tokens));
    for (int64_t t = 0; t < tokens; t++) {
      host_scales[t] = maxsim_cuda::QuantizeTokenInt8(v.data() + t * dim, host.data() + t * dim, static_cast<uint64_t>(dim));
    }
    {  // the SIMD path against the one-value-at-a-time loop
      std::vector<int8_t> scalar(static_cast<size_t>(dim));
      checks++;
      for (int64_t t = 0; t < tokens; t++) {
        const float s = maxsim_cuda::QuantizeTokenInt8Scalar(v.data() + t * dim, scalar.data(), static_cast<uint64_t>(dim));
        if (std::memcmp(&s, &host_scales[t], 4) != 0 ||
            std::memcmp(scalar.data(), host.data() + t * dim, static_cast<size_t>(dim)) != 0) {
          Fail("int8 quantize dim " + std::to_string(dim) + " token " + std::to_string(t) + ": SIMD and scalar differ");
          break;
        }
      }
    }
    const double starts[] = {0, 700};
    const int32_t lengths[] = {700, static_cast<int32_t>(tokens - 700)};
    TokenSet set;
    set.data = v.data();
    set.elements = static_cast<int64_t>(v.size());
    set.dtype = DType::Float32;
    set.dim = dim;
    set.count = 2;
    set.starts = starts;
    set.lengths = lengths;
    set.max_length = 800;
    const maxsim_cuda::HostCopy device = OnWorker(rt, [&] {
      std::shared_ptr<DeviceTokens> f = maxsim_cuda::UploadSet(*rt, set);
      std::shared_ptr<DeviceTokens> q = maxsim_cuda::Quantize8(*rt, *f, /*e4m3=*/false);
      return maxsim_cuda::DownloadSet(*rt, *q);
    });
    checks++;
    if (device.data.size() != host.size() || device.scales.size() != host_scales.size()) {
      Fail("int8 quantize dim " + std::to_string(dim) + ": the device set has another size");
      continue;
    }
    for (int64_t t = 0; t < tokens; t++) {
      if (std::memcmp(&device.scales[t], &host_scales[t], 4) != 0 ||
          std::memcmp(device.data.data() + t * dim, host.data() + t * dim, static_cast<size_t>(dim)) != 0) {
        char msg[200];
        std::snprintf(msg, sizeof msg, "int8 quantize dim %lld token %lld: host scale %a, device %a (or codes differ)",
                      static_cast<long long>(dim), static_cast<long long>(t), host_scales[t], device.scales[t]);
        Fail(msg);
        break;
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t seed = argc > 1 ? std::stoull(argv[1]) : std::random_device{}();
  std::printf("engine_check: seed %llu\n", static_cast<unsigned long long>(seed));
  Runtime* rt = nullptr;
  try {
    rt = Runtime::Get(0);
    OnWorker(rt, [&] {
      rt->EnsureReady();
      for (DType t : {DType::Float32, DType::Float16, DType::BFloat16}) {
        const std::string k = std::string("maxsim_simt_") + Suffix(t);
        if (!rt->HasKernel(k)) throw maxsim_cuda::CudaError("kernel " + k + " is not in the loaded modules", "CUDA_ERROR_NOT_FOUND");
      }
      return 0;
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_check: no usable GPU or kernels: %s\n", e.what());
    return 2;
  }
  std::printf("engine_check: device 0, %s (sm_%d%d)\n", rt->props().name.c_str(), rt->props().cc_major, rt->props().cc_minor);
  std::mt19937_64 rng(seed);
  try {
    CheckConvert(rt, rng);
    CheckQuantizeInt8(rt, rng);
    for (DType t : {DType::Float32, DType::Float16, DType::BFloat16}) {
      Round(rt, rng, t, 128, 3, 40, 33, 70);     // typical
      Round(rt, rng, t, 1, 1, 1, 1, 1);          // tiny
      Round(rt, rng, t, 128, 2, 900, 30, 40);    // two short queries: scores in pinned host memory
      Round(rt, rng, t, 37, 5, 300, 9, 20);      // awkward dim, more documents than the device selection's keep
      Round(rt, rng, t, 96, 2, 700, 4, 3);       // many short documents, some empty
    }
  } catch (const std::exception& e) {
    Fail(std::string("exception: ") + e.what());
  }
  std::printf("engine_check: %d checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
