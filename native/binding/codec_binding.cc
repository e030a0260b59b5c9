// Node-API glue for the service's request codecs (native/cpu/codec.h): exports.codec.
//   firstNonFinite(values: Float32Array | Uint16Array, bf16: boolean) -> index or -1
//   maxAbs(values: Float32Array) -> the largest |value|, NaNs ignored (0 for none)
//   decode16(bits: Uint16Array, bf16: boolean, out: Float32Array, at: number) -> out[at ...] filled
// TypeScript checks shapes and names fields in its errors; these refuse wrong argument types only.
#include <napi.h>

#include <cmath>
#include <cstring>
#include <string>

#include "../cpu/codec.h"

namespace {

Napi::TypedArray TypedArg(const Napi::CallbackInfo& info, size_t i, const char* name, napi_typedarray_type type,
                          const char* expected) {
  if (!info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != type)
    throw Napi::TypeError::New(info.Env(), std::string("Expected ") + expected + " for " + name);
  return info[i].As<Napi::TypedArray>();
}

template <typename T>
T* DataOf(const Napi::TypedArray& a) {
  return reinterpret_cast<T*>(static_cast<uint8_t*>(a.ArrayBuffer().Data()) + a.ByteOffset());
}

Napi::Value FirstNonFinite(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsTypedArray()) throw Napi::TypeError::New(env, "Expected a Float32Array or Uint16Array for values");
  const Napi::TypedArray a = info[0].As<Napi::TypedArray>();
  const bool bf16 = info[1].ToBoolean().Value();
  if (a.TypedArrayType() == napi_float32_array)
    return Napi::Number::New(env, static_cast<double>(maxsim_codec::FirstNonFinite32(DataOf<float>(a), a.ElementLength())));
  if (a.TypedArrayType() == napi_uint16_array)
    return Napi::Number::New(
        env, static_cast<double>(maxsim_codec::FirstNonFinite16(DataOf<uint16_t>(a), a.ElementLength(), bf16)));
  throw Napi::TypeError::New(env, "Expected a Float32Array or Uint16Array for values");
}

Napi::Value MaxAbs(const Napi::CallbackInfo& info) {
  const Napi::TypedArray a = TypedArg(info, 0, "values", napi_float32_array, "a Float32Array");
  return Napi::Number::New(info.Env(), maxsim_codec::MaxAbs32(DataOf<float>(a), a.ElementLength()));
}

Napi::Value Decode16(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Napi::TypedArray src = TypedArg(info, 0, "bits", napi_uint16_array, "a Uint16Array");
  const bool bf16 = info[1].ToBoolean().Value();
  const Napi::TypedArray dst = TypedArg(info, 2, "out", napi_float32_array, "a Float32Array");
  const double at = info[3].IsNumber() ? info[3].As<Napi::Number>().DoubleValue() : -1;
  const size_t n = src.ElementLength(), room = dst.ElementLength();
  // bounded before the cast (a double beyond size_t would not convert)
  if (!(at >= 0 && at <= static_cast<double>(room) && at == std::floor(at)) || static_cast<size_t>(at) + n > room)
    throw Napi::RangeError::New(env, "Expected an integer at in [0, out.length - bits.length] for at");
  maxsim_codec::Decode16(DataOf<uint16_t>(src), n, bf16, DataOf<float>(dst) + static_cast<size_t>(at));
  return env.Undefined();
}

}  // namespace

void InitCodec(Napi::Env env, Napi::Object exports) {
  Napi::Object codec = Napi::Object::New(env);
  codec.Set("firstNonFinite", Napi::Function::New(env, FirstNonFinite, "firstNonFinite"));
  codec.Set("maxAbs", Napi::Function::New(env, MaxAbs, "maxAbs"));
  codec.Set("decode16", Napi::Function::New(env, Decode16, "decode16"));
  exports.Set("codec", codec);
}
