// Node-API glue of the device-resident index (native/cuda/plaid_engine.h, PlaidDeviceIndex):
// plaidIndex(device, index, tokens?) uploads an index (the NativeIndex arrays of src/plaid/native.ts,
// checked in full here) and optionally its source tokens (a TokenBatch whose items are the index's
// documents in order); plaidSearch(index, queries, lengths, plan) runs a batch of queries.
#include <napi.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../cuda/kernels/maxsim_plaid_params.h"
#include "../cuda/plaid_engine.h"
#include "plaid_cuda_binding.h"
#include "token_set.h"

using namespace plaid_binding;  // NOLINT: the shared helpers
using maxsim_binding::JobTask;
using maxsim_binding::TaskChannel;
using maxsim_cuda::PlaidDeviceIndex;

namespace {

struct IndexArgs {
  maxsim_cuda::PlaidIndexHost ix;
  std::vector<Napi::ObjectReference> keep;  // the JS arrays, alive until the upload is done
  std::vector<TokenSet> parts;               // the source tokens (their owners pin the data)
  std::vector<std::vector<uint8_t>> packed;  // a part's rows back to back when its items are not
  std::vector<std::pair<const void*, uint64_t>> chunks;
  DType dtype = DType::Float16;
};

int64_t Prop(Napi::Env env, Napi::Object o, const char* key, int64_t lo, int64_t hi) {
  return Whole(env, o.Get(key), std::string("index.") + key, lo, hi);
}

void ParseIndexArrays(Napi::Env env, Napi::Object o, IndexArgs* a) {
  auto& ix = a->ix;
  ix.k = Prop(env, o, "k", 1, 1 << 24);
  ix.d = Prop(env, o, "d", 1, PLAID_MAX_DIM);
  ix.docs = Prop(env, o, "docs", 0, (int64_t{1} << 31) - 1);
  ix.bits = static_cast<int>(Prop(env, o, "bits", 2, 4));
  if (ix.bits == 3) throw ArgError(env, "index.bits", "2 or 4", "3");
  auto cent = F32(env, o.Get("centroids"), "index.centroids");
  auto tables = F32(env, o.Get("tables"), "index.tables");
  auto cids = I32(env, o.Get("cids"), "index.cids");
  auto codes = Typed<uint8_t>(env, o.Get("codes"), "index.codes", napi_uint8_array, "Uint8Array");
  auto doc_off = F64(env, o.Get("docOffsets"), "index.docOffsets");
  auto bag_off = F64(env, o.Get("bagOffsets"), "index.bagOffsets");
  auto bags = I32(env, o.Get("bags"), "index.bags");
  auto ivf_off = F64(env, o.Get("ivfOffsets"), "index.ivfOffsets");
  auto ivf = I32(env, o.Get("ivf"), "index.ivf");
  Need(env, cent.ElementLength(), ix.k * ix.d, "index.centroids");
  Need(env, tables.ElementLength(), ix.d * 16, "index.tables");
  Need(env, doc_off.ElementLength(), ix.docs + 1, "index.docOffsets");
  Need(env, bag_off.ElementLength(), ix.docs + 1, "index.bagOffsets");
  Need(env, ivf_off.ElementLength(), ix.k + 1, "index.ivfOffsets");
  const double tokens = doc_off.Data()[ix.docs];
  CheckOffsets(env, doc_off.Data(), ix.docs, tokens, "index.docOffsets");
  ix.tokens = static_cast<int64_t>(tokens);
  const int64_t padded = (ix.tokens + 15) / 16 * 16;
  Need(env, cids.ElementLength(), padded, "index.cids");
  Need(env, codes.ElementLength(), padded / 16 * ix.d * 2 * ix.bits, "index.codes");
  CheckOffsets(env, bag_off.Data(), ix.docs, static_cast<double>(bags.ElementLength()), "index.bagOffsets");
  CheckOffsets(env, ivf_off.Data(), ix.k, static_cast<double>(ivf.ElementLength()), "index.ivfOffsets");
  CheckIds(env, cids.Data(), padded, ix.k, "index.cids");
  CheckIds(env, bags.Data(), bags.ElementLength(), ix.k, "index.bags");
  CheckIds(env, ivf.Data(), ivf.ElementLength(), ix.docs, "index.ivf");
  ix.centroids = cent.Data();
  ix.tables = tables.Data();
  ix.cids = cids.Data();
  ix.codes = codes.Data();
  ix.doc_off = doc_off.Data();
  ix.bag_off = bag_off.Data();
  ix.bags = bags.Data();
  ix.ivf_off = ivf_off.Data();
  ix.ivf = ivf.Data();
  for (const char* key : {"centroids", "tables", "cids", "codes", "docOffsets", "bagOffsets", "bags", "ivfOffsets", "ivf"})
    a->keep.push_back(Napi::Persistent(o.Get(key).As<Napi::Object>()));
}

// The source tokens: a TokenBatch or an array of them whose items, in order, are the index's
// documents; each part uploads from its buffer when its items lie back to back, else from a packed copy.
void ParseTokens(Napi::Env env, Napi::Value v, IndexArgs* a) {
  std::vector<Napi::Value> values;
  if (v.IsArray()) {
    Napi::Array arr = v.As<Napi::Array>();
    for (uint32_t i = 0; i < arr.Length(); i++) values.push_back(arr.Get(i));
  } else {
    values.push_back(v);
  }
  int64_t doc = 0;
  for (size_t pi = 0; pi < values.size(); pi++) {
    const std::string name = values.size() > 1 ? "tokens[" + std::to_string(pi) + "]" : "tokens";
    TokenSet t = ParseTokenSet(env, values[pi], name);
    if (t.dtype == DType::Int8) throw ArgError(env, name + ".dtype", "'float32', 'float16' or 'bfloat16'", "'int8'");
    if (pi > 0 && t.dtype != a->dtype) throw ArgError(env, name + ".dtype", DTypeName(a->dtype), DTypeName(t.dtype));
    a->dtype = t.dtype;
    if (t.dim != a->ix.d) throw ArgError(env, name + ".dim", std::to_string(a->ix.d) + " (the index's)", std::to_string(t.dim));
    if (doc + t.count > a->ix.docs)
      throw ArgError(env, name + ".count", "at most the index's " + std::to_string(a->ix.docs) + " documents in all",
                     std::to_string(doc + t.count));
    bool contiguous = true;
    for (int64_t b = 0; b < t.count; b++) {
      const double want = a->ix.doc_off[doc + b + 1] - a->ix.doc_off[doc + b];
      if (t.lengths[b] != want)
        throw ArgError(env, name + ".lengths[" + std::to_string(b) + "]",
                       std::to_string(want) + " (the index's document length)", std::to_string(t.lengths[b]));
      contiguous = contiguous && t.starts[b] - t.starts[0] == a->ix.doc_off[doc + b] - a->ix.doc_off[doc];
    }
    const int64_t row = t.dim * DTypeSize(t.dtype);
    const int64_t tokens = static_cast<int64_t>(a->ix.doc_off[doc + t.count] - a->ix.doc_off[doc]);
    if (contiguous) {
      const uint8_t* base = static_cast<const uint8_t*>(t.data) + static_cast<int64_t>(t.count > 0 ? t.starts[0] : 0) * row;
      a->chunks.emplace_back(base, static_cast<uint64_t>(tokens * row));
    } else {
      std::vector<uint8_t> packed(static_cast<size_t>(tokens * row));
      int64_t at = 0;
      for (int64_t b = 0; b < t.count; b++) {
        std::memcpy(packed.data() + at, static_cast<const uint8_t*>(t.data) + static_cast<int64_t>(t.starts[b]) * row,
                    static_cast<size_t>(t.lengths[b] * row));
        at += t.lengths[b] * row;
      }
      a->packed.push_back(std::move(packed));
      a->chunks.emplace_back(a->packed.back().data(), static_cast<uint64_t>(tokens * row));
    }
    doc += t.count;
    a->parts.push_back(std::move(t));
  }
  if (doc != a->ix.docs)
    throw ArgError(env, "tokens", std::to_string(a->ix.docs) + " documents in all (the index's)", std::to_string(doc));
}

maxsim_cuda::PlaidSearchPlan ParsePlan(Napi::Env env, Napi::Value v) {
  if (!v.IsObject()) throw ArgError(env, "plan", "the plan of src/plaid/cuda-plan.ts", Describe(v));
  Napi::Object o = v.As<Napi::Object>();
  maxsim_cuda::PlaidSearchPlan p;
  p.lq = Whole(env, o.Get("lq"), "plan.lq", 32, 256);
  p.nprobe = Whole(env, o.Get("nprobe"), "plan.nprobe", 1, PLAID_MAX_NPROBE);
  p.np = Whole(env, o.Get("np"), "plan.np", 4, 32);
  p.candidates = Whole(env, o.Get("candidates"), "plan.candidates", 1, 1 << 24);
  p.rescore = Whole(env, o.Get("rescore"), "plan.rescore", 1, 1 << 24);
  p.batch = Whole(env, o.Get("batch"), "plan.batch", 1, 65535);
  Napi::Value th = o.Get("threshold");
  p.threshold = th.IsNumber() ? th.As<Napi::Number>().FloatValue() : -INFINITY;
  if (std::isnan(p.threshold)) throw ArgError(env, "plan.threshold", "a number", "NaN");
  p.exact = o.Get("exact").ToBoolean().Value();
  p.stages = o.Get("stages").ToBoolean().Value();
  Napi::Value pr = o.Get("precision");
  if (!pr.IsUndefined()) {
    const std::string v = pr.IsString() ? pr.As<Napi::String>().Utf8Value() : "";
    if (v != "float32" && v != "float16") throw ArgError(env, "plan.precision", "'float32' or 'float16'", Describe(pr));
    p.fp16 = v == "float16";
  }
  return p;
}

template <typename T, typename A>
A Array(Napi::Env env, const std::vector<T>& v) {
  A a = A::New(env, v.size());
  if (!v.empty()) std::memcpy(a.Data(), v.data(), v.size() * sizeof(T));
  return a;
}

Napi::Object SearchResult(Napi::Env env, maxsim_cuda::PlaidSearchResult& r) {
  Napi::Object o = Napi::Object::New(env);
  std::vector<double> off(r.off.begin(), r.off.end());
  o.Set("offsets", Array<double, Napi::Float64Array>(env, off));
  o.Set("docs", Array<int32_t, Napi::Int32Array>(env, r.docs));
  o.Set("scores", Array<float, Napi::Float32Array>(env, r.scores));
  o.Set("residual", Array<float, Napi::Float32Array>(env, r.residual));
  Napi::Object st = Napi::Object::New(env);
  st.Set("probed", static_cast<double>(r.probed));
  st.Set("generated", static_cast<double>(r.generated));
  st.Set("kept", static_cast<double>(r.kept));
  st.Set("scored", static_cast<double>(r.scored));
  st.Set("rescored", static_cast<double>(r.rescored));
  st.Set("msCentroids", r.ms_centroids);
  st.Set("msProbe", r.ms_probe);
  st.Set("msCandidates", r.ms_candidates);
  st.Set("msInteraction", r.ms_interaction);
  st.Set("msResidual", r.ms_residual);
  st.Set("msRescore", r.ms_rescore);
  st.Set("msTotal", r.ms_total);
  o.Set("stats", st);
  if (!r.stages.empty()) {
    Napi::Array a = Napi::Array::New(env, r.stages.size());
    for (size_t i = 0; i < r.stages.size(); i++) {
      auto& s = r.stages[i];
      Napi::Object so = Napi::Object::New(env);
      so.Set("probed", Array<int32_t, Napi::Int32Array>(env, s.probed));
      so.Set("candidates", Array<int32_t, Napi::Int32Array>(env, s.candidates));
      so.Set("interaction", Array<float, Napi::Float32Array>(env, s.interaction));
      so.Set("kept", Array<int32_t, Napi::Int32Array>(env, s.kept));
      so.Set("residual", Array<float, Napi::Float32Array>(env, s.residual));
      a.Set(static_cast<uint32_t>(i), so);
    }
    o.Set("stages", a);
  }
  return o;
}

}  // namespace

Napi::Value PlaidIndexUpload(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  Runtime* rt = maxsim_binding::ParseDevice(env, info[0]);
  if (!info[1].IsObject()) throw ArgError(env, "index", "an index object (PlaidIndex.native)", Describe(info[1]));
  auto a = std::make_shared<IndexArgs>();
  ParseIndexArrays(env, info[1].As<Napi::Object>(), a.get());
  if (!info[2].IsUndefined() && !info[2].IsNull()) ParseTokens(env, info[2], a.get());
  auto task = std::make_unique<JobTask<std::shared_ptr<PlaidDeviceIndex>>>(env, "CUDA plaid index upload failed: ");
  task->run = [rt, a] {
    rt->EnsureReady();
    return std::make_shared<PlaidDeviceIndex>(*rt, a->ix, a->chunks, a->dtype);
  };
  task->wrap = [rt, a](Napi::Env env, std::shared_ptr<PlaidDeviceIndex>& ix) {
    a->keep.clear();
    Napi::Object o = Napi::Object::New(env);
    o.Set("handle", Wrap(env, rt, ix, &kIndexTag));
    o.Set("bytes", static_cast<double>(ix->bytes()));
    return o;
  };
  return channel->Submit(env, rt, std::move(task));
}

Napi::Value PlaidIndexSearch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  auto s = Unwrap<PlaidDeviceIndex>(env, info[0], &kIndexTag, "index", "a CUDA plaid index handle");
  auto q = F32(env, info[1], "queries");
  auto len = I32(env, info[2], "lengths");
  const int64_t d = s.engine->d();
  int64_t rows = 0;
  for (size_t i = 0; i < len.ElementLength(); i++) {
    if (len[i] < 0) throw ArgError(env, "lengths[" + std::to_string(i) + "]", "a length >= 0", std::to_string(len[i]));
    rows += len[i];
  }
  Need(env, q.ElementLength(), rows * d, "queries");
  maxsim_cuda::PlaidSearchPlan plan = ParsePlan(env, info[3]);
  int64_t max_len = 0;
  for (size_t i = 0; i < len.ElementLength(); i++) max_len = std::max<int64_t>(max_len, len[i]);
  try {
    maxsim_cuda::CheckPlaidPlan(plan, s.engine->k(), d, max_len);
  } catch (const std::invalid_argument& e) {
    throw Napi::RangeError::New(env, e.what());
  }
  // the queries are read where they lie, kept alive until the promise settles (a 1,000-query batch
  // is 16 MB: its copy cost ~2.5 ms of the call on the JS thread), as the scan's bindings read theirs
  const float* qs = q.Data();
  auto ls = std::make_shared<std::vector<int32_t>>(len.Data(), len.Data() + len.ElementLength());
  auto task = std::make_unique<JobTask<maxsim_cuda::PlaidSearchResult>>(env, "CUDA plaid search failed: ");
  task->Keep(info[1]);
  task->run = [s, qs, ls, plan] {
    s.rt->EnsureReady();
    return s.engine->Search(qs, ls->data(), static_cast<int64_t>(ls->size()), plan);
  };
  task->wrap = [](Napi::Env env, maxsim_cuda::PlaidSearchResult& r) { return SearchResult(env, r); };
  return channel->Submit(env, s.rt, std::move(task));
}
