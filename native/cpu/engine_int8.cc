// The int8 CPU engine: picks the kernel set (cpu_features.cc admits them), packs the queries the way it reads them, splits
// documents over the pool.
#include "engine_int8.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "cpu_features.h"
#include "engine.h"
#include "thread_pool.h"

namespace maxsim_cpu {

namespace {

// Every query packed as the kernel set reads it (engine_int8.h, Int8Pack), as raw bytes.
std::vector<int16_t> PackQueries(const Int8Spans& q, const Int8KernelSet& set, const std::vector<int64_t>& offset,
                                 int64_t blocks) {
  const int64_t W = set.lanes;
  const int64_t G = set.group;
  const int64_t d = q.dim;
  const int64_t dp = (d + G - 1) / G * G;
  const int64_t elems = blocks * dp * W;
  const bool wide = set.pack == Int8Pack::Int16;
  std::vector<int16_t> buf(static_cast<size_t>(wide ? elems : (elems + 1) / 2), 0);
  int16_t* p16 = buf.data();
  uint8_t* p8 = reinterpret_cast<uint8_t*>(buf.data());
  for (int64_t i = 0; i < q.count; i++) {
    const int64_t start = static_cast<int64_t>(q.starts[i]);
    for (int64_t t = 0; t < q.lengths[i]; t++) {
      const int64_t base = (offset[i] + t / W) * dp * W + (t % W) * G;
      const int8_t* src = q.data + (start + t) * d;
      for (int64_t k = 0; k < d; k++) {
        const int64_t at = base + (k / G) * W * G + k % G;
        if (wide) p16[at] = src[k];
        else if (set.pack == Int8Pack::Uint8Biased) p8[at] = static_cast<uint8_t>(src[k] + 128);
        else p8[at] = static_cast<uint8_t>(src[k]);
      }
    }
  }
  return buf;
}

}  // namespace

std::vector<const Int8KernelSet*> UsableInt8Sets() {
  // Fastest first, as measured on Sapphire Rapids at 1,32,128,128,20000 (bench/NOTES.md): AMX tiles
  // (d % 64 == 0), then 512-bit VNNI, 256-bit VNNI, AVX2 VPMADDWD, portable.
  std::vector<const Int8KernelSet*> out;
  for (const Int8KernelSet* s : {AmxInt8Kernels(), Avx512VnniInt8Kernels(), AvxVnniInt8Kernels(), Avx2Int8Kernels()}) {
    if (s && Admitted("int8", s->name)) out.push_back(s);
  }
  out.push_back(PortableInt8Kernels());
  return out;
}

std::vector<std::string> UsableInt8Isas() {
  std::vector<std::string> out;
  for (const Int8KernelSet* s : UsableInt8Sets()) out.push_back(s->name);
  return out;
}

const Int8KernelSet* ResolveInt8Kernel(const std::string& requested, int64_t dim, std::string* error) {
  const auto usable = UsableInt8Sets();
  if (requested.empty() || requested == "auto") {
    for (const Int8KernelSet* s : usable) {
      if (dim % s->dim_multiple == 0) return s;
    }
    return PortableInt8Kernels();
  }
  for (const Int8KernelSet* s : usable) {
    if (requested != s->name) continue;
    if (dim % s->dim_multiple == 0) return s;
    *error = "Expected a dimension divisible by " + std::to_string(s->dim_multiple) + " for isa '" + requested +
             "' with int8 inputs but received " + std::to_string(dim);
    return nullptr;
  }
  std::string names;
  for (const Int8KernelSet* s : usable) names += std::string(names.empty() ? "" : ", ") + s->name;
  *error = "Expected one of auto, " + names + " (the int8 kernel sets usable on this CPU) for isa but received '" +
           requested + "'";
  return nullptr;
}

void MaxsimAllPairsInt8(const Int8Spans& queries, const Int8Spans& docs, float* scores, int threads,
                        const Int8KernelSet* set, const volatile int32_t* cancel) {
  const int64_t nq = queries.count;
  const int64_t nd = docs.count;
  const int64_t d = docs.dim;
  if (nq == 0 || nd == 0) return;
  if (set == nullptr || d % set->dim_multiple != 0) {
    std::string error;
    set = ResolveInt8Kernel("", d, &error);
  }
  const int64_t W = set->lanes;
  const int64_t dp = (d + set->group - 1) / set->group * set->group;

  std::vector<int64_t> block_offset(static_cast<size_t>(nq));
  int64_t blocks = 0;
  for (int64_t i = 0; i < nq; i++) {
    block_offset[i] = blocks;
    blocks += (queries.lengths[i] + W - 1) / W;
  }
  std::vector<int16_t> qpack;
  if (set->pack != Int8Pack::None) qpack = PackQueries(queries, *set, block_offset, blocks);

  Int8Job job;
  job.q = queries;
  job.docs = docs;
  job.qpack = qpack.empty() ? nullptr : qpack.data();
  job.block_offset = block_offset.data();
  job.scores = scores;

  int32_t max_lq = 0;
  for (int64_t i = 0; i < nq; i++) max_lq = std::max(max_lq, queries.lengths[i]);
  // every query's lane blocks (the SIMD kernels keep them all), or one query's (portable, AMX)
  const size_t runmax_floats = static_cast<size_t>(std::max<int64_t>(blocks * W, (max_lq + 15) / 16 * 16) + 16);
  const size_t chunk_elems = static_cast<size_t>(Int8ChunkCapacity(dp) * dp);
  const size_t sums = static_cast<size_t>(Int8ChunkCapacity(dp));

  ThreadPool& pool = GlobalPool();
  const int workers = static_cast<int>(std::min<int64_t>(threads > 0 ? threads : pool.size(), nd));
  const int64_t chunk = DocumentChunk(nd, workers);
  std::atomic<int64_t> next{0};
  const Int8RangeFn range = set->range;
  const bool prepares = set->pack == Int8Pack::Uint8Biased || set->pack == Int8Pack::Int16;
  pool.Run(workers, [&](int) {
    std::vector<float> runmax(runmax_floats);
    std::vector<int16_t> chunk_buf(prepares ? chunk_elems : 0);
    std::vector<int32_t> sums_buf(prepares ? sums : 0);
    Int8Scratch scratch;
    scratch.runmax = runmax.data();
    scratch.chunk = chunk_buf.data();
    scratch.sums = sums_buf.data();
    for (;;) {
      if (cancel && *cancel) break;
      const int64_t begin = next.fetch_add(chunk);
      if (begin >= nd) break;
      range(job, begin, std::min(nd, begin + chunk), scratch);
    }
  });
}

}  // namespace maxsim_cpu
