// The int8 CPU engine: picks the kernel, packs queries for AMX, splits documents over the pool.
#include "engine_int8.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "thread_pool.h"

namespace maxsim_cpu {

std::vector<std::string> UsableInt8Isas() {
  std::vector<std::string> out;
  if (AmxInt8Range()) out.push_back("amx");
  out.push_back("portable");
  return out;
}

Int8Kernel ResolveInt8Kernel(Int8Kernel requested, int64_t dim, std::string* error) {
  const bool amx = AmxInt8Range() != nullptr && dim % 64 == 0;
  switch (requested) {
    case Int8Kernel::Portable:
      return Int8Kernel::Portable;
    case Int8Kernel::Amx:
      if (amx) return Int8Kernel::Amx;
      *error = AmxInt8Range() == nullptr
                   ? "Expected a CPU with AMX-INT8 (and OS permission for tile state) for isa 'amx' with int8 inputs but "
                     "received a CPU without it"
                   : "Expected a dimension divisible by 64 for isa 'amx' with int8 inputs but received " +
                         std::to_string(dim);
      return Int8Kernel::Auto;
    case Int8Kernel::Auto:
      break;
  }
  return amx ? Int8Kernel::Amx : Int8Kernel::Portable;
}

void MaxsimAllPairsInt8(const Int8Spans& queries, const Int8Spans& docs, float* scores, int threads,
                        Int8Kernel kernel) {
  const int64_t nq = queries.count;
  const int64_t nd = docs.count;
  const int64_t d = docs.dim;
  if (nq == 0 || nd == 0) return;
  std::string error;
  Int8Kernel k = ResolveInt8Kernel(kernel, d, &error);
  if (k == Int8Kernel::Auto) k = Int8Kernel::Portable;  // the binding validated requests already
  Int8RangeFn range = k == Int8Kernel::Amx ? AmxInt8Range() : &PortableInt8Range;

  int32_t max_lq = 0;
  for (int64_t i = 0; i < nq; i++) max_lq = std::max(max_lq, queries.lengths[i]);

  Int8Job job;
  job.q = queries;
  job.docs = docs;
  job.scores = scores;
  std::vector<int64_t> block_offset;
  std::vector<int8_t> qpack;
  if (k == Int8Kernel::Amx) {
    // packed[block][k/4][lane][4]: byte (k/4) * 64 + lane * 4 + k % 4 of the block, zero-filled.
    block_offset.resize(static_cast<size_t>(nq));
    int64_t blocks = 0;
    for (int64_t i = 0; i < nq; i++) {
      block_offset[i] = blocks;
      blocks += (queries.lengths[i] + 15) / 16;
    }
    qpack.assign(static_cast<size_t>(blocks * d * 16), 0);
    for (int64_t i = 0; i < nq; i++) {
      const int64_t start = static_cast<int64_t>(queries.starts[i]);
      for (int64_t t = 0; t < queries.lengths[i]; t++) {
        int8_t* blk = qpack.data() + (block_offset[i] + t / 16) * d * 16;
        const int64_t lane = t % 16;
        const int8_t* src = queries.data + (start + t) * d;
        for (int64_t kk = 0; kk < d; kk++) blk[(kk / 4) * 64 + lane * 4 + kk % 4] = src[kk];
      }
    }
    job.qpack = qpack.data();
    job.block_offset = block_offset.data();
  }

  ThreadPool& pool = GlobalPool();
  const int workers = static_cast<int>(std::min<int64_t>(threads > 0 ? threads : pool.size(), nd));
  const int64_t chunk = std::max<int64_t>(1, nd / (static_cast<int64_t>(workers) * 32));
  std::atomic<int64_t> next{0};
  const size_t runmax_floats = static_cast<size_t>((max_lq + 15) / 16 * 16 + 16);
  pool.Run(workers, [&](int) {
    std::vector<float> runmax(runmax_floats);
    for (;;) {
      const int64_t begin = next.fetch_add(chunk);
      if (begin >= nd) break;
      range(job, begin, std::min(nd, begin + chunk), runmax.data());
    }
  });
}

}  // namespace maxsim_cpu
