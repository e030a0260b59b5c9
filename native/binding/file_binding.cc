// Node-API glue for reading corpus files: mapFile(path, offset, length) maps a byte range of a file
// into memory and returns it as an ArrayBuffer, so the CPU engine scores a corpus straight from the
// page cache with no copy. The mapping is private and copy-on-write: writes through the buffer never
// reach the file. It is unmapped when the ArrayBuffer is garbage-collected and no job still reads it
// (mapped_memory.h).
#include <fcntl.h>
#include <napi.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>

#include "crc32.h"
#include "mapped_memory.h"

namespace {

// The largest ArrayBuffer this Node.js makes over external memory (Node 20: 4 GiB, its Buffer limit).
// Asking for more fails inside Node-API after it has already run the finalizer, and node-addon-api
// then frees the finalizer's data again (a double free that aborts the process), so mapFile refuses
// such lengths before mapping. src/native.ts sets the running Node's value (buffer.constants.MAX_LENGTH).
double g_max_array_buffer = 4294967296.0;

int64_t GetOffset(Napi::Env env, const Napi::Value& v, const char* name) {
  const double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : NAN;
  if (!(d >= 0 && d <= 9007199254740991.0 && d == std::floor(d))) {
    throw Napi::TypeError::New(env, std::string("Expected a non-negative integer for ") + name);
  }
  return static_cast<int64_t>(d);
}

Napi::Value MapFile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) throw Napi::TypeError::New(env, "Expected a file path (string) for path");
  const std::string path = info[0].As<Napi::String>().Utf8Value();
  const int64_t offset = GetOffset(env, info[1], "offset");
  const int64_t length = GetOffset(env, info[2], "length");
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Napi::Error::New(env, "cannot open " + path + ": " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    throw Napi::Error::New(env, "cannot stat " + path + ": " + std::strerror(err));
  }
  if (offset + length > st.st_size) {
    close(fd);
    throw Napi::RangeError::New(env, path + ": bytes [" + std::to_string(offset) + ", " + std::to_string(offset + length) +
                                         ") lie past the end of the file (" + std::to_string(st.st_size) + " bytes)");
  }
  if (length == 0) {
    close(fd);
    return Napi::ArrayBuffer::New(env, 0);
  }
  if (static_cast<double>(length) > g_max_array_buffer) {
    close(fd);
    throw Napi::RangeError::New(env, path + ": cannot map bytes [" + std::to_string(offset) + ", " +
                                         std::to_string(offset + length) + ") (" + std::to_string(length) +
                                         " bytes) as one buffer: this Node.js holds at most " +
                                         std::to_string(static_cast<int64_t>(g_max_array_buffer)) +
                                         " bytes in one ArrayBuffer");
  }
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t aligned = offset - offset % page;
  const size_t span = static_cast<size_t>(length + (offset - aligned));
  void* base = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, aligned);
  const int err = errno;
  close(fd);  // the mapping keeps the file referenced
  if (base == MAP_FAILED) throw Napi::Error::New(env, "cannot map " + path + ": " + std::strerror(err));
  madvise(base, span, MADV_WILLNEED);  // start reading a cold file ahead of the scan
  // the buffer's share; the finalizer drops it (jobs reading the memory hold their own)
  auto* share = new std::shared_ptr<MappedMemory>(AdoptMapping(base, span));
  return Napi::ArrayBuffer::New(
      env, static_cast<char*>(base) + (offset - aligned), static_cast<size_t>(length),
      [](Napi::Env, void*, std::shared_ptr<MappedMemory>* m) { delete m; }, share);
}

// setMaxArrayBuffer(bytes): the running Node's largest ArrayBuffer (see g_max_array_buffer).
Napi::Value SetMaxArrayBuffer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int64_t bytes = GetOffset(env, info[0], "bytes");
  if (bytes < 1) throw Napi::TypeError::New(env, "Expected a positive integer for bytes");
  g_max_array_buffer = static_cast<double>(bytes);
  return env.Undefined();
}

Napi::Value Crc32(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
    throw Napi::TypeError::New(env, "Expected a Uint8Array for bytes");
  const Napi::Uint8Array bytes = info[0].As<Napi::Uint8Array>();
  const double init = info[1].IsNumber() ? info[1].As<Napi::Number>().DoubleValue() : 0;
  if (!(init >= 0 && init <= 4294967295.0 && init == std::floor(init)))
    throw Napi::TypeError::New(env, "Expected an unsigned 32-bit integer for crc");
  const uint32_t crc = maxsim_crc::Crc32(static_cast<uint32_t>(init), bytes.Data(), bytes.ByteLength());
  return Napi::Number::New(env, crc);
}

}  // namespace

void InitFile(Napi::Env env, Napi::Object exports) {
  Napi::Object file = Napi::Object::New(env);
  file.Set("mapFile", Napi::Function::New(env, MapFile, "mapFile"));
  file.Set("setMaxArrayBuffer", Napi::Function::New(env, SetMaxArrayBuffer, "setMaxArrayBuffer"));
  file.Set("crc32", Napi::Function::New(env, Crc32, "crc32"));
  exports.Set("file", file);
}
