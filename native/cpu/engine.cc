#include "engine.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <new>

#include "cpu_features.h"
#include "kernels_impl.h"
#include "thread_pool.h"

namespace maxsim_cpu {

namespace {

float ToFloat(const void* data, DocType t, int64_t i) {
  switch (t) {
    case DocType::Float32:
      return static_cast<const float*>(data)[i];
    case DocType::Float16:
      return HalfToFloat(static_cast<const uint16_t*>(data)[i]);
    case DocType::BFloat16:
      return Bf16ToFloat(static_cast<const uint16_t*>(data)[i]);
  }
  return 0.0f;
}

// A 64-byte aligned float buffer owned for the duration of one worker's job.
class AlignedFloats {
 public:
  explicit AlignedFloats(int64_t n)
      : p_(n > 0 ? static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>((n * 4 + 63) / 64 * 64))) : nullptr) {
    if (n > 0 && !p_) throw std::bad_alloc();
  }
  ~AlignedFloats() { std::free(p_); }
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  float* get() const { return p_; }

 private:
  float* p_;
};

}  // namespace

bool CpuHasAvx512Bf16() { return CpuHas(Feature::Avx512f) && CpuHas(Feature::Avx512bf16); }

std::string CpuFeatures() { return CpuFeatureList(); }

std::vector<const IsaKernels*> UsableIsas() {
  // Best first; each set only where cpu_features.cc admits it (every feature it is compiled with).
  std::vector<const IsaKernels*> out;
  for (const IsaKernels* k : {AmxKernels(), Avx512Kernels(), Avx512Bf16Kernels(), Avx2Kernels(), NeonKernels()}) {
    if (k && Admitted("fp", k->name)) out.push_back(k);
  }
  out.push_back(PortableKernels());
  return out;
}

const IsaKernels* SelectIsa(const std::string& requested, std::string* error) {
  const auto usable = UsableIsas();
  if (requested.empty() || requested == "auto") return usable.front();
  for (const IsaKernels* k : usable) {
    if (requested == k->name) return k;
  }
  std::string names;
  for (const IsaKernels* k : usable) names += std::string(names.empty() ? "" : ", ") + k->name;
  *error = "Expected one of auto, " + names + " for isa but received '" + requested + "' (not usable on this CPU)";
  return nullptr;
}

void MaxsimAllPairs(const IsaKernels& isa, const TokenSpans& queries, const TokenSpans& docs, float* scores,
                    int threads, const volatile int32_t* cancel) {
  const int64_t d = docs.dim;
  const int64_t W = isa.lanes;
  const int64_t nq = queries.count;
  const int64_t nd = docs.count;
  if (nq == 0 || nd == 0) return;

  // Pack every query into lane blocks once: packed[block][k][lane], zero past the last token.
  std::vector<int64_t> block_offset(nq);
  std::vector<int32_t> qlen(nq);
  int64_t blocks = 0;
  for (int64_t i = 0; i < nq; i++) {
    block_offset[i] = blocks;
    qlen[i] = queries.lengths[i];
    const int64_t nb = (qlen[i] + W - 1) / W;
    blocks += nb;
  }
  // bf16 x bf16 runs on native bf16 products where the kernel set has them; else everything is fp32.
  const bool bf16_path = isa.bf16_dim_multiple > 0 && queries.dtype == DocType::BFloat16 &&
                         docs.dtype == DocType::BFloat16 && d % isa.bf16_dim_multiple == 0;
  std::vector<float> packed_f32;
  std::vector<uint16_t> packed_bf16;
  if (bf16_path) {
    packed_bf16.assign(static_cast<size_t>(blocks * d * W), 0);
  } else {
    packed_f32.assign(static_cast<size_t>(blocks * d * W), 0.0f);
  }
  for (int64_t i = 0; i < nq; i++) {
    const int64_t start = static_cast<int64_t>(queries.starts[i]);
    for (int64_t t = 0; t < qlen[i]; t++) {
      const int64_t block = block_offset[i] + t / W;
      const int64_t lane = t % W;
      for (int64_t k = 0; k < d; k++) {
        const int64_t src = (start + t) * d + k;
        if (bf16_path) {
          // pair layout: [block][k/2][lane][2]
          packed_bf16[static_cast<size_t>(block * d * W + (k & ~1LL) * W + lane * 2 + (k & 1))] =
              static_cast<const uint16_t*>(queries.data)[src];
        } else {
          packed_f32[static_cast<size_t>((block * d + k) * W + lane)] = ToFloat(queries.data, queries.dtype, src);
        }
      }
    }
  }

  ScoreJob job;
  job.q.f32 = bf16_path ? nullptr : packed_f32.data();
  job.q.bf16 = bf16_path ? packed_bf16.data() : nullptr;
  job.q.block_offset = block_offset.data();
  job.q.length = qlen.data();
  job.q.num_queries = nq;
  job.q.dim = d;
  job.docs.data = docs.data;
  job.docs.dtype = docs.dtype;
  job.docs.starts = docs.starts;
  job.docs.lengths = docs.lengths;
  job.docs.count = nd;
  job.docs.dim = d;
  job.scores = scores;

  const bool needs_doc_convert = !bf16_path && docs.dtype != DocType::Float32;

  ThreadPool& pool = GlobalPool();
  const int workers = static_cast<int>(std::min<int64_t>(threads > 0 ? threads : pool.size(), nd));
  const int64_t chunk = DocumentChunk(nd, workers);
  std::atomic<int64_t> next{0};
  pool.Run(workers, [&](int) {
    // 64-byte aligned so converted rows start on cache lines like the caller's buffers usually do.
    AlignedFloats doc_buf(needs_doc_convert ? ScratchChunkFloats(d) : 0);
    AlignedFloats runmax(blocks * W + W);
    Scratch scratch;
    scratch.doc_f32 = doc_buf.get();
    scratch.runmax = runmax.get();
    for (;;) {
      if (cancel && *cancel) break;
      const int64_t begin = next.fetch_add(chunk);
      if (begin >= nd) break;
      isa.score_range(job, begin, std::min(nd, begin + chunk), scratch);
    }
  });
}

}  // namespace maxsim_cpu
