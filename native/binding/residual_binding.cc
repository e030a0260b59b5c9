// Node-API glue for the residual codec and the index search stages (native/cpu/residual.h). Exposed as
// exports.residual. TypeScript validates and decides; this re-checks every size so that no input can
// make native code read out of bounds (the values of an index's id arrays are checked once, by
// checkIndex, when TypeScript builds or opens the index: its arrays are private to the Index object).
#include <napi.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include "../cpu/residual.h"
#include "promise_worker.h"
#include "token_set.h"

namespace {

using maxsim_cpu::ResidualIndex;
using maxsim_cpu::ResidualKernels;

Napi::Error Expected(Napi::Env env, const std::string& name, const std::string& expected, const std::string& got) {
  return Napi::RangeError::New(env, "Expected " + expected + " for " + name + " but received " + got);
}

template <typename T>
Napi::TypedArrayOf<T> Typed(Napi::Env env, Napi::Value v, const std::string& name, const char* type_name) {
  if (!v.IsTypedArray()) throw Expected(env, name, std::string("a ") + type_name, "another value");
  Napi::TypedArray t = v.As<Napi::TypedArray>();
  napi_typedarray_type want = std::is_same<T, float>::value     ? napi_float32_array
                              : std::is_same<T, double>::value  ? napi_float64_array
                              : std::is_same<T, int32_t>::value ? napi_int32_array
                                                                : napi_uint8_array;
  if (t.TypedArrayType() != want) throw Expected(env, name, std::string("a ") + type_name, "another typed array");
  return v.As<Napi::TypedArrayOf<T>>();
}

int64_t Int(Napi::Env env, Napi::Object o, const char* key, int64_t lo, int64_t hi) {
  Napi::Value v = o.Get(key);
  const double x = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : NAN;
  if (!(x >= static_cast<double>(lo) && x <= static_cast<double>(hi)) || std::floor(x) != x)
    throw Expected(env, key, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
                   v.IsNumber() ? std::to_string(x) : "another value");
  return static_cast<int64_t>(x);
}

const ResidualKernels* Kernels(Napi::Env env, Napi::Value opts) {
  std::string isa;
  const Napi::Value v = opts.IsObject() ? opts.As<Napi::Object>().Get("isa") : opts.Env().Undefined();
  if (v.IsString()) isa = v.As<Napi::String>().Utf8Value();
  else if (!v.IsUndefined() && !v.IsNull()) throw Expected(env, "isa", "a kernel set's name (a string)", "another value");
  std::string error;
  const ResidualKernels* k = maxsim_cpu::SelectResidualKernels(isa, &error);
  if (!k) throw Napi::TypeError::New(env, error);
  return k;
}

int Threads(Napi::Value opts) {
  if (opts.IsObject() && opts.As<Napi::Object>().Get("threads").IsNumber())
    return opts.As<Napi::Object>().Get("threads").As<Napi::Number>().Int32Value();
  return 0;
}

// Offsets arrays: n + 1 ascending integers from 0 to at most `limit`.
void CheckOffsets(Napi::Env env, const double* o, int64_t n, double limit, const std::string& name) {
  if (o[0] != 0) throw Expected(env, name + "[0]", "0", std::to_string(o[0]));
  for (int64_t i = 0; i < n; i++)
    if (!(o[i + 1] >= o[i]) || std::floor(o[i + 1]) != o[i + 1])
      throw Expected(env, name + "[" + std::to_string(i + 1) + "]", "an integer >= " + std::to_string(o[i]),
                     std::to_string(o[i + 1]));
  if (o[n] > limit) throw Expected(env, name + "[" + std::to_string(n) + "]", "<= " + std::to_string(limit), std::to_string(o[n]));
}

void CheckIds(Napi::Env env, const int32_t* v, int64_t n, int64_t hi, const std::string& name) {
  for (int64_t i = 0; i < n; i++)
    if (v[i] < 0 || v[i] >= hi)
      throw Expected(env, name + "[" + std::to_string(i) + "]", "an id in [0, " + std::to_string(hi) + ")",
                     std::to_string(v[i]));
}

// The index object's arrays with their sizes checked; `full` also checks every id (O(size)).
ResidualIndex ParseIndex(Napi::Env env, Napi::Value value, bool full) {
  if (!value.IsObject()) throw Expected(env, "index", "an index object", "another value");
  Napi::Object o = value.As<Napi::Object>();
  ResidualIndex ix;
  ix.k = Int(env, o, "k", 1, 1 << 24);
  ix.d = Int(env, o, "d", 1, 1 << 16);
  ix.docs = Int(env, o, "docs", 0, (int64_t{1} << 31) - 1);
  const int bits = static_cast<int>(Int(env, o, "bits", 2, 4));
  if (bits != 2 && bits != 4) throw Expected(env, "index.bits", "2 or 4", std::to_string(bits));
  auto centroids = Typed<float>(env, o.Get("centroids"), "index.centroids", "Float32Array");
  auto tables = Typed<float>(env, o.Get("tables"), "index.tables", "Float32Array");
  auto cids = Typed<int32_t>(env, o.Get("cids"), "index.cids", "Int32Array");
  auto codes = Typed<uint8_t>(env, o.Get("codes"), "index.codes", "Uint8Array");
  auto doc_off = Typed<double>(env, o.Get("docOffsets"), "index.docOffsets", "Float64Array");
  auto bag_off = Typed<double>(env, o.Get("bagOffsets"), "index.bagOffsets", "Float64Array");
  auto bags = Typed<int32_t>(env, o.Get("bags"), "index.bags", "Int32Array");
  auto ivf_off = Typed<double>(env, o.Get("ivfOffsets"), "index.ivfOffsets", "Float64Array");
  auto ivf = Typed<int32_t>(env, o.Get("ivf"), "index.ivf", "Int32Array");
  auto need = [&](size_t got, int64_t want, const char* name) {
    if (static_cast<int64_t>(got) != want)
      throw Expected(env, name, std::to_string(want) + " elements", std::to_string(got));
  };
  need(centroids.ElementLength(), ix.k * ix.d, "index.centroids");
  need(tables.ElementLength(), ix.d * maxsim_cpu::kResidualTable, "index.tables");
  need(doc_off.ElementLength(), ix.docs + 1, "index.docOffsets");
  need(bag_off.ElementLength(), ix.docs + 1, "index.bagOffsets");
  need(ivf_off.ElementLength(), ix.k + 1, "index.ivfOffsets");
  const double tokens = doc_off.Data()[ix.docs];
  const int64_t padded = (static_cast<int64_t>(tokens) + 15) / 16 * 16;
  need(cids.ElementLength(), padded, "index.cids");
  need(codes.ElementLength(), padded / 16 * ix.d * 2 * bits, "index.codes");
  need(bags.ElementLength(), static_cast<int64_t>(bag_off.Data()[ix.docs]), "index.bags");
  need(ivf.ElementLength(), static_cast<int64_t>(ivf_off.Data()[ix.k]), "index.ivf");
  if (full) {
    CheckOffsets(env, doc_off.Data(), ix.docs, tokens, "index.docOffsets");
    CheckOffsets(env, bag_off.Data(), ix.docs, bag_off.Data()[ix.docs], "index.bagOffsets");
    CheckOffsets(env, ivf_off.Data(), ix.k, ivf_off.Data()[ix.k], "index.ivfOffsets");
    CheckIds(env, cids.Data(), padded, ix.k, "index.cids");
    CheckIds(env, bags.Data(), bags.ElementLength(), ix.k, "index.bags");
    CheckIds(env, ivf.Data(), ivf.ElementLength(), ix.docs, "index.ivf");
  }
  ix.centroids = centroids.Data();
  ix.codes.cids = cids.Data();
  ix.codes.codes = codes.Data();
  ix.codes.tables = tables.Data();
  ix.codes.bits = bits;
  ix.codes.d = ix.d;
  ix.doc_offsets = doc_off.Data();
  ix.bag_offsets = bag_off.Data();
  ix.bags = bags.Data();
  ix.ivf_offsets = ivf_off.Data();
  ix.ivf = ivf.Data();
  return ix;
}

// A query: Float32Array of lq * d values.
const float* ParseQuery(Napi::Env env, Napi::Value v, int64_t d, int64_t* lq) {
  auto q = Typed<float>(env, v, "query", "Float32Array");
  if (q.ElementLength() % d != 0)
    throw Expected(env, "query.length", "a multiple of " + std::to_string(d), std::to_string(q.ElementLength()));
  *lq = static_cast<int64_t>(q.ElementLength()) / d;
  return q.Data();
}

// opts.groups ({ coarse: Float32Array [g * d], offsets: Int32Array [g + 1], members: Int32Array, probe })
// of a two-level assignment over nc fine centroids, checked in full (members a partition of the ids
// into ascending runs is not required: any ids in range), or false when absent. The arrays are
// kept alive by the caller's options object.
bool ParseGroups(Napi::Env env, Napi::Value opts, int64_t nc, int64_t d, maxsim_cpu::ResidualGroups* g) {
  if (!opts.IsObject() || !opts.As<Napi::Object>().Get("groups").IsObject()) return false;
  Napi::Object o = opts.As<Napi::Object>().Get("groups").As<Napi::Object>();
  auto coarse = Typed<float>(env, o.Get("coarse"), "groups.coarse", "Float32Array");
  auto offsets = Typed<int32_t>(env, o.Get("offsets"), "groups.offsets", "Int32Array");
  auto members = Typed<int32_t>(env, o.Get("members"), "groups.members", "Int32Array");
  if (coarse.ElementLength() == 0 || coarse.ElementLength() % d != 0)
    throw Expected(env, "groups.coarse.length", "a positive multiple of " + std::to_string(d),
                   std::to_string(coarse.ElementLength()));
  g->g = static_cast<int64_t>(coarse.ElementLength()) / d;
  if (static_cast<int64_t>(offsets.ElementLength()) != g->g + 1)
    throw Expected(env, "groups.offsets.length", std::to_string(g->g + 1), std::to_string(offsets.ElementLength()));
  std::vector<double> off(offsets.Data(), offsets.Data() + g->g + 1);
  CheckOffsets(env, off.data(), g->g, static_cast<double>(members.ElementLength()), "groups.offsets");
  if (off[g->g] != static_cast<double>(members.ElementLength()) || members.ElementLength() == 0)
    throw Expected(env, "groups.offsets[g]", "members.length (> 0)", std::to_string(off[g->g]));
  CheckIds(env, members.Data(), members.ElementLength(), nc, "groups.members");
  g->probe = Int(env, o, "probe", 1, g->g);
  g->coarse = coarse.Data();
  g->offsets = offsets.Data();
  g->members = members.Data();
  return true;
}

Napi::Value Isas(const Napi::CallbackInfo& info) {
  Napi::Array a = Napi::Array::New(info.Env());
  uint32_t i = 0;
  for (const ResidualKernels* k : maxsim_cpu::UsableResidualKernels()) a.Set(i++, k->name);
  return a;
}

// assign(x: Float32Array [n * d], centroids: Float32Array [k * d], d, l2, opts) -> Promise<{ ids, scores }>
Napi::Value Assign(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto x = Typed<float>(env, info[0], "x", "Float32Array");
  auto c = Typed<float>(env, info[1], "centroids", "Float32Array");
  const double dd = info[2].IsNumber() ? info[2].As<Napi::Number>().DoubleValue() : 0;
  if (!(dd >= 1) || std::floor(dd) != dd) throw Expected(env, "d", "a positive integer", std::to_string(dd));
  const int64_t d = static_cast<int64_t>(dd);
  if (x.ElementLength() % d != 0 || c.ElementLength() % d != 0 || c.ElementLength() == 0)
    throw Expected(env, "x, centroids", "lengths that are multiples of d (and at least one centroid)", "other lengths");
  const bool l2 = info[3].ToBoolean().Value();
  const ResidualKernels* k = Kernels(env, info[4]);
  const int threads = Threads(info[4]);
  const int64_t n = static_cast<int64_t>(x.ElementLength()) / d;
  const int64_t nc = static_cast<int64_t>(c.ElementLength()) / d;
  Napi::Int32Array ids = Napi::Int32Array::New(env, static_cast<size_t>(n));
  Napi::Float32Array scores = Napi::Float32Array::New(env, static_cast<size_t>(n));
  Napi::Object result = Napi::Object::New(env);
  result.Set("ids", ids);
  result.Set("scores", scores);
  const float* xp = x.Data();
  const float* cp = c.Data();
  int32_t* ip = ids.Data();
  float* sp = scores.Data();
  maxsim_cpu::ResidualGroups g;
  const bool grouped = ParseGroups(env, info[4], nc, d, &g);
  if (grouped && !l2) throw Expected(env, "l2", "true with groups", "false");
  return PromiseWorker::Start(env, "maxsim residual assign", {info[0], info[1], info[4]}, result, [=] {
    if (grouped) maxsim_cpu::ResidualAssignGrouped(*k, xp, n, cp, nc, d, g, ip, sp, threads);
    else maxsim_cpu::ResidualAssign(*k, xp, n, cp, nc, d, l2, ip, sp, threads);
  });
}

// encode(docs: TokenBatch, centroids, cutoffs [d * (2^b - 1)], tables [d * 16], bits, opts)
//   -> Promise<{ cids, codes, sqError }>
Napi::Value Encode(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  TokenSet docs = ParseTokenSet(env, info[0], "docs");
  if (docs.dtype == DType::Int8) throw Expected(env, "docs.dtype", "'float32', 'float16' or 'bfloat16'", "'int8'");
  const int64_t d = docs.dim;
  auto c = Typed<float>(env, info[1], "centroids", "Float32Array");
  auto cut = Typed<float>(env, info[2], "cutoffs", "Float32Array");
  auto tab = Typed<float>(env, info[3], "tables", "Float32Array");
  const int bits = info[4].IsNumber() ? info[4].As<Napi::Number>().Int32Value() : 0;
  if (bits != 2 && bits != 4) throw Expected(env, "bits", "2 or 4", std::to_string(bits));
  if (c.ElementLength() == 0 || c.ElementLength() % d != 0)
    throw Expected(env, "centroids.length", "a positive multiple of " + std::to_string(d), std::to_string(c.ElementLength()));
  if (static_cast<int64_t>(cut.ElementLength()) != d * ((1 << bits) - 1))
    throw Expected(env, "cutoffs.length", std::to_string(d * ((1 << bits) - 1)), std::to_string(cut.ElementLength()));
  if (static_cast<int64_t>(tab.ElementLength()) != d * maxsim_cpu::kResidualTable)
    throw Expected(env, "tables.length", std::to_string(d * 16), std::to_string(tab.ElementLength()));
  const ResidualKernels* k = Kernels(env, info[5]);
  const int threads = Threads(info[5]);
  int64_t total = 0;
  for (int64_t b = 0; b < docs.count; b++) total += docs.lengths[b];
  Napi::Object o = info[5].IsObject() ? info[5].As<Napi::Object>() : Napi::Object::New(env);
  // first: the stream index of the part's first token; cids / codes: the stream's arrays to write
  // into (made here when absent, for a whole stream from 0)
  const int64_t first = o.Get("first").IsUndefined() ? 0 : Int(env, o, "first", 0, int64_t{1} << 50);
  const int64_t padded = (first + total + 15) / 16 * 16;
  const int64_t code_bytes = padded / 16 * d * 2 * bits;
  Napi::Int32Array cids = o.Get("cids").IsUndefined() ? Napi::Int32Array::New(env, static_cast<size_t>(padded))
                                                       : Typed<int32_t>(env, o.Get("cids"), "cids", "Int32Array");
  Napi::Uint8Array codes = o.Get("codes").IsUndefined() ? Napi::Uint8Array::New(env, static_cast<size_t>(code_bytes))
                                                         : Typed<uint8_t>(env, o.Get("codes"), "codes", "Uint8Array");
  if (static_cast<int64_t>(cids.ElementLength()) < padded)
    throw Expected(env, "cids.length", "at least " + std::to_string(padded), std::to_string(cids.ElementLength()));
  if (static_cast<int64_t>(codes.ElementLength()) < code_bytes)
    throw Expected(env, "codes.length", "at least " + std::to_string(code_bytes), std::to_string(codes.ElementLength()));
  Napi::Object result = Napi::Object::New(env);
  result.Set("cids", cids);
  result.Set("codes", codes);
  const float* cp = c.Data();
  const float* cutp = cut.Data();
  const float* tp = tab.Data();
  int32_t* idp = cids.Data();
  uint8_t* codep = codes.Data();
  const int64_t nc = static_cast<int64_t>(c.ElementLength()) / d;
  maxsim_cpu::ResidualGroups g;
  const bool grouped = ParseGroups(env, info[5], nc, d, &g);
  Napi::Float64Array sq = Napi::Float64Array::New(env, 1);
  result.Set("sqError", sq);
  double* sqp = sq.Data();
  return PromiseWorker::Start(env, "maxsim residual encode", {info[0], info[1], info[2], info[3], info[5]}, result,
                              [=] {
                                maxsim_cpu::ResidualEncode(*k, docs, first, cp, nc, grouped ? &g : nullptr, cutp, tp,
                                                           bits, idp, codep, sqp, threads);
                              });
}

// The stages index qct rows by cid * lqp in int32: refuse a query too long for the index's K.
void CheckQueryFits(Napi::Env env, const ResidualIndex& ix, int64_t lq) {
  const int64_t lqp = std::max<int64_t>(16, (lq + 15) / 16 * 16);
  if (ix.k * lqp >= (int64_t{1} << 31))
    throw Expected(env, "query.length", "at most " + std::to_string(((int64_t{1} << 31) / ix.k) / 16 * 16 - 16) +
                                            " tokens for " + std::to_string(ix.k) + " centroids",
                   std::to_string(lq));
}

// checkIndex(index): every size, offset and id (O(index size)); throws a RangeError naming the first bad one.
Napi::Value CheckIndex(const Napi::CallbackInfo& info) {
  ParseIndex(info.Env(), info[0], true);
  return info.Env().Undefined();
}

// options.prune: a number >= 0 (Infinity, the default: every token scored).
float Prune(Napi::Env env, Napi::Object o) {
  const Napi::Value v = o.Get("prune");
  if (v.IsUndefined()) return INFINITY;
  const double x = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : NAN;
  if (!(x >= 0))
    throw Expected(env, "options.prune", "a number >= 0 (Infinity: no pruning)",
                   v.IsNumber() ? v.ToString().Utf8Value() : "another value");
  return static_cast<float>(x);
}

// The search options shared by search and searchBatch.
maxsim_cpu::ResidualSearchParams ParseSearchParams(Napi::Env env, Napi::Value opts, const ResidualIndex& ix) {
  if (!opts.IsObject()) throw Expected(env, "options", "an object", "another value");
  Napi::Object o = opts.As<Napi::Object>();
  maxsim_cpu::ResidualSearchParams p;
  p.nprobe = Int(env, o, "nprobe", 1, ix.k);
  p.candidates = Int(env, o, "candidates", 1, int64_t{1} << 31);
  p.threshold = o.Get("threshold").IsNumber() ? o.Get("threshold").As<Napi::Number>().FloatValue() : -INFINITY;
  p.threads = Threads(o);
  p.prune = Prune(env, o);
  if (!o.Get("interaction").IsUndefined()) {
    const Napi::Value v = o.Get("interaction");
    const std::string s = v.IsString() ? v.As<Napi::String>().Utf8Value() : "";
    if (s != "lists" && s != "bags" && s != "hybrid")
      throw Expected(env, "options.interaction", "'lists', 'bags' or 'hybrid'",
                     v.IsString() ? "'" + s + "'" : "another value");
    p.lists = s != "bags";
    // hybrid: the lists keep 4x the candidates for the bag interaction
    if (s == "hybrid") p.refine = 4 * p.candidates;
  }
  return p;
}

Napi::Object StatsObject(Napi::Env e, const maxsim_cpu::ResidualSearchStats& st, const ResidualKernels* k) {
  Napi::Object s = Napi::Object::New(e);
  s.Set("probed", static_cast<double>(st.probed));
  s.Set("generated", static_cast<double>(st.generated));
  s.Set("keptCentroids", static_cast<double>(st.kept_centroids));
  s.Set("scored", static_cast<double>(st.scored));
  s.Set("msCentroids", st.ms_centroids);
  s.Set("msCandidates", st.ms_candidates);
  s.Set("msInteraction", st.ms_interaction);
  s.Set("msResidual", st.ms_residual);
  s.Set("isa", k->name);
  return s;
}

// A search job: the work off the JS thread, then the result arrays made on it (a completion hook
// fills `result`); `keep` holds the inputs alive until then.
struct SearchJob : public Napi::AsyncWorker {
  SearchJob(Napi::Env e, const char* name, std::function<void()> w, std::function<void(Napi::Env, Napi::Object)> fill,
            std::vector<Napi::Value> keep)
      : Napi::AsyncWorker(e, name), deferred(Napi::Promise::Deferred::New(e)), work(std::move(w)),
        fill_(std::move(fill)), name_(name) {
    for (auto& v : keep)
      if (v.IsObject()) refs.push_back(Napi::Persistent(v.As<Napi::Object>()));
  }
  void Execute() override {
    try {
      work();
    } catch (const std::exception& e) {
      SetError(name_ + " failed: " + e.what());
    }
  }
  void OnOK() override {
    Napi::Object r = Napi::Object::New(Env());
    fill_(Env(), r);
    deferred.Resolve(r);
  }
  void OnError(const Napi::Error& e) override { deferred.Reject(e.Value()); }
  static Napi::Promise Start(SearchJob* job) {
    Napi::Promise pr = job->deferred.Promise();
    job->Queue();
    return pr;
  }
  Napi::Promise::Deferred deferred;
  std::function<void()> work;
  std::function<void(Napi::Env, Napi::Object)> fill_;
  std::string name_;
  std::vector<Napi::ObjectReference> refs;
};

// search(index, query, { nprobe, candidates, threshold, interaction: 'lists' | 'bags' (default) | 'hybrid', threads, isa }) -> Promise<{ ids, scores, stats }>
Napi::Value Search(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ResidualIndex ix = ParseIndex(env, info[0], false);
  int64_t lq = 0;
  const float* q = ParseQuery(env, info[1], ix.d, &lq);
  CheckQueryFits(env, ix, lq);
  const maxsim_cpu::ResidualSearchParams p = ParseSearchParams(env, info[2], ix);
  const ResidualKernels* k = Kernels(env, info[2]);
  auto out = std::make_shared<maxsim_cpu::ResidualSearchResult>();
  return SearchJob::Start(new SearchJob(
      env, "maxsim residual search",
      [=] { maxsim_cpu::ResidualSearch(*k, ix, q, lq, p, &out->ids, &out->scores, &out->stats); },
      [out, k](Napi::Env e, Napi::Object r) {
        Napi::Int32Array ids = Napi::Int32Array::New(e, out->ids.size());
        Napi::Float32Array sc = Napi::Float32Array::New(e, out->scores.size());
        std::copy(out->ids.begin(), out->ids.end(), ids.Data());
        std::copy(out->scores.begin(), out->scores.end(), sc.Data());
        r.Set("ids", ids);
        r.Set("scores", sc);
        r.Set("stats", StatsObject(e, out->stats, k));
      },
      {info[0], info[1]}));
}

// searchBatch(index, queries: Float32Array [sum(lengths) * d], lengths: Int32Array, options as search
//   and passBytes)
//   -> Promise<{ ids, scores, offsets: Float64Array [n + 1], stats: [n] }>: query i's results are
// ids / scores [offsets[i], offsets[i + 1]), each what search returns for it.
Napi::Value SearchBatch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ResidualIndex ix = ParseIndex(env, info[0], false);
  auto qs = Typed<float>(env, info[1], "queries", "Float32Array");
  auto lens = Typed<int32_t>(env, info[2], "lengths", "Int32Array");
  const int64_t nq = static_cast<int64_t>(lens.ElementLength());
  auto lengths = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(nq));
  int64_t rows = 0;
  for (int64_t i = 0; i < nq; i++) {
    const int32_t l = lens.Data()[i];
    const std::string name = "lengths[" + std::to_string(i) + "]";
    if (l < 0) throw Expected(env, name, "a length >= 0", std::to_string(l));
    const int64_t lqp = std::max<int64_t>(16, (int64_t{l} + 15) / 16 * 16);
    if (ix.k * lqp >= (int64_t{1} << 31))
      throw Expected(env, name, "at most " + std::to_string(((int64_t{1} << 31) / ix.k) / 16 * 16 - 16) +
                                    " tokens for " + std::to_string(ix.k) + " centroids",
                     std::to_string(l));
    (*lengths)[i] = l;
    rows += l;
  }
  if (static_cast<int64_t>(qs.ElementLength()) != rows * ix.d)
    throw Expected(env, "queries.length",
                   std::to_string(rows * ix.d) + " (the lengths' " + std::to_string(rows) + " rows x d " +
                       std::to_string(ix.d) + ")",
                   std::to_string(qs.ElementLength()));
  const maxsim_cpu::ResidualSearchParams p = ParseSearchParams(env, info[3], ix);
  const ResidualKernels* k = Kernels(env, info[3]);
  Napi::Object o = info[3].As<Napi::Object>();
  // passBytes (tests): the budget of a pass's centroid scores
  const int64_t scratch = o.Get("passBytes").IsUndefined() ? maxsim_cpu::kResidualBatchScratch
                                                            : Int(env, o, "passBytes", 1, int64_t{1} << 50);
  const float* q = qs.Data();
  auto out = std::make_shared<std::vector<maxsim_cpu::ResidualSearchResult>>();
  return SearchJob::Start(new SearchJob(
      env, "maxsim residual searchBatch",
      [=] { maxsim_cpu::ResidualSearchBatch(*k, ix, q, lengths->data(), nq, p, out.get(), scratch); },
      [out, k](Napi::Env e, Napi::Object r) {
        size_t total = 0;
        for (const auto& x : *out) total += x.ids.size();
        Napi::Int32Array ids = Napi::Int32Array::New(e, total);
        Napi::Float32Array sc = Napi::Float32Array::New(e, total);
        Napi::Float64Array off = Napi::Float64Array::New(e, out->size() + 1);
        Napi::Array stats = Napi::Array::New(e, out->size());
        size_t at = 0;
        off[0] = 0;
        for (size_t i = 0; i < out->size(); i++) {
          const auto& x = (*out)[i];
          std::copy(x.ids.begin(), x.ids.end(), ids.Data() + at);
          std::copy(x.scores.begin(), x.scores.end(), sc.Data() + at);
          at += x.ids.size();
          off[i + 1] = static_cast<double>(at);
          stats.Set(static_cast<uint32_t>(i), StatsObject(e, x.stats, k));
        }
        r.Set("ids", ids);
        r.Set("scores", sc);
        r.Set("offsets", off);
        r.Set("stats", stats);
      },
      {info[0], info[1], info[2]}));
}

// scoreDocs(index, query, docs: Int32Array, opts: { isa, threads, keep }) -> Float32Array (sync; tests and benchmarks)
// centroidDocs(index, query, docs, keep: Uint8Array | null, opts) -> Float32Array
Napi::Value ScoreDocs(const Napi::CallbackInfo& info, bool centroid) {
  Napi::Env env = info.Env();
  ResidualIndex ix = ParseIndex(env, info[0], false);
  int64_t lq = 0;
  const float* q = ParseQuery(env, info[1], ix.d, &lq);
  CheckQueryFits(env, ix, lq);
  auto docs = Typed<int32_t>(env, info[2], "docs", "Int32Array");
  CheckIds(env, docs.Data(), docs.ElementLength(), ix.docs, "docs");
  const uint8_t* keep = nullptr;
  Napi::Value opts = info[centroid ? 4 : 3];
  if (centroid && info[3].IsTypedArray()) {
    auto kp = Typed<uint8_t>(env, info[3], "keep", "Uint8Array");
    if (static_cast<int64_t>(kp.ElementLength()) != ix.k)
      throw Expected(env, "keep.length", std::to_string(ix.k), std::to_string(kp.ElementLength()));
    keep = kp.Data();
  }
  const ResidualKernels* k = Kernels(env, opts);
  Napi::Float32Array out = Napi::Float32Array::New(env, docs.ElementLength());
  if (centroid)
    maxsim_cpu::CentroidScoreDocs(*k, ix, q, lq, keep, docs.Data(), docs.ElementLength(), out.Data(), Threads(opts));
  else {
    // a pruning plan given whole (tests): keep [k]
    const uint8_t* keepc = nullptr;
    if (opts.IsObject() && !opts.As<Napi::Object>().Get("keep").IsUndefined()) {
      auto kp = Typed<uint8_t>(env, opts.As<Napi::Object>().Get("keep"), "options.keep", "Uint8Array");
      if (static_cast<int64_t>(kp.ElementLength()) != ix.k)
        throw Expected(env, "options.keep.length", std::to_string(ix.k), std::to_string(kp.ElementLength()));
      keepc = kp.Data();
    }
    maxsim_cpu::ResidualScoreDocs(*k, ix, q, lq, docs.Data(), docs.ElementLength(), out.Data(), Threads(opts), keepc);
  }
  return out;
}

// prunePlan(index, query, { nprobe, prune }) -> Uint8Array [k]: the centroids whose tokens are decoded (tests)
Napi::Value PrunePlan(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ResidualIndex ix = ParseIndex(env, info[0], false);
  int64_t lq = 0;
  const float* q = ParseQuery(env, info[1], ix.d, &lq);
  CheckQueryFits(env, ix, lq);
  if (!info[2].IsObject()) throw Expected(env, "options", "an object", "another value");
  Napi::Object o = info[2].As<Napi::Object>();
  const int64_t np = Int(env, o, "nprobe", 1, ix.k);
  const float prune = Prune(env, o);
  std::vector<uint8_t> keepc;
  maxsim_cpu::ResidualPrunePlanOf(*Kernels(env, o), ix, q, lq, np, prune, &keepc);
  Napi::Uint8Array kp = Napi::Uint8Array::New(env, keepc.size());
  std::copy(keepc.begin(), keepc.end(), kp.Data());
  return kp;
}

}  // namespace

void InitResidual(Napi::Env env, Napi::Object exports) {
  Napi::Object r = Napi::Object::New(env);
  r.Set("isas", Napi::Function::New(env, Isas));
  r.Set("assign", Napi::Function::New(env, Assign));
  r.Set("encode", Napi::Function::New(env, Encode));
  r.Set("checkIndex", Napi::Function::New(env, CheckIndex));
  r.Set("search", Napi::Function::New(env, Search));
  r.Set("searchBatch", Napi::Function::New(env, SearchBatch));
  r.Set("prunePlan", Napi::Function::New(env, PrunePlan));
  r.Set("scoreDocs", Napi::Function::New(env, [](const Napi::CallbackInfo& i) { return ScoreDocs(i, false); }));
  r.Set("centroidDocs", Napi::Function::New(env, [](const Napi::CallbackInfo& i) { return ScoreDocs(i, true); }));
  exports.Set("residual", r);
}
