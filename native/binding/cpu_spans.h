// A parsed JS token set (token_set.h) as the CPU engine's TokenSpans. int8 is refused here: the CPU
// scoring and training engines take float inputs only.
#pragma once
#include <napi.h>

#include <string>

#include "../cpu/engine.h"
#include "token_set.h"

inline maxsim_cpu::TokenSpans ToCpuSpans(Napi::Env env, const TokenSet& t, const std::string& name) {
  maxsim_cpu::TokenSpans s;
  switch (t.dtype) {
    case DType::Float32: s.dtype = maxsim_cpu::DocType::Float32; break;
    case DType::Float16: s.dtype = maxsim_cpu::DocType::Float16; break;
    case DType::BFloat16: s.dtype = maxsim_cpu::DocType::BFloat16; break;
    case DType::Int8:
      throw Napi::TypeError::New(env, "Expected float32, float16 or bfloat16 tokens for " + name +
                                          " but received int8 (the CPU engine takes float inputs)");
  }
  s.data = t.data;
  s.starts = t.starts;
  s.lengths = t.lengths;
  s.count = t.count;
  s.dim = t.dim;
  return s;
}
