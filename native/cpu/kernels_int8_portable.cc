// The portable int8 x int8 MaxSim kernel: plain C++ int32 dot products (compiled with the baseline
// flags, so it runs on any CPU), with exactly the fp32 operations the SIMD kernels perform.
#include <cmath>
#include <cstdint>

#include "engine_int8.h"

namespace maxsim_cpu {

namespace {

void PortableInt8Range(const Int8Job& job, int64_t doc_begin, int64_t doc_end, Int8Scratch& scratch) {
  float* runmax = scratch.runmax;
  const Int8Spans& q = job.q;
  const Int8Spans& docs = job.docs;
  const int64_t d = docs.dim;
  for (int64_t doc = doc_begin; doc < doc_end; doc++) {
    const int64_t ds = static_cast<int64_t>(docs.starts[doc]);
    const int64_t ld = docs.lengths[doc];
    for (int64_t i = 0; i < q.count; i++) {
      float* out = job.scores + i * docs.count + doc;
      if (ld == 0) {
        *out = -INFINITY;
        continue;
      }
      const int64_t qs = static_cast<int64_t>(q.starts[i]);
      const int32_t lq = q.lengths[i];
      for (int32_t s = 0; s < lq; s++) runmax[s] = -INFINITY;
      for (int64_t t = 0; t < ld; t++) {
        const int8_t* dt = docs.data + (ds + t) * d;
        const float dscale = docs.scales[ds + t];
        for (int32_t s = 0; s < lq; s++) {
          const int8_t* qt = q.data + (qs + s) * d;
          int32_t dot = 0;
          for (int64_t k = 0; k < d; k++) dot += static_cast<int32_t>(qt[k]) * static_cast<int32_t>(dt[k]);
          const float v = static_cast<float>(dot) * dscale;
          if (v > runmax[s]) runmax[s] = v;
        }
      }
      double sum = 0.0;
      for (int32_t s = 0; s < lq; s++) sum += static_cast<double>(q.scales[qs + s]) * static_cast<double>(runmax[s]);
      *out = static_cast<float>(sum);
    }
  }
}

const Int8KernelSet kPortable{"portable", 16, 1, Int8Pack::None, 1, &PortableInt8Range};

}  // namespace

const Int8KernelSet* PortableInt8Kernels() { return &kPortable; }

}  // namespace maxsim_cpu

