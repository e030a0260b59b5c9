#include "runtime.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>

#include "kernels/maxsim_cast_params.h"
#include "kernels/maxsim_params.h"

namespace maxsim_cuda {
namespace {

constexpr uint32_t kQuietNaN = 0x7fc00000u;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Token sets

uint64_t DeviceTokens::bytes() const {
  return static_cast<uint64_t>(capacity_tokens) * static_cast<uint64_t>(dim) * DTypeSize(dtype) +
         (dtype == DType::Int8 ? static_cast<uint64_t>(capacity_tokens) * sizeof(float) : 0) +
         static_cast<uint64_t>(capacity_items) * (sizeof(int64_t) + sizeof(int32_t));
}

DeviceTokens::~DeviceTokens() {
  if (parent) {  // a view owns only its starts and lengths
    data = scales = 0;
  }
  if (!runtime || (!data && !starts && !lengths && !scales)) return;
  Runtime* rt = runtime;
  // Free(0) is a no-op (float sets have no scales block)
  rt->Post([rt, b0 = data, b1 = starts, b2 = lengths, b3 = scales] {
    rt->allocator().Free(b0);
    rt->allocator().Free(b1);
    rt->allocator().Free(b2);
    rt->allocator().Free(b3);
  });
}

// ---------------------------------------------------------------------------------------------
// Runtime

Runtime* Runtime::Get(int index) {
  static std::mutex m;
  static std::map<int, Runtime*> runtimes;  // never destroyed: they live as long as the process
  const Driver& d = Api();
  if (index < 0 || index >= d.device_count) {
    throw std::invalid_argument("Expected a CUDA device index in [0, " + std::to_string(d.device_count) +
                                ") for device but received " + std::to_string(index));
  }
  std::lock_guard<std::mutex> lock(m);
  auto it = runtimes.find(index);
  if (it != runtimes.end()) return it->second;
  Runtime* rt = new Runtime(QueryDeviceProps(index));
  runtimes[index] = rt;
  return rt;
}

Runtime::Runtime(DeviceProps props) : props_(std::move(props)) {}

void Runtime::EnsureReady() {
  EnsureUsable();
  if (!setup_done_) {
    setup_done_ = true;
    try {
      Setup();
    } catch (const CudaError& e) {
      setup_error_ = std::string("CUDA setup of device ") + std::to_string(props_.index) + " failed: " + e.what();
      setup_code_ = e.code();
    }
  }
  if (!setup_error_.empty()) throw CudaError(setup_error_, setup_code_);
}

void Runtime::Setup() {
  const Driver& d = Api();
  Check(d.cuDeviceGet(&device_, props_.index), "cuDeviceGet");
  Check(d.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
  Check(d.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
  Check(d.cuStreamCreate(&stream_, cu::CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  staging_.Init();
  modules_.Load();
}

MemoryInfo Runtime::Memory() {
  MemoryInfo m;
  m.alloc = allocator_.stats();
  size_t free_b = 0, total_b = 0;
  Check(Api().cuMemGetInfo(&free_b, &total_b), "cuMemGetInfo");
  m.free = free_b;
  m.total = total_b;
  return m;
}

void Runtime::ValidateLaunch(const LaunchSpec& spec) {
  KernelFunction& f = modules_.Function(spec.kernel);
  // A TMA kernel launched without its tensor map would read through garbage (an illegal instruction
  // that loses the context), so the launch must agree with the kernel's parameters where the driver
  // can tell.
  const bool has_box = spec.tma_box[0] > 0;
  if (f.takes_tensor_map == 1 && !has_box) {
    throw std::invalid_argument("Expected launch.tmaBox for kernel " + spec.kernel +
                                " (it reads the documents through a TMA tensor map) but received none");
  }
  if (f.takes_tensor_map == 0 && has_box) {
    throw std::invalid_argument("Expected no launch.tmaBox for kernel " + spec.kernel + " (it takes no tensor map) but received [" +
                                std::to_string(spec.tma_box[0]) + ", " + std::to_string(spec.tma_box[1]) + "]");
  }
  const char* axis[3] = {"x", "y", "z"};
  uint64_t threads = 1;
  for (int i = 0; i < 3; i++) {
    if (spec.grid[i] < 1 || spec.grid[i] > static_cast<unsigned>(props_.max_grid[i])) {
      throw std::invalid_argument("Expected launch.grid." + std::string(axis[i]) + " in [1, " +
                                  std::to_string(props_.max_grid[i]) + "] but received " + std::to_string(spec.grid[i]));
    }
    if (spec.block[i] < 1 || spec.block[i] > static_cast<unsigned>(props_.max_block[i])) {
      throw std::invalid_argument("Expected launch.block." + std::string(axis[i]) + " in [1, " +
                                  std::to_string(props_.max_block[i]) + "] but received " + std::to_string(spec.block[i]));
    }
    threads *= spec.block[i];
  }
  if (threads > static_cast<uint64_t>(f.max_threads)) {
    throw std::invalid_argument("Expected at most " + std::to_string(f.max_threads) + " threads per block for kernel " +
                                spec.kernel + " but received launch.block of " + std::to_string(threads) + " threads");
  }
  const uint64_t smem_total = static_cast<uint64_t>(spec.smem) + static_cast<uint64_t>(f.static_smem);
  if (smem_total > static_cast<uint64_t>(props_.smem_optin)) {
    throw std::invalid_argument("Expected launch.smem <= " + std::to_string(props_.smem_optin - f.static_smem) +
                                " bytes (the device's opt-in shared memory minus the kernel's " +
                                std::to_string(f.static_smem) + " static bytes) but received " + std::to_string(spec.smem));
  }
  if (static_cast<int>(spec.smem) > f.dynamic_smem_limit) {
    Check(Api().cuFuncSetAttribute(f.fn, cu::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(spec.smem)),
          "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    f.dynamic_smem_limit = static_cast<int>(spec.smem);
  }
}

std::shared_ptr<DeviceTokens> Runtime::AllocTokens(DType dtype, int64_t dim, int64_t capacity_tokens, int64_t capacity_items) {
  const int64_t row = dim * DTypeSize(dtype);
  if (capacity_tokens < 0 || capacity_items < 0 || capacity_tokens > (int64_t(1) << 50) / row) {
    throw std::invalid_argument("Expected a token set of at most 2^50 bytes but received " + std::to_string(capacity_tokens) +
                                " tokens of " + std::to_string(row) + " bytes");
  }
  auto t = std::make_shared<DeviceTokens>();
  t->runtime = this;
  t->dtype = dtype;
  t->dim = dim;
  t->capacity_tokens = capacity_tokens;
  t->capacity_items = capacity_items;
  // At least one element each, so that every pointer a kernel receives is a valid allocation.
  t->data = allocator_.Alloc(static_cast<uint64_t>(std::max<int64_t>(capacity_tokens, 1)) * dim * DTypeSize(dtype));
  t->starts = allocator_.Alloc(static_cast<uint64_t>(std::max<int64_t>(capacity_items, 1)) * sizeof(int64_t));
  t->lengths = allocator_.Alloc(static_cast<uint64_t>(std::max<int64_t>(capacity_items, 1)) * sizeof(int32_t));
  if (dtype == DType::Int8) t->scales = allocator_.Alloc(static_cast<uint64_t>(std::max<int64_t>(capacity_tokens, 1)) * sizeof(float));
  return t;
}

void Runtime::Append(DeviceTokens& dst, const TokenSet& src, bool synchronize) {
  if (dst.parent) throw std::invalid_argument("Expected a corpus made by upload() or alloc() to append to but received a view (select())");
  if (dst.e4m3) {
    throw std::invalid_argument("Expected a float or int8 token set to append to but received an fp8 one (fp8 sets are made "
                                "whole by quantize('fp8'))");
  }
  if (src.dtype != dst.dtype || src.dim != dst.dim) {
    throw std::invalid_argument(std::string("Expected tokens of dtype ") + DTypeName(dst.dtype) + " and dim " +
                                std::to_string(dst.dim) + " for the appended batch but received dtype " +
                                DTypeName(src.dtype) + " and dim " + std::to_string(src.dim));
  }
  int64_t tokens = 0;
  for (int64_t i = 0; i < src.count; i++) tokens += src.lengths[i];
  if (dst.tokens + tokens > dst.capacity_tokens || dst.count + src.count > dst.capacity_items) {
    throw std::invalid_argument("Expected a batch that fits the device token set (room for " +
                                std::to_string(dst.capacity_tokens - dst.tokens) + " tokens and " +
                                std::to_string(dst.capacity_items - dst.count) + " items) but received " +
                                std::to_string(tokens) + " tokens in " + std::to_string(src.count) + " items");
  }
  const uint64_t row = static_cast<uint64_t>(src.dim) * DTypeSize(src.dtype);
  const auto* base = static_cast<const uint8_t*>(src.data);
  // Items are packed in order on the device (padding and unused tokens are not copied).
  std::vector<int64_t> starts(static_cast<size_t>(src.count));
  int32_t max_length = dst.max_length;
  if (dst.dtype == DType::Int8 && !src.scales) {
    throw std::invalid_argument("Expected per-token scales for the appended int8 batch but received none");
  }
  // One writer for tokens, scales, starts and lengths (Retarget), so a small append fills one buffer.
  StagedWriter w(staging_, stream_, dst.data + static_cast<uint64_t>(dst.tokens) * row);
  int64_t at = dst.tokens;
  for (int64_t i = 0; i < src.count; i++) {
    const int64_t start = static_cast<int64_t>(src.starts[i]);
    const int32_t len = src.lengths[i];
    starts[i] = at;
    at += len;
    max_length = std::max(max_length, len);
    w.Write(base + static_cast<uint64_t>(start) * row, static_cast<uint64_t>(len) * row);
  }
  if (dst.dtype == DType::Int8) {
    // the scales of the items, packed exactly like their tokens
    w.Retarget(dst.scales + static_cast<uint64_t>(dst.tokens) * sizeof(float));
    for (int64_t i = 0; i < src.count; i++) {
      const int64_t start = static_cast<int64_t>(src.starts[i]);
      w.Write(src.scales + start, static_cast<uint64_t>(src.lengths[i]) * sizeof(float));
    }
  }
  if (src.count > 0) {
    w.Retarget(dst.starts + static_cast<uint64_t>(dst.count) * sizeof(int64_t));
    w.Write(starts.data(), starts.size() * sizeof(int64_t));
    w.Retarget(dst.lengths + static_cast<uint64_t>(dst.count) * sizeof(int32_t));
    w.Write(src.lengths, static_cast<uint64_t>(src.count) * sizeof(int32_t));
  }
  w.Finish();
  // Every host byte went through pinned staging above, so the JS arrays are free once this returns;
  // the synchronize keeps the rule that a job leaves the stream idle (runtime.h).
  if (synchronize) Synchronize();
  if (dst.HostSpans()) {
    dst.host_starts.insert(dst.host_starts.end(), starts.begin(), starts.end());
    dst.host_lengths.insert(dst.host_lengths.end(), src.lengths, src.lengths + src.count);
  }
  dst.tokens += tokens;
  dst.count += src.count;
  dst.max_length = max_length;
}

void Runtime::FillNaN(cu::CUdeviceptr ptr, uint64_t count) {
  if (count > 0) Check(Api().cuMemsetD32Async(ptr, kQuietNaN, count, stream_), "cuMemsetD32Async");
}

void Runtime::CastFromF32(cu::CUdeviceptr src, cu::CUdeviceptr dst, DType to, uint64_t count) {
  if (to != DType::Float16 && to != DType::BFloat16) {
    throw std::invalid_argument(std::string("Expected float16 or bfloat16 as the cast target but received ") + DTypeName(to));
  }
  if (count == 0) return;
  MaxsimCastParams p;
  p.src = reinterpret_cast<const float*>(static_cast<uintptr_t>(src));
  p.dst = reinterpret_cast<void*>(static_cast<uintptr_t>(dst));
  p.count = count;
  LaunchSpec spec;
  spec.kernel = to == DType::BFloat16 ? "maxsim_cast_f32_bf16" : "maxsim_cast_f32_f16";
  spec.grid[0] = static_cast<unsigned>(std::min<uint64_t>((count + 255) / 256, static_cast<uint64_t>(props_.sms) * 16));
  spec.block[0] = 256;
  LaunchWithParams(spec, &p);
}

cu::CUtensorMap Runtime::TokensTensorMap(const DeviceTokens& t, const unsigned box[2]) {
  const Driver& api = Api();
  if (!api.cuTensorMapEncodeTiled) {
    throw CudaError("the NVIDIA driver does not provide cuTensorMapEncodeTiled (CUDA 12.0+), which the TMA variants need",
                    "CUDA_ERROR_NOT_SUPPORTED");
  }
  int type;
  switch (t.dtype) {
    case DType::Float16: type = cu::CU_TENSOR_MAP_DATA_TYPE_FLOAT16; break;
    case DType::BFloat16: type = cu::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; break;
    case DType::Int8: type = cu::CU_TENSOR_MAP_DATA_TYPE_UINT8; break;  // int8 and e4m3 codes: bytes
    default: throw std::invalid_argument(std::string("Expected float16, bfloat16 or 8-bit tokens for a TMA variant but received ") + DTypeName(t.dtype));
  }
  // TMA coordinates are 32-bit: token rows past 2^31 cannot be addressed (never the case below 4 TB of tokens).
  if (t.tokens > 2147483647) {
    throw std::invalid_argument("Expected at most 2^31 - 1 tokens for a TMA variant but received " + std::to_string(t.tokens));
  }
  cu::CUtensorMap map;
  // rows past the set (and elements past dim) read as zeros; a document's last tile may read the next
  // document's first rows, which the kernels mask by length
  const cu::cuuint64_t dims[2] = {static_cast<cu::cuuint64_t>(t.dim), static_cast<cu::cuuint64_t>(std::max<int64_t>(t.tokens, 1))};
  const cu::cuuint64_t strides[1] = {static_cast<cu::cuuint64_t>(t.dim) * DTypeSize(t.dtype)};
  const uint32_t boxes[2] = {box[0], box[1]};
  const uint32_t steps[2] = {1, 1};
  Check(api.cuTensorMapEncodeTiled(&map, type, 2, reinterpret_cast<void*>(static_cast<uintptr_t>(t.data)), dims, strides,
                                   boxes, steps, cu::CU_TENSOR_MAP_INTERLEAVE_NONE, cu::CU_TENSOR_MAP_SWIZZLE_128B,
                                   cu::CU_TENSOR_MAP_L2_PROMOTION_L2_256B, cu::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        "cuTensorMapEncodeTiled");
  return map;
}

namespace {

// The last few documents' tensor maps of this (worker) thread: a map is a pure function of the key
// (address, rows, dim, dtype, box), so a corpus scored again and again is encoded once.
struct TensorMapCache {
  struct Entry {
    int device = -1;
    cu::CUdeviceptr data = 0;
    int64_t tokens = 0, dim = 0;
    DType dtype = DType::Float32;
    unsigned box[2] = {0, 0};
    cu::CUtensorMap map;
  };
  Entry entries[4];
  int next = 0;
};

}  // namespace

void Runtime::Launch(const DeviceTokens& q, const DeviceTokens& d, const LaunchSpec& spec, cu::CUdeviceptr scores) {
  if (q.count == 0 || d.count == 0) return;
  KernelFunction& f = modules_.Function(spec.kernel);
  // TMA variants take the documents' tensor map as a second (by-value, 64-byte aligned) parameter
  cu::CUtensorMap docs_map{};
  const bool tma = spec.tma_box[0] > 0;
  if (tma) {
    thread_local TensorMapCache cache;
    TensorMapCache::Entry* hit = nullptr;
    for (TensorMapCache::Entry& e : cache.entries) {
      if (e.device == props_.index && e.data == d.data && e.tokens == d.tokens && e.dim == d.dim && e.dtype == d.dtype &&
          e.box[0] == spec.tma_box[0] && e.box[1] == spec.tma_box[1]) {
        hit = &e;
        break;
      }
    }
    if (!hit) {
      const cu::CUtensorMap map = TokensTensorMap(d, spec.tma_box);  // throws before the entry changes
      hit = &cache.entries[cache.next];
      cache.next = (cache.next + 1) % 4;
      *hit = TensorMapCache::Entry{props_.index, d.data, d.tokens, d.dim, d.dtype, {spec.tma_box[0], spec.tma_box[1]}, map};
    }
    docs_map = hit->map;
  }
  MaxsimParams p;
  std::memset(&p, 0, sizeof(p));
  p.queries = reinterpret_cast<const void*>(static_cast<uintptr_t>(q.data));
  p.query_starts = reinterpret_cast<const int64_t*>(static_cast<uintptr_t>(q.starts));
  p.query_lengths = reinterpret_cast<const int32_t*>(static_cast<uintptr_t>(q.lengths));
  p.docs = reinterpret_cast<const void*>(static_cast<uintptr_t>(d.data));
  p.doc_starts = reinterpret_cast<const int64_t*>(static_cast<uintptr_t>(d.starts));
  p.doc_lengths = reinterpret_cast<const int32_t*>(static_cast<uintptr_t>(d.lengths));
  p.scores = reinterpret_cast<float*>(static_cast<uintptr_t>(scores));
  p.num_docs = static_cast<int32_t>(d.count);
  p.dim = static_cast<int32_t>(q.dim);
  p.max_query_length = q.max_length;
  p.max_doc_length = d.max_length;
  p.query_scales = reinterpret_cast<const float*>(static_cast<uintptr_t>(q.scales));
  p.doc_scales = reinterpret_cast<const float*>(static_cast<uintptr_t>(d.scales));
  p.unit_order = spec.unit_order;
  const int64_t tile = spec.query_tile > 0 ? spec.query_tile : q.count;
  for (int64_t off = 0; off < q.count; off += tile) {
    // One tile of queries per launch: [query_tile_offset, num_queries); scores stay indexed by the
    // global query (row stride num_docs), so tiles write disjoint rows of the same matrix.
    p.query_tile_offset = static_cast<int32_t>(off);
    p.num_queries = static_cast<int32_t>(std::min(off + tile, q.count));
    // by value: the driver copies each parameter's declared size from these addresses
    void* args[] = {&p, &docs_map};
    const cu::CUresult r = Api().cuLaunchKernel(f.fn, spec.grid[0], spec.grid[1], spec.grid[2], spec.block[0], spec.block[1],
                                                spec.block[2], spec.smem, stream_, args, nullptr);
    if (r != cu::CUDA_SUCCESS) Check(r, ("cuLaunchKernel(" + spec.kernel + ")").c_str());  // the name only on failure
  }
}

void Runtime::Download(void* dst, cu::CUdeviceptr src, uint64_t bytes) {
  const Driver& d = Api();
  auto* out = static_cast<uint8_t*>(dst);
  for (uint64_t off = 0; off < bytes; off += Staging::kBytes) {
    const uint64_t n = std::min(Staging::kBytes, bytes - off);
    void* stage = staging_.Buffer(0);
    // Staging buffer 0 may still feed an upload copy: the stream orders this copy after it.
    Check(d.cuMemcpyDtoHAsync(stage, src + off, n, stream_), "cuMemcpyDtoHAsync");
    Synchronize();
    std::memcpy(out + off, stage, n);
  }
}

const void* Runtime::ReadBack(cu::CUdeviceptr src, uint64_t bytes) {
  if (bytes > kReadBackBytes) {
    throw std::invalid_argument("Expected at most " + std::to_string(kReadBackBytes) + " bytes for ReadBack but received " +
                                std::to_string(bytes));
  }
  const Driver& d = Api();
  if (bytes > staging_.readback_bytes) {
    uint64_t size = 64 << 10;
    while (size < bytes) size <<= 1;
    if (staging_.readback) {
      Synchronize();  // no copy may still target the old buffer
      Check(d.cuMemFreeHost(staging_.readback), "cuMemFreeHost");
      staging_.readback = nullptr;
      staging_.readback_bytes = 0;
    }
    Check(d.cuMemHostAlloc(&staging_.readback, size, cu::CU_MEMHOSTALLOC_DEFAULT), "cuMemHostAlloc");
    staging_.readback_bytes = size;
  }
  if (bytes > 0) Check(d.cuMemcpyDtoHAsync(staging_.readback, src, bytes, stream_), "cuMemcpyDtoHAsync");
  Synchronize();
  return staging_.readback;
}

void Runtime::Upload(cu::CUdeviceptr dst, const void* src, uint64_t bytes) {
  if (bytes == 0) return;
  StagedWriter w(staging_, stream_, dst);
  w.Write(src, bytes);
  w.Finish();
}

void Runtime::LaunchWithParams(const LaunchSpec& spec, const void* params, const cu::CUtensorMap* map,
                               cu::CUstream on) {
  ValidateLaunch(spec);
  if ((map != nullptr) != (spec.tma_box[0] > 0)) {
    throw std::invalid_argument("Expected a tensor map exactly when launch.tmaBox is set for kernel " + spec.kernel);
  }
  KernelFunction& f = modules_.Function(spec.kernel);
  // By-value arguments: the driver copies each parameter's declared size from these addresses.
  void* args[] = {const_cast<void*>(params), const_cast<cu::CUtensorMap*>(map)};
  const std::string call = "cuLaunchKernel(" + spec.kernel + ")";
  Check(Api().cuLaunchKernel(f.fn, spec.grid[0], spec.grid[1], spec.grid[2], spec.block[0], spec.block[1], spec.block[2],
                             spec.smem, on ? on : stream_, args, nullptr),
        call.c_str());
}

cu::CUstream Runtime::side_stream() {
  if (!side_) {
    const auto& d = Api();
    Check(d.cuStreamCreate(&side_, cu::CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    Check(d.cuEventCreate(&fork_, cu::CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    Check(d.cuEventCreate(&join_, cu::CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  }
  return side_;
}

void Runtime::Fork() {
  cu::CUstream side = side_stream();
  Check(Api().cuEventRecord(fork_, stream_), "cuEventRecord");
  Check(Api().cuStreamWaitEvent(side, fork_, 0), "cuStreamWaitEvent");
}

void Runtime::Join() {
  Check(Api().cuEventRecord(join_, side_stream()), "cuEventRecord");
  Check(Api().cuStreamWaitEvent(stream_, join_, 0), "cuStreamWaitEvent");
}

void Runtime::Synchronize() { Check(Api().cuStreamSynchronize(stream_), "cuStreamSynchronize"); }

}  // namespace maxsim_cuda
