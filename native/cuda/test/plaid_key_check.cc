// Node-free check of the compressed index's 64-bit (score, id) keys (kernels/maxsim_plaid_params.h,
// PlaidKey): every GPU best / top-n merges by comparing them, so their order must be the CPU codec's
// tie rule: larger score first, equal scores (+0 and -0 equal) to the lower id, NaN below everything.
// Build and run (no GPU needed):
//   c++ -std=c++17 -O2 native/cuda/test/plaid_key_check.cc -o build/check/plaid_key_check && build/check/plaid_key_check [seed]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <vector>

#include "../kernels/maxsim_plaid_params.h"

namespace {

bool Better(float sa, int32_t ia, float sb, int32_t ib) { return sa > sb || (sa == sb && ia < ib); }

int failures = 0;
void Expect(bool ok, const char* what, float sa, int32_t ia, float sb, int32_t ib) {
  if (ok) return;
  if (++failures <= 10) std::printf("FAIL %s: (%g, %d) vs (%g, %d)\n", what, sa, ia, sb, ib);
}

}  // namespace

int main(int argc, char** argv) {
  const unsigned seed = argc > 1 ? static_cast<unsigned>(std::strtoul(argv[1], nullptr, 10)) : 1u;
  std::mt19937 gen(seed);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> special = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, std::numeric_limits<float>::denorm_min(),
                                -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
                                -std::numeric_limits<float>::max(), 1e-30f, -1e-30f};
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::uniform_int_distribution<int32_t> id(0, (1 << 24) - 1);
  auto pick = [&]() {
    const int r = static_cast<int>(gen() % 4);
    if (r == 0) return special[gen() % special.size()];
    if (r == 1) return std::ldexp(u(gen), static_cast<int>(gen() % 200) - 100);
    return u(gen);
  };
  int64_t checked = 0;
  for (int t = 0; t < 2000000; t++) {
    const float a = pick(), b = gen() % 8 == 0 ? a : pick();
    const int32_t ia = id(gen), ib = gen() % 8 == 0 ? ia + 1 : id(gen);
    const unsigned long long ka = PlaidKey(a, ia), kb = PlaidKey(b, ib);
    Expect((ka > kb) == Better(a, ia, b, ib), "order", a, ia, b, ib);
    Expect(PlaidKeyId(ka) == ia, "id round trip", a, ia, b, ib);
    checked++;
  }
  // NaN: below every real score (including -inf) and below the register start PLAID_KEY_NONE
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Expect(PlaidKey(nan, 0) == 0ull, "NaN key is 0", nan, 0, 0, 0);
  Expect(PlaidKey(-inf, 123) > PLAID_KEY_NONE, "-inf above the start key", -inf, 123, 0, 0);
  Expect(PlaidKey(0.0f, 5) == PlaidKey(-0.0f, 5), "+0 == -0", 0.0f, 5, -0.0f, 5);
  std::printf("plaid_key_check: %lld pairs, %d failures (seed %u)\n", static_cast<long long>(checked), failures, seed);
  return failures == 0 ? 0 : 1;
}
