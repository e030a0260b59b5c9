// Unpacks a JS TokenBatch ({ data, dtype, dim, count, starts, lengths, scales? }, see src/tensor.ts)
// into the Node-free TokenSet the engines read (native/common/tokens.h). TypeScript validates first;
// this re-checks every span against the buffer so that no input, however built, can make native code
// read out of bounds.
//
// A parsed set is pinned for the life of the job that holds it (issue 21): the spans (starts, lengths)
// are copied before they are checked, so JS writes to them after the call cannot change what was
// checked, and the memory of data and scales is held by a share, so reassigning, garbage-collecting
// or detaching (transferring) the JS arrays cannot free it under a running job. Writes to the values
// of data while a job runs remain visible to it (no copy of the tokens is made), except in a
// MAXSIM_NO_V8 build for memory the addon did not map (below).
#pragma once
#include <napi.h>
#ifndef MAXSIM_NO_V8
#include <v8.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "../common/maxsim_constants.h"
#include "../common/tokens.h"
#include "mapped_memory.h"

// The bytes of a JS typed array and a share in their memory, which stays valid until the last share
// goes. Memory the addon mapped (a corpus file) is shared through its mapping (mapped_memory.h).
// Any other memory is shared through V8's BackingStore: a detached (transferred) or collected
// ArrayBuffer leaves it valid, and SharedArrayBuffer-backed arrays pin the same way; Node-API has no
// such share, so this takes the V8 handle behind the napi_value (the same pointer by Node's
// definition of napi_value). MAXSIM_NO_V8 (the musl packages, built with Zig's libc++: V8's
// std::shared_ptr cannot cross from Node's libstdc++, scripts/pack-all.mjs) copies that memory
// instead, once per parse.
struct PinnedBytes {
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  std::shared_ptr<const void> store;
};

inline PinnedBytes PinTypedArray(Napi::TypedArray array) {
  PinnedBytes p;
  p.bytes = array.ByteLength();
  if (p.bytes == 0) return p;
  // the C call, not array.ArrayBuffer(): it serves SharedArrayBuffer-backed arrays too
  void* bytes = nullptr;
  if (napi_get_typedarray_info(array.Env(), array, nullptr, nullptr, &bytes, nullptr, nullptr) != napi_ok)
    throw Napi::TypeError::New(array.Env(), "cannot read the memory of a typed array");
  const uint8_t* at = static_cast<const uint8_t*>(bytes);
  if (std::shared_ptr<MappedMemory> m = FindMapping(at, p.bytes)) {
    p.store = std::move(m);
    p.data = at;
    return p;
  }
#ifdef MAXSIM_NO_V8
  std::shared_ptr<uint8_t> copy(new (std::nothrow) uint8_t[p.bytes], std::default_delete<uint8_t[]>());
  if (!copy)
    throw Napi::RangeError::New(array.Env(), "cannot copy a typed array of " + std::to_string(p.bytes) +
                                                 " bytes (this build copies token data it did not map)");
  std::memcpy(copy.get(), at, p.bytes);
  p.data = copy.get();
  p.store = std::move(copy);
#else
  napi_value raw = array;
  v8::Local<v8::Value> local;
  static_assert(sizeof(local) == sizeof(raw), "napi_value is a v8::Local");
  std::memcpy(static_cast<void*>(&local), &raw, sizeof(raw));
  v8::Local<v8::ArrayBufferView> view = local.As<v8::ArrayBufferView>();
  std::shared_ptr<v8::BackingStore> store = view->Buffer()->GetBackingStore();
  p.data = static_cast<const uint8_t*>(store->Data()) + view->ByteOffset();
  p.store = std::move(store);
#endif
  return p;
}

// What a parsed set owns (TokenSet::owner): private copies of its spans and shares in the memory of
// data and scales.
struct TokenSetOwner {
  std::vector<double> starts;
  std::vector<int32_t> lengths;
  PinnedBytes data, scales;
};

// Thrown (as a JS TypeError/RangeError) when the object is not a well-formed token set.
inline Napi::Error TokenSetError(Napi::Env env, const std::string& name, const std::string& expected,
                                 const std::string& received) {
  return Napi::TypeError::New(env, "Expected " + expected + " for " + name + " but received " + received);
}

inline DType ParseDType(Napi::Env env, const std::string& name, const Napi::Value& v) {
  std::string s = v.IsString() ? v.As<Napi::String>().Utf8Value() : std::string("?");
  if (s == "float32") return DType::Float32;
  if (s == "float16") return DType::Float16;
  if (s == "bfloat16") return DType::BFloat16;
  if (s == "int8") return DType::Int8;
  throw TokenSetError(env, name + ".dtype", "'float32' | 'float16' | 'bfloat16' | 'int8'", s);
}

template <typename T>
inline Napi::TypedArrayOf<T> GetTyped(Napi::Env env, Napi::Object obj, const char* key, const std::string& name,
                                      napi_typedarray_type type, const char* typeName) {
  Napi::Value v = obj.Get(key);
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != type) {
    throw TokenSetError(env, name + "." + key, std::string("a ") + typeName, "another value");
  }
  return v.As<Napi::TypedArrayOf<T>>();
}

inline TokenSet ParseTokenSet(Napi::Env env, Napi::Value value, const std::string& name) {
  if (!value.IsObject()) throw TokenSetError(env, name, "a TokenBatch object", "a non-object");
  Napi::Object obj = value.As<Napi::Object>();
  TokenSet t;
  t.dtype = ParseDType(env, name, obj.Get("dtype"));
  Napi::Value dataV = obj.Get("data");
  if (!dataV.IsTypedArray()) throw TokenSetError(env, name + ".data", "a typed array", "another value");
  Napi::TypedArray data = dataV.As<Napi::TypedArray>();
  napi_typedarray_type want = t.dtype == DType::Float32 ? napi_float32_array
                              : t.dtype == DType::Int8  ? napi_int8_array
                                                        : napi_uint16_array;
  if (data.TypedArrayType() != want) throw TokenSetError(env, name + ".data", "a typed array matching dtype", "a mismatch");
  auto owner = std::make_shared<TokenSetOwner>();
  owner->data = PinTypedArray(data);
  t.data = owner->data.data;
  t.elements = static_cast<int64_t>(owner->data.bytes / DTypeSize(t.dtype));
  double dim = obj.Get("dim").ToNumber().DoubleValue();
  double count = obj.Get("count").ToNumber().DoubleValue();
  if (!(dim >= 1 && dim <= MAXSIM_MAX_DIM && dim == static_cast<int64_t>(dim))) throw TokenSetError(env, name + ".dim", "an integer in [1, " + std::to_string(MAXSIM_MAX_DIM) + "]", std::to_string(dim));
  if (!(count >= 0 && count < 2147483647.0 && count == static_cast<int64_t>(count))) throw TokenSetError(env, name + ".count", "an integer in [0, 2^31)", std::to_string(count));
  t.dim = static_cast<int64_t>(dim);
  t.count = static_cast<int64_t>(count);
  auto starts = GetTyped<double>(env, obj, "starts", name, napi_float64_array, "Float64Array");
  auto lengths = GetTyped<int32_t>(env, obj, "lengths", name, napi_int32_array, "Int32Array");
  if (static_cast<int64_t>(starts.ElementLength()) < t.count || static_cast<int64_t>(lengths.ElementLength()) < t.count) {
    throw TokenSetError(env, name + ".starts/lengths", "count entries", "fewer");
  }
  // Copies first, then the checks on the copies: what is checked is what the job reads.
  owner->starts.assign(starts.Data(), starts.Data() + t.count);
  owner->lengths.assign(lengths.Data(), lengths.Data() + t.count);
  t.starts = owner->starts.data();
  t.lengths = owner->lengths.data();
  const int64_t tokens = t.elements / t.dim;
  for (int64_t i = 0; i < t.count; i++) {
    const double s = t.starts[i];
    const int32_t l = t.lengths[i];
    if (!(s >= 0 && s <= 9007199254740992.0 && s == static_cast<double>(static_cast<int64_t>(s))) || l < 0 ||
        static_cast<int64_t>(s) + l > tokens) {
      throw Napi::RangeError::New(env, "Expected item " + std::to_string(i) + " of " + name +
                                           " to lie inside its buffer of " + std::to_string(tokens) +
                                           " tokens but received start " + std::to_string(s) +
                                           ", length " + std::to_string(l));
    }
    if (l > t.max_length) t.max_length = l;
  }
  if (t.dtype == DType::Int8) {
    auto scales = GetTyped<float>(env, obj, "scales", name, napi_float32_array, "Float32Array of per-token scales");
    owner->scales = PinTypedArray(scales);
    if (static_cast<int64_t>(owner->scales.bytes / sizeof(float)) < tokens) throw TokenSetError(env, name + ".scales", "one scale per token", "fewer");
    t.scales = reinterpret_cast<const float*>(owner->scales.data);
  }
  t.owner = std::move(owner);
  return t;
}

// Training gradients need one owner per row: a RangeError when two items of t share a token.
inline void CheckDisjoint(Napi::Env env, const TokenSet& t, const std::string& name) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (int64_t i = 0; i < t.count; i++) {
    if (t.lengths[i] > 0) spans.emplace_back(static_cast<int64_t>(t.starts[i]), t.lengths[i]);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t k = 1; k < spans.size(); k++) {
    if (spans[k - 1].first + spans[k - 1].second > spans[k].first) {
      throw Napi::RangeError::New(env, "Expected items of " + name + " that share no tokens but received an overlap at token " +
                                           std::to_string(spans[k].first));
    }
  }
}
