// Helpers shared by the CUDA plaid bindings (plaid_cuda_binding.cc, plaid_cuda_index_binding.cc).
#pragma once
#include <napi.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "../cuda/runtime.h"
#include "cuda_task.h"

namespace plaid_binding {

using maxsim_binding::ArgError;
using maxsim_binding::Describe;
using maxsim_cuda::Runtime;

template <typename E>
struct Session {
  Runtime* rt = nullptr;
  std::shared_ptr<E> engine;
};
inline constexpr napi_type_tag kEncoderTag = {0x6d617873696d506cull, 0x6169644564636f64ull};
inline constexpr napi_type_tag kIndexTag = {0x6d617873696d506cull, 0x616964496e646578ull};

template <typename E>
inline Napi::Value Wrap(Napi::Env env, Runtime* rt, std::shared_ptr<E> e, const napi_type_tag* tag) {
  auto ext = Napi::External<Session<E>>::New(env, new Session<E>{rt, std::move(e)},
                                              [](Napi::Env, Session<E>* s) { delete s; });
  ext.TypeTag(tag);
  return ext;
}

template <typename E>
Session<E> Unwrap(Napi::Env env, const Napi::Value& v, const napi_type_tag* tag, const char* name, const char* what) {
  if (!v.IsExternal() || !v.As<Napi::External<Session<E>>>().CheckTypeTag(tag))
    throw ArgError(env, name, what, Describe(v));
  return *v.As<Napi::External<Session<E>>>().Data();
}

template <typename T>
inline Napi::TypedArrayOf<T> Typed(Napi::Env env, Napi::Value v, const std::string& name, napi_typedarray_type type,
                            const char* type_name) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != type)
    throw ArgError(env, name, std::string("a ") + type_name, Describe(v));
  return v.As<Napi::TypedArrayOf<T>>();
}
inline Napi::Float32Array F32(Napi::Env env, Napi::Value v, const std::string& n) {
  return Typed<float>(env, v, n, napi_float32_array, "Float32Array");
}
inline Napi::Int32Array I32(Napi::Env env, Napi::Value v, const std::string& n) {
  return Typed<int32_t>(env, v, n, napi_int32_array, "Int32Array");
}
inline Napi::Float64Array F64(Napi::Env env, Napi::Value v, const std::string& n) {
  return Typed<double>(env, v, n, napi_float64_array, "Float64Array");
}

inline int64_t Whole(Napi::Env env, Napi::Value v, const std::string& name, int64_t lo, int64_t hi) {
  return maxsim_binding::GetInteger(env, v, name, lo, hi);
}

inline void Need(Napi::Env env, size_t got, int64_t want, const std::string& name) {
  if (static_cast<int64_t>(got) != want)
    throw Napi::RangeError::New(env, "Expected " + std::to_string(want) + " elements for " + name + " but received " +
                                         std::to_string(got));
}

// Offsets: n + 1 ascending integers from 0 to `end`.
inline void CheckOffsets(Napi::Env env, const double* o, int64_t n, double end, const std::string& name) {
  if (o[0] != 0) throw Napi::RangeError::New(env, "Expected 0 for " + name + "[0] but received " + std::to_string(o[0]));
  for (int64_t i = 0; i < n; i++)
    if (!(o[i + 1] >= o[i]) || std::floor(o[i + 1]) != o[i + 1])
      throw Napi::RangeError::New(env, "Expected an integer >= " + std::to_string(o[i]) + " for " + name + "[" +
                                           std::to_string(i + 1) + "] but received " + std::to_string(o[i + 1]));
  if (o[n] != end)
    throw Napi::RangeError::New(env, "Expected " + std::to_string(end) + " for " + name + "[" + std::to_string(n) +
                                         "] but received " + std::to_string(o[n]));
}

inline void CheckIds(Napi::Env env, const int32_t* v, int64_t n, int64_t hi, const std::string& name) {
  for (int64_t i = 0; i < n; i++)
    if (v[i] < 0 || v[i] >= hi)
      throw Napi::RangeError::New(env, "Expected an id in [0, " + std::to_string(hi) + ") for " + name + "[" +
                                           std::to_string(i) + "] but received " + std::to_string(v[i]));
}

}  // namespace plaid_binding
