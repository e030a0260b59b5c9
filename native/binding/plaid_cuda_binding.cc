// Node-API glue for the compressed index on the GPU (native/cuda/plaid_engine.h), attached to
// exports.cuda: plaidEncoder / plaidAssign / plaidEncode (the codec) and plaidIndex / plaidSearch
// (the device-resident index and its batched search). Sessions are tagged Externals holding the
// engine object; their device memory goes back through the device's worker thread when JS drops them.
// Every size is re-checked here; the index's ids are checked in full once, when it is uploaded.
#include <napi.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../cuda/kernels/maxsim_plaid_params.h"
#include "../cuda/plaid_engine.h"
#include "../cuda/runtime.h"
#include "cuda_task.h"
#include "plaid_cuda_binding.h"
#include "token_set.h"

namespace {

using maxsim_binding::ArgError;
using maxsim_binding::Describe;
using maxsim_binding::JobTask;
using maxsim_binding::TaskChannel;
using maxsim_cuda::PlaidDeviceIndex;
using maxsim_cuda::PlaidEncoder;
using maxsim_cuda::Runtime;
using namespace plaid_binding;  // NOLINT: the shared helpers

// ---- plaidEncoder(device, { centroids, d, bits, cutoffs?, tables?, groups? }) -> Promise<encoder>

Napi::Value NewEncoder(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  Runtime* rt = maxsim_binding::ParseDevice(env, info[0]);
  if (!info[1].IsObject()) throw ArgError(env, "options", "an object { centroids, d, bits, ... }", Describe(info[1]));
  Napi::Object o = info[1].As<Napi::Object>();
  const int64_t d = Whole(env, o.Get("d"), "options.d", 1, PLAID_MAX_DIM);
  const int bits = static_cast<int>(Whole(env, o.Get("bits"), "options.bits", 2, 4));
  if (bits == 3) throw ArgError(env, "options.bits", "2 or 4", "3");
  auto c = F32(env, o.Get("centroids"), "options.centroids");
  if (c.ElementLength() == 0 || c.ElementLength() % d != 0)
    throw ArgError(env, "options.centroids", "a non-empty Float32Array of k * d values", std::to_string(c.ElementLength()) + " values");
  const int64_t k = static_cast<int64_t>(c.ElementLength()) / d;
  struct Args {
    std::vector<float> cent, cutoffs, tables, coarse;
    std::vector<int32_t> offsets, members;
    int64_t probe = 0, g = 0;
  };
  auto a = std::make_shared<Args>();
  a->cent.assign(c.Data(), c.Data() + c.ElementLength());
  if (!o.Get("cutoffs").IsUndefined()) {
    auto cut = F32(env, o.Get("cutoffs"), "options.cutoffs");
    auto tab = F32(env, o.Get("tables"), "options.tables");
    Need(env, cut.ElementLength(), d * ((1 << bits) - 1), "options.cutoffs");
    Need(env, tab.ElementLength(), d * 16, "options.tables");
    a->cutoffs.assign(cut.Data(), cut.Data() + cut.ElementLength());
    a->tables.assign(tab.Data(), tab.Data() + tab.ElementLength());
  }
  Napi::Value gv = o.Get("groups");
  if (gv.IsObject()) {
    Napi::Object g = gv.As<Napi::Object>();
    auto coarse = F32(env, g.Get("coarse"), "groups.coarse");
    auto off = I32(env, g.Get("offsets"), "groups.offsets");
    auto mem = I32(env, g.Get("members"), "groups.members");
    if (coarse.ElementLength() == 0 || coarse.ElementLength() % d != 0)
      throw ArgError(env, "groups.coarse", "a non-empty Float32Array of g * d values", std::to_string(coarse.ElementLength()) + " values");
    a->g = static_cast<int64_t>(coarse.ElementLength()) / d;
    Need(env, off.ElementLength(), a->g + 1, "groups.offsets");
    std::vector<double> od(off.Data(), off.Data() + off.ElementLength());
    CheckOffsets(env, od.data(), a->g, static_cast<double>(mem.ElementLength()), "groups.offsets");
    CheckIds(env, mem.Data(), mem.ElementLength(), k, "groups.members");
    if (mem.ElementLength() == 0) throw ArgError(env, "groups.members", "at least one member", "none");
    a->probe = Whole(env, g.Get("probe"), "groups.probe", 1, a->g);
    a->coarse.assign(coarse.Data(), coarse.Data() + coarse.ElementLength());
    a->offsets.assign(off.Data(), off.Data() + off.ElementLength());
    a->members.assign(mem.Data(), mem.Data() + mem.ElementLength());
  }
  auto task = std::make_unique<JobTask<std::shared_ptr<PlaidEncoder>>>(env, "CUDA plaid encoder failed: ");
  task->run = [rt, a, k, d, bits] {
    rt->EnsureReady();
    maxsim_cuda::PlaidGroupsHost g{a->coarse.data(), a->g, a->offsets.data(), a->members.data(), a->probe};
    return std::make_shared<PlaidEncoder>(*rt, a->cent.data(), k, d, a->g > 0 ? &g : nullptr,
                                          a->cutoffs.empty() ? nullptr : a->cutoffs.data(),
                                          a->tables.empty() ? nullptr : a->tables.data(), bits);
  };
  task->wrap = [rt](Napi::Env env, std::shared_ptr<PlaidEncoder>& e) { return Wrap(env, rt, e, &kEncoderTag); };
  return channel->Submit(env, rt, std::move(task));
}

// ---- plaidAssign(encoder, x: Float32Array [n * d]) -> Promise<{ ids, scores }>

Napi::Value Assign(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  auto s = Unwrap<PlaidEncoder>(env, info[0], &kEncoderTag, "encoder", "a CUDA plaid encoder");
  auto x = F32(env, info[1], "x");
  const int64_t d = s.engine->d();
  if (x.ElementLength() % d != 0)
    throw ArgError(env, "x", "a Float32Array of n * " + std::to_string(d) + " values", std::to_string(x.ElementLength()) + " values");
  const int64_t n = static_cast<int64_t>(x.ElementLength()) / d;
  Napi::Int32Array ids = Napi::Int32Array::New(env, static_cast<size_t>(n));
  Napi::Float32Array scores = Napi::Float32Array::New(env, static_cast<size_t>(n));
  Napi::Object result = Napi::Object::New(env);
  result.Set("ids", ids);
  result.Set("scores", scores);
  auto xs = std::make_shared<std::vector<float>>(x.Data(), x.Data() + x.ElementLength());
  auto ref = std::make_shared<Napi::ObjectReference>(Napi::Persistent(result));
  auto task = std::make_unique<JobTask<int>>(env, "CUDA plaid assign failed: ");
  int32_t* ip = ids.Data();
  float* sp = scores.Data();
  task->run = [s, xs, n, ip, sp] {
    s.rt->EnsureReady();
    s.engine->Assign(xs->data(), DType::Float32, n, ip, sp);
    return 0;
  };
  task->wrap = [ref](Napi::Env, int&) { return ref->Value(); };
  return channel->Submit(env, s.rt, std::move(task));
}

// ---- plaidEncode(encoder, docs, { first, cids, codes }) -> Promise<{ sqError, ms }>

Napi::Value Encode(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  auto s = Unwrap<PlaidEncoder>(env, info[0], &kEncoderTag, "encoder", "a CUDA plaid encoder");
  if (!s.engine->can_encode()) throw ArgError(env, "encoder", "an encoder made with cutoffs and tables", "an assign-only encoder");
  TokenSet docs = ParseTokenSet(env, info[1], "docs");
  if (docs.dtype == DType::Int8) throw ArgError(env, "docs.dtype", "'float32', 'float16' or 'bfloat16'", "'int8'");
  const int64_t d = s.engine->d();
  if (docs.dim != d) throw ArgError(env, "docs.dim", std::to_string(d) + " (the centroids')", std::to_string(docs.dim));
  if (!info[2].IsObject()) throw ArgError(env, "options", "an object { first, cids, codes }", Describe(info[2]));
  Napi::Object o = info[2].As<Napi::Object>();
  const int64_t first = Whole(env, o.Get("first"), "options.first", 0, int64_t(1) << 40);
  auto cids = I32(env, o.Get("cids"), "options.cids");
  auto codes = Typed<uint8_t>(env, o.Get("codes"), "options.codes", napi_uint8_array, "Uint8Array");
  int64_t n = 0;
  for (int64_t b = 0; b < docs.count; b++) n += docs.lengths[b];
  const int64_t padded = (first + n + 15) / 16 * 16;
  const int bits = s.engine->bits();
  if (static_cast<int64_t>(cids.ElementLength()) < padded || cids.ElementLength() % 16 != 0)
    throw ArgError(env, "options.cids", "an Int32Array of at least " + std::to_string(padded) + " entries (a multiple of 16)",
                   std::to_string(cids.ElementLength()) + " entries");
  if (static_cast<int64_t>(codes.ElementLength()) != static_cast<int64_t>(cids.ElementLength()) / 16 * d * 2 * bits)
    throw ArgError(env, "options.codes", "a Uint8Array of cids.length / 16 * d * 2 * bits bytes", std::to_string(codes.ElementLength()) + " bytes");
  Napi::Object result = Napi::Object::New(env);
  result.Set("cids", cids);
  result.Set("codes", codes);
  auto ref = std::make_shared<Napi::ObjectReference>(Napi::Persistent(result));
  int32_t* cp = cids.Data();
  uint8_t* kp = codes.Data();
  auto task = std::make_unique<JobTask<double>>(env, "CUDA plaid encode failed: ");
  task->run = [s, docs, first, cp, kp] {
    s.rt->EnsureReady();
    return s.engine->Encode(docs, first, cp, kp);
  };
  task->wrap = [ref, s](Napi::Env env, double& sq) {
    Napi::Object r = Napi::Object::New(env);
    r.Set("sqError", sq);
    r.Set("ms", s.engine->last_ms());
    ref->Reset();
    return r;
  };
  return channel->Submit(env, s.rt, std::move(task));
}

}  // namespace

Napi::Value PlaidIndexUpload(const Napi::CallbackInfo& info);
Napi::Value PlaidIndexSearch(const Napi::CallbackInfo& info);

void InitPlaidCuda(Napi::Env env, Napi::Object exports) {
  TaskChannel* channel = TaskChannel::Create(env, "maxsim.cuda.plaid");
  Napi::Value cuda = exports.Get("cuda");
  if (!cuda.IsObject()) throw Napi::Error::New(env, "InitPlaidCuda must run after InitCuda (exports.cuda is missing)");
  Napi::Object o = cuda.As<Napi::Object>();
  o.Set("plaidEncoder", Napi::Function::New(env, NewEncoder, "plaidEncoder", channel));
  o.Set("plaidAssign", Napi::Function::New(env, Assign, "plaidAssign", channel));
  o.Set("plaidEncode", Napi::Function::New(env, Encode, "plaidEncode", channel));
  o.Set("plaidIndex", Napi::Function::New(env, PlaidIndexUpload, "plaidIndex", channel));
  o.Set("plaidSearch", Napi::Function::New(env, PlaidIndexSearch, "plaidSearch", channel));
}
