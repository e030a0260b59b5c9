// Top-K selection on the host for the CUDA jobs: the heap of topKOfRow (src/ops/topk.ts), built by the
// same steps in the same order, so that a row gives the same heap (values and layout) here and there,
// NaN included. The final ranking (descending score, ties to the lower index) is left to sortedHits()
// in TypeScript, which sorts either heap the same way.
#pragma once
#include <cstdint>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace maxsim_common {

// A min-heap of at most `cap` (score, index) pairs over caller storage; the root is the worst kept.
// Indices must be pushed in ascending order: then a pair beats the root exactly when its score is
// greater (an equal score loses on index; NaN compares false), which Scan uses to reject with one
// comparison.
class TopKHeap {
 public:
  TopKHeap(float* scores, int32_t* indices, int64_t cap) : s_(scores), i_(indices), cap_(cap) {}
  int64_t size() const { return size_; }

  void Push(float s, int32_t index) {
    if (size_ < cap_) {
      s_[size_] = s;
      i_[size_] = index;
      SiftUp(size_++);
    } else if (cap_ > 0 && s > s_[0]) {
      s_[0] = s;
      i_[0] = index;
      SiftDown(0);
    }
  }

  // Pushes p[0 .. count) with indices first, first + 1, ...
  void Scan(const float* p, int64_t count, int64_t first) {
    int64_t j = 0;
    for (; j < count && size_ < cap_; j++) Push(p[j], static_cast<int32_t>(first + j));
    if (cap_ == 0) return;
    float worst = s_[0];
    for (; j < count; j++) {
      // blocks of 16 with no element above the root are skipped by one vectorized test
      if ((j & 15) == 0) {
        while (j + 16 <= count && !AnyAbove(p + j, worst)) j += 16;
        if (j == count) break;
      }
      if (p[j] > worst) {
        s_[0] = p[j];
        i_[0] = static_cast<int32_t>(first + j);
        SiftDown(0);
        worst = s_[0];
      }
    }
  }

 private:
  // Ordered compares: NaN is never above, as in the scalar test.
  static bool AnyAbove(const float* p, float worst) {
#if defined(__SSE2__)
    const __m128 w = _mm_set1_ps(worst);
    const __m128 a = _mm_or_ps(_mm_cmpgt_ps(_mm_loadu_ps(p), w), _mm_cmpgt_ps(_mm_loadu_ps(p + 4), w));
    const __m128 b = _mm_or_ps(_mm_cmpgt_ps(_mm_loadu_ps(p + 8), w), _mm_cmpgt_ps(_mm_loadu_ps(p + 12), w));
    return _mm_movemask_ps(_mm_or_ps(a, b)) != 0;
#else
    int any = 0;
    for (int t = 0; t < 16; t++) any |= p[t] > worst ? 1 : 0;
    return any != 0;
#endif
  }
  // a ranks before b (better() in topk.ts)
  bool Better(int64_t a, int64_t b) const { return s_[a] > s_[b] || (s_[a] == s_[b] && i_[a] < i_[b]); }
  void Swap(int64_t a, int64_t b) {
    const float ts = s_[a];
    const int32_t ti = i_[a];
    s_[a] = s_[b];
    i_[a] = i_[b];
    s_[b] = ts;
    i_[b] = ti;
  }
  void SiftUp(int64_t pos) {
    while (pos > 0) {
      const int64_t p = (pos - 1) >> 1;
      if (!Better(p, pos)) return;
      Swap(p, pos);
      pos = p;
    }
  }
  void SiftDown(int64_t pos) {
    for (;;) {
      const int64_t l = 2 * pos + 1;
      if (l >= size_) return;
      const int64_t r = l + 1;
      const int64_t c = r < size_ && Better(l, r) ? r : l;  // the child that ranks worst
      if (!Better(pos, c)) return;
      Swap(pos, c);
      pos = c;
    }
  }
  float* s_;
  int32_t* i_;
  int64_t cap_;
  int64_t size_ = 0;
};

}  // namespace maxsim_common
