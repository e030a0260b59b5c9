// The maxsim native addon: one module exporting `cpu` (the SIMD engine) and `cuda` (the GPU engine,
// which loads libcuda at run time and reports why when it cannot).
#include <napi.h>

void InitCpu(Napi::Env env, Napi::Object exports);
void InitInt8(Napi::Env env, Napi::Object exports);
void InitCuda(Napi::Env env, Napi::Object exports);
void InitCudaTrain(Napi::Env env, Napi::Object exports);
void InitCudaChamfer(Napi::Env env, Napi::Object exports);
void InitTrain(Napi::Env env, Napi::Object exports);
void InitFile(Napi::Env env, Napi::Object exports);
void InitChamfer(Napi::Env env, Napi::Object exports);
void InitCudaStream(Napi::Env env, Napi::Object exports);
void InitResidual(Napi::Env env, Napi::Object exports);
void InitCodec(Napi::Env env, Napi::Object exports);
void InitPlaidCuda(Napi::Env env, Napi::Object exports);

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
  InitCpu(env, exports);
  InitInt8(env, exports);  // adds maxsimInt8Sync / maxsimInt8Async / int8Isas to exports.cpu
  InitCuda(env, exports);
  InitCudaTrain(env, exports);  // adds trainForward / trainBackward to exports.cuda
  InitCudaChamfer(env, exports);  // adds chamferForward / chamferBackward to exports.cuda
  InitCudaStream(env, exports);  // adds streamScan (out-of-core corpus search) to exports.cuda
  InitPlaidCuda(env, exports);  // adds plaidEncoder / plaidEncode / plaidIndex / plaidSearch to exports.cuda
  InitTrain(env, exports);
  InitFile(env, exports);  // exports.file.mapFile: corpus files scored from the page cache
  InitChamfer(env, exports);  // exports.chamfer: nearest neighbours and Chamfer distance on the CPU
  InitResidual(env, exports);  // exports.residual: the compressed index's codec and search stages
  InitCodec(env, exports);  // exports.codec: the service's base64 / float16 request codecs
  exports.Set("abiVersion", 1);
  return exports;
}

NODE_API_MODULE(maxsim_native, Init)
