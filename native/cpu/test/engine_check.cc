// A standalone check of the CPU engine without Node: every kernel set this CPU runs against a
// double-precision reference on random ragged inputs of awkward shapes, all three float dtypes.
// Used where Node cannot run, e.g. the NEON kernels under qemu-aarch64:
//   aarch64-linux-gnu-g++ -std=c++17 -O2 -static -pthread native/cpu/test/engine_check.cc \
//     native/cpu/engine.cc native/cpu/cpu_features.cc native/cpu/thread_pool.cc native/cpu/kernels_neon.cc \
//     native/cpu/kernels_portable.cc native/cpu/kernels_x86_absent.cc -o engine_check
//   qemu-aarch64-static ./engine_check
// Exit status 0 when every score is within the fp32 error bound.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "../../common/half_bits.h"
#include "../engine.h"

using maxsim_cpu::DocType;
using maxsim_cpu::TokenSpans;

namespace {

uint16_t ToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

uint16_t ToF16(float x) {  // inputs here are in [-1, 1]: normal or zero halves only
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t sign = (u >> 16) & 0x8000;
  const int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  if (exp <= 0) return static_cast<uint16_t>(sign);
  const uint32_t man = (u >> 13) & 0x3ff;
  return static_cast<uint16_t>(sign | (exp << 10) | man);
}

double Decode(const void* data, DocType t, int64_t i) {
  if (t == DocType::Float32) return static_cast<const float*>(data)[i];
  const uint16_t h = static_cast<const uint16_t*>(data)[i];
  return t == DocType::BFloat16 ? Bf16BitsValue(h) : F16BitsValue(h);
}

struct Set {
  std::vector<float> f32;
  std::vector<uint16_t> bits;
  std::vector<double> starts;
  std::vector<int32_t> lengths;
  TokenSpans spans;
};

Set Make(const std::vector<int32_t>& lengths, int64_t d, DocType t, std::mt19937& rng) {
  Set s;
  std::uniform_real_distribution<float> u(-1, 1);
  int64_t total = 0;
  for (int32_t l : lengths) {
    s.starts.push_back(static_cast<double>(total));
    total += l;
  }
  s.lengths = lengths;
  for (int64_t i = 0; i < total * d; i++) {
    const float x = u(rng);
    if (t == DocType::Float32) s.f32.push_back(x);
    else s.bits.push_back(t == DocType::BFloat16 ? ToBf16(x) : ToF16(x));
  }
  s.spans.data = t == DocType::Float32 ? static_cast<const void*>(s.f32.data()) : s.bits.data();
  s.spans.dtype = t;
  s.spans.starts = s.starts.data();
  s.spans.lengths = s.lengths.data();
  s.spans.count = static_cast<int64_t>(lengths.size());
  s.spans.dim = d;
  return s;
}

}  // namespace

int main() {
  std::mt19937 rng(12345);
  int failures = 0;
  int checks = 0;
  for (const auto* isa : maxsim_cpu::UsableIsas()) {
    for (DocType t : {DocType::Float32, DocType::Float16, DocType::BFloat16}) {
      for (int64_t d : {1, 7, 64, 96, 100, 128}) {
        Set q = Make({1, 17, 0, 33}, d, t, rng);
        Set docs = Make({5, 0, 1, 40, 13, 29}, d, t, rng);
        std::vector<float> got(q.spans.count * docs.spans.count, NAN);
        maxsim_cpu::MaxsimAllPairs(*isa, q.spans, docs.spans, got.data(), 2);
        for (int64_t i = 0; i < q.spans.count; i++) {
          for (int64_t b = 0; b < docs.spans.count; b++) {
            double sum = 0, bound = 0;
            for (int32_t a = 0; a < q.lengths[i]; a++) {
              double best = -INFINITY, qn = 0, dn = 0;
              for (int32_t j = 0; j < docs.lengths[b]; j++) {
                double dot = 0, dd = 0;
                for (int64_t k = 0; k < d; k++) {
                  const double x = Decode(q.spans.data, t, (q.starts[i] + a) * d + k);
                  const double y = Decode(docs.spans.data, t, (docs.starts[b] + j) * d + k);
                  dot += x * y;
                  if (j == 0) qn += x * x;
                  dd += y * y;
                }
                best = std::max(best, dot);
                dn = std::max(dn, dd);
              }
              sum += best;
              bound += (d + 2) * std::ldexp(1.0, -24) * std::sqrt(qn * dn);
            }
            const double ref = docs.lengths[b] == 0 ? -INFINITY : sum;
            const float g = got[i * docs.spans.count + b];
            const bool ok = ref == -INFINITY ? g == -INFINITY : std::fabs(g - ref) <= bound + std::fabs(ref) * 1.2e-7;
            checks++;
            if (!ok) {
              failures++;
              std::printf("FAIL %s dtype=%d d=%lld q=%lld doc=%lld got %.9g ref %.9g\n", isa->name, static_cast<int>(t),
                          static_cast<long long>(d), static_cast<long long>(i), static_cast<long long>(b), g, ref);
            }
          }
        }
      }
    }
    std::printf("%s: checked\n", isa->name);
  }
  std::printf("%d checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
