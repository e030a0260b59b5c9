// The device side every training pass shares: operands on the device, kernel parameters, launches.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "train_internal.h"

namespace maxsim_cuda::train {

namespace {

int32_t TrainDType(DType t) {
  switch (t) {
    case DType::Float16: return kTrainF16;
    case DType::BFloat16: return kTrainBF16;
    default: return kTrainF32;
  }
}

std::shared_ptr<DeviceTokens> UploadSet(Runtime* rt, const TokenSet& t) {
  auto dev = rt->AllocTokens(t.dtype, t.dim, TokensOf(t), t.count);
  rt->Append(*dev, t);
  return dev;
}

}  // namespace

int64_t TokensOf(const TokenSet& t) {
  int64_t n = 0;
  for (int64_t i = 0; i < t.count; i++) n += t.lengths[i];
  return n;
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

void Launch1D(Runtime* rt, const std::string& kernel, int64_t blocks, unsigned threads, const MaxsimTrainParams& p,
              unsigned smem, const cu::CUtensorMap* map, cu::CUstream on) {
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

}  // namespace maxsim_cuda::train
