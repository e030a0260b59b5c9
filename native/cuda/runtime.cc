#include "runtime.h"

#include <dirent.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include "kernels/maxsim_cast_params.h"
#include "kernels/maxsim_params.h"

namespace maxsim_cuda {
namespace {

constexpr uint64_t kStagingBytes = 16ull << 20;  // per pinned staging buffer (two of them)
constexpr uint64_t kSmallLimit = 1ull << 20;     // blocks up to 1 MiB: power-of-two classes
constexpr uint64_t kLargeGranule = 2ull << 20;   // larger blocks: multiples of 2 MiB
constexpr uint32_t kQuietNaN = 0x7fc00000u;
constexpr int kDefaultDynamicSmem = 48 * 1024;

std::string ReadText(const std::string& path) {
  std::ifstream f(path);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string AddonDir() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&FindKernelFiles), &info) == 0 || info.dli_fname == nullptr) return ".";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Device properties and kernel files

DeviceProps QueryDeviceProps(int index) {
  const Driver& d = Api();
  DeviceProps p;
  p.index = index;
  cu::CUdevice dev = 0;
  Check(d.cuDeviceGet(&dev, index), "cuDeviceGet");
  char name[256] = {0};
  Check(d.cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName");
  p.name = name;
  auto attr = [&](int a) {
    int v = 0;
    Check(d.cuDeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute");
    return v;
  };
  p.cc_major = attr(cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  p.cc_minor = attr(cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  p.sms = attr(cu::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  p.l2_bytes = attr(cu::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  p.smem_optin = attr(cu::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  p.max_threads_per_block = attr(cu::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  p.max_block[0] = attr(cu::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  p.max_block[1] = attr(cu::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  p.max_block[2] = attr(cu::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  p.max_grid[0] = attr(cu::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  p.max_grid[1] = attr(cu::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  p.max_grid[2] = attr(cu::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  size_t total = 0;
  Check(d.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem");
  p.total_memory = total;
  return p;
}

KernelFiles FindKernelFiles() {
  KernelFiles k;
  const char* env = std::getenv("MAXSIM_KERNEL_DIR");
  k.dir = env && *env ? std::string(env) : AddonDir() + "/../kernels";
  if (DIR* dir = opendir(k.dir.c_str())) {
    while (dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      if (name.size() > 7 && name.compare(name.size() - 7, 7, ".fatbin") == 0) k.fatbins.push_back(name);
    }
    closedir(dir);
  }
  std::sort(k.fatbins.begin(), k.fatbins.end());
  if (k.fatbins.empty()) {
    const std::string why = ReadText(k.dir + "/UNAVAILABLE.txt");
    k.unavailable = "no CUDA kernels in " + k.dir + ": " +
                    (why.empty() ? std::string("no *.fatbin there (run `node scripts/build-native.mjs kernels` where nvcc exists)") : why);
  }
  return k;
}

// ---------------------------------------------------------------------------------------------
// Allocator

uint64_t Allocator::RoundUp(uint64_t bytes) {
  if (bytes <= 512) return 512;
  if (bytes <= kSmallLimit) {
    uint64_t c = 512;
    while (c < bytes) c <<= 1;
    return c;
  }
  return (bytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
}

cu::CUdeviceptr Allocator::Alloc(uint64_t bytes) {
  const uint64_t size = RoundUp(bytes);
  // Reuse the smallest cached block that fits without wasting more than a quarter of it.
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= size + size / 4) {
    const uint64_t got = it->first;
    const cu::CUdeviceptr ptr = it->second;
    free_.erase(it);
    stats_.cached -= got;
    live_[ptr] = got;
    stats_.in_use += got;
    stats_.peak = std::max(stats_.peak, stats_.in_use);
    return ptr;
  }
  const Driver& d = Api();
  cu::CUdeviceptr ptr = 0;
  cu::CUresult r = d.cuMemAlloc(&ptr, size);
  if (r == cu::CUDA_ERROR_OUT_OF_MEMORY && !free_.empty()) {
    ReleaseCached();
    r = d.cuMemAlloc(&ptr, size);
  }
  if (r == cu::CUDA_ERROR_OUT_OF_MEMORY) {
    size_t free_b = 0, total_b = 0;
    d.cuMemGetInfo(&free_b, &total_b);
    throw CudaError("cuMemAlloc failed: " + DescribeResult(r) + " allocating " + std::to_string(size) +
                        " bytes on the GPU (" + std::to_string(stats_.in_use) + " bytes in use by maxsim, " +
                        std::to_string(free_b) + " of " + std::to_string(total_b) + " bytes free)",
                    "CUDA_ERROR_OUT_OF_MEMORY");
  }
  Check(r, "cuMemAlloc");
  live_[ptr] = size;
  stats_.in_use += size;
  stats_.peak = std::max(stats_.peak, stats_.in_use);
  return ptr;
}

void Allocator::Free(cu::CUdeviceptr ptr) {
  auto it = live_.find(ptr);
  if (it == live_.end()) return;
  free_.emplace(it->second, ptr);
  stats_.in_use -= it->second;
  stats_.cached += it->second;
  live_.erase(it);
}

void Allocator::ReleaseCached() {
  const Driver& d = Api();
  for (const auto& [size, ptr] : free_) {
    Check(d.cuMemFree(ptr), "cuMemFree");
    stats_.cached -= size;
  }
  free_.clear();
}

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

// Streams bytes into device memory through the two pinned staging buffers: while the GPU copies one
// buffer, the worker fills the other (each buffer's last copy is fenced with an event). Retarget()
// sends the following bytes elsewhere while filling the same buffer, so that the small pieces of one
// append (tokens, scales, starts, lengths) need one buffer, not one wait each; consecutive writers
// start on alternate buffers, so a writer does not wait for the copy its predecessor just queued.
class StagedWriter {
 public:
  StagedWriter(Runtime& rt, cu::CUdeviceptr dst) : rt_(rt), dst_(dst), which_(rt.staging_next_) {}
  void Write(const void* src, uint64_t bytes) {
    const auto* p = static_cast<const uint8_t*>(src);
    while (bytes > 0) {
      if (!buf_) Acquire();
      const uint64_t take = std::min(bytes, kStagingBytes - fill_);
      std::memcpy(buf_ + fill_, p, take);
      fill_ += take;
      p += take;
      bytes -= take;
      if (fill_ == kStagingBytes) Flush();
    }
  }
  // The bytes written so far go to the current destination; later ones to dst onwards.
  void Retarget(cu::CUdeviceptr dst) {
    Send();
    dst_ = dst;
    offset_ = 0;
  }
  void Finish() {
    if (buf_) Flush();
  }

 private:
  void Acquire() {
    Check(Api().cuEventSynchronize(rt_.staging_done_[which_]), "cuEventSynchronize");
    buf_ = static_cast<uint8_t*>(rt_.Staging(which_));
  }
  // Queues the copy of the buffer's unsent bytes [sent_, fill_).
  void Send() {
    if (fill_ == sent_) return;
    Check(Api().cuMemcpyHtoDAsync(dst_ + offset_, buf_ + sent_, fill_ - sent_, rt_.stream_), "cuMemcpyHtoDAsync");
    offset_ += fill_ - sent_;
    sent_ = fill_;
  }
  void Flush() {
    Send();
    Check(Api().cuEventRecord(rt_.staging_done_[which_], rt_.stream_), "cuEventRecord");
    fill_ = sent_ = 0;
    buf_ = nullptr;
    which_ ^= 1;
    rt_.staging_next_ = which_;
  }
  Runtime& rt_;
  cu::CUdeviceptr dst_;
  uint64_t offset_ = 0, fill_ = 0, sent_ = 0;
  uint8_t* buf_ = nullptr;
  int which_;
};

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

void Runtime::Post(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!started_) {
    started_ = true;
    thread_ = std::thread(&Runtime::WorkerLoop, this);
  }
  queue_.push_back(std::move(job));
  cv_.notify_one();
}

void Runtime::WorkerLoop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return !queue_.empty(); });
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

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
  for (auto& e : staging_done_) Check(d.cuEventCreate(&e, cu::CU_EVENT_DEFAULT), "cuEventCreate");
  LoadModules();
}

void Runtime::LoadModules() {
  const Driver& d = Api();
  kernel_files_ = FindKernelFiles();
  for (const std::string& name : kernel_files_.fatbins) {
    std::ifstream f(kernel_files_.dir + "/" + name, std::ios::binary);
    std::vector<char> image((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f.good() && !f.eof()) {
      module_errors_.push_back(name + ": could not be read");
      continue;
    }
    cu::CUmodule module = nullptr;
    // Not through Check: a fatbin without code for this GPU (CUDA_ERROR_NO_BINARY_FOR_GPU) or with PTX
    // newer than the driver (CUDA_ERROR_UNSUPPORTED_PTX_VERSION) leaves the other modules usable.
    const cu::CUresult r = d.cuModuleLoadData(&module, image.data());
    if (r != cu::CUDA_SUCCESS) {
      module_errors_.push_back(name + ": cuModuleLoadData failed: " + DescribeResult(r));
      continue;
    }
    modules_.push_back(module);
    module_stems_.push_back(name.substr(0, name.rfind('.')));
  }
}

void* Runtime::Staging(int which) {
  if (!staging_[which]) Check(Api().cuMemHostAlloc(&staging_[which], kStagingBytes, cu::CU_MEMHOSTALLOC_DEFAULT), "cuMemHostAlloc");
  return staging_[which];
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

std::vector<std::string> Runtime::KernelNames() const {
  std::vector<std::string> names;
  const Driver& d = Api();
  if (!d.cuModuleGetFunctionCount || !d.cuModuleEnumerateFunctions || !d.cuFuncGetName) return names;
  for (cu::CUmodule m : modules_) {
    unsigned int n = 0;
    Check(d.cuModuleGetFunctionCount(&n, m), "cuModuleGetFunctionCount");
    std::vector<cu::CUfunction> fns(n);
    if (n > 0) Check(d.cuModuleEnumerateFunctions(fns.data(), n, m), "cuModuleEnumerateFunctions");
    for (cu::CUfunction f : fns) {
      const char* name = nullptr;
      Check(d.cuFuncGetName(&name, f), "cuFuncGetName");
      if (name) names.emplace_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

Runtime::FunctionInfo& Runtime::Function(const std::string& name) {
  auto it = functions_.find(name);
  if (it != functions_.end()) return it->second;
  const Driver& d = Api();
  // One fatbin per kernel family, named after it (maxsim_mma.fatbin holds maxsim_mma_*): look there
  // first, so a lookup normally makes no failing cuModuleGetFunction probe.
  std::vector<cu::CUmodule> order;
  for (size_t i = 0; i < modules_.size(); i++) {
    if (name.rfind(module_stems_[i] + "_", 0) == 0) order.insert(order.begin(), modules_[i]);
    else order.push_back(modules_[i]);
  }
  for (cu::CUmodule m : order) {
    cu::CUfunction fn = nullptr;
    const cu::CUresult r = d.cuModuleGetFunction(&fn, m, name.c_str());
    if (r == cu::CUDA_ERROR_NOT_FOUND) continue;
    Check(r, "cuModuleGetFunction");
    FunctionInfo info;
    info.fn = fn;
    Check(d.cuFuncGetAttribute(&info.max_threads, cu::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn), "cuFuncGetAttribute");
    Check(d.cuFuncGetAttribute(&info.static_smem, cu::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn), "cuFuncGetAttribute");
    Check(d.cuFuncGetAttribute(&info.dynamic_smem_limit, cu::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fn),
          "cuFuncGetAttribute");
    if (d.cuFuncGetParamInfo) {
      size_t offset = 0, size = 0;
      const cu::CUresult pr = d.cuFuncGetParamInfo(fn, 1, &offset, &size);
      if (pr == cu::CUDA_SUCCESS) info.takes_tensor_map = 1;
      else if (pr == cu::CUDA_ERROR_INVALID_VALUE) info.takes_tensor_map = 0;  // index past the last parameter
    }
    return functions_.emplace(name, info).first->second;
  }
  std::string detail;
  if (!kernel_files_.unavailable.empty()) detail = kernel_files_.unavailable;
  for (const std::string& e : module_errors_) detail += (detail.empty() ? "" : "; ") + e;
  if (detail.empty()) {
    const std::vector<std::string> names = KernelNames();
    detail = "loaded from " + kernel_files_.dir;
    if (!names.empty()) {
      detail += "; available:";
      for (const std::string& n : names) detail += " " + n;
    }
  }
  throw std::invalid_argument("Expected the name of a kernel in the CUDA modules for launch.kernel but received '" +
                              name + "' (" + detail + ")");
}

void Runtime::ValidateLaunch(const LaunchSpec& spec) {
  FunctionInfo& f = Function(spec.kernel);
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

std::shared_ptr<DeviceTokens> Runtime::ViewShell(const std::shared_ptr<DeviceTokens>& src, int64_t n) {
  auto v = std::make_shared<DeviceTokens>();
  v->parent = src;
  v->runtime = this;
  v->dtype = src->dtype;
  v->e4m3 = src->e4m3;
  v->dim = src->dim;
  v->data = src->data;
  v->scales = src->scales;
  v->tokens = v->capacity_tokens = src->tokens;
  v->count = v->capacity_items = n;
  v->max_length = src->max_length;
  v->starts = allocator_.Alloc(static_cast<uint64_t>(std::max<int64_t>(n, 1)) * sizeof(int64_t));
  v->lengths = allocator_.Alloc(static_cast<uint64_t>(std::max<int64_t>(n, 1)) * sizeof(int32_t));
  return v;
}

std::shared_ptr<DeviceTokens> Runtime::Select(const std::shared_ptr<DeviceTokens>& src, const std::vector<int64_t>& indices) {
  for (size_t i = 0; i < indices.size(); i++) {
    if (indices[i] < 0 || indices[i] >= src->count) {
      throw std::invalid_argument("Expected item indices in [0, " + std::to_string(src->count) + ") for indices[" +
                                  std::to_string(i) + "] but received " + std::to_string(indices[i]));
    }
  }
  // The parent's spans from its host mirror; a set without one (none reaches JS today) downloads them.
  std::vector<int64_t> downloaded_starts;
  std::vector<int32_t> downloaded_lengths;
  const int64_t* starts = src->host_starts.data();
  const int32_t* lengths = src->host_lengths.data();
  if (!src->HostSpans()) {
    downloaded_starts.resize(static_cast<size_t>(src->count));
    downloaded_lengths.resize(static_cast<size_t>(src->count));
    if (src->count > 0) {
      Download(downloaded_starts.data(), src->starts, downloaded_starts.size() * sizeof(int64_t));
      Download(downloaded_lengths.data(), src->lengths, downloaded_lengths.size() * sizeof(int32_t));
    }
    starts = downloaded_starts.data();
    lengths = downloaded_lengths.data();
  }
  const int64_t n = static_cast<int64_t>(indices.size());
  std::vector<int64_t> view_starts(static_cast<size_t>(n));
  std::vector<int32_t> view_lengths(static_cast<size_t>(n));
  int32_t longest = 0;
  for (int64_t i = 0; i < n; i++) {
    view_starts[i] = starts[indices[i]];
    view_lengths[i] = lengths[indices[i]];
    longest = std::max(longest, view_lengths[i]);
  }
  std::shared_ptr<DeviceTokens> v = ViewShell(src, n);
  v->max_length = longest;
  if (n > 0) {
    // through pinned staging: the host vectors may go once the writer has them
    StagedWriter w(*this, v->starts);
    w.Write(view_starts.data(), n * sizeof(int64_t));
    w.Retarget(v->lengths);
    w.Write(view_lengths.data(), n * sizeof(int32_t));
    w.Finish();
  }
  v->host_starts = std::move(view_starts);
  v->host_lengths = std::move(view_lengths);
  return v;
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
  StagedWriter w(*this, dst.data + static_cast<uint64_t>(dst.tokens) * row);
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

std::shared_ptr<DeviceTokens> Runtime::Quantize8(const DeviceTokens& src, bool e4m3, bool per_document) {
  const char* suffix = src.dtype == DType::Float32    ? "f32"
                       : src.dtype == DType::Float16  ? "f16"
                       : src.dtype == DType::BFloat16 ? "bf16"
                                                      : nullptr;
  if (!suffix) {
    throw std::invalid_argument("Expected a float32, float16 or bfloat16 token set to quantize but received one of dtype " +
                                std::string(src.e4m3 ? "fp8" : DTypeName(src.dtype)));
  }
  const std::string kernel = std::string(e4m3 ? "maxsim_fp8_quantize_" : "maxsim_int8_quantize_") + suffix;
  // Tight: the tokens and items in use (appended sets are packed, so tokens [0, src.tokens) are all real).
  std::shared_ptr<DeviceTokens> dst = AllocTokens(DType::Int8, src.dim, src.tokens, src.count);
  dst->e4m3 = e4m3;
  ScopedBlock bad(allocator_, sizeof(unsigned long long));
  Check(Api().cuMemsetD32Async(bad.get(), 0xffffffffu, 2, stream_), "cuMemsetD32Async");
  QuantizeParams p;
  std::memset(&p, 0, sizeof(p));
  p.src = reinterpret_cast<const void*>(static_cast<uintptr_t>(src.data));
  p.src_starts = reinterpret_cast<const int64_t*>(static_cast<uintptr_t>(src.starts));
  p.src_lengths = reinterpret_cast<const int32_t*>(static_cast<uintptr_t>(src.lengths));
  p.dst = reinterpret_cast<int8_t*>(static_cast<uintptr_t>(dst->data));
  p.dst_scales = reinterpret_cast<float*>(static_cast<uintptr_t>(dst->scales));
  p.dst_starts = reinterpret_cast<int64_t*>(static_cast<uintptr_t>(dst->starts));
  p.dst_lengths = reinterpret_cast<int32_t*>(static_cast<uintptr_t>(dst->lengths));
  p.bad_token = reinterpret_cast<unsigned long long*>(static_cast<uintptr_t>(bad.get()));
  p.tokens = src.tokens;
  p.count = static_cast<int32_t>(src.count);
  p.dim = static_cast<int32_t>(src.dim);
  if (src.tokens > 0 || src.count > 0) {
    LaunchSpec spec;
    spec.kernel = kernel;
    spec.block[0] = 256;  // 8 warps, one token each per step (maxsim_8bit.cuh)
    const int64_t want = std::max<int64_t>((std::max(src.tokens, src.count) + 7) / 8, 1);
    spec.grid[0] = static_cast<unsigned>(std::min<int64_t>(want, static_cast<int64_t>(props_.sms) * 16));
    LaunchWithParams(spec, &p);
    if (per_document && src.count > 0) {
      // document scales (maxsim_8bit.cuh): mark with one warp per item, requantize with one per token
      const std::string family = e4m3 ? "maxsim_fp8_quantize_" : "maxsim_int8_quantize_";
      const unsigned token_grid = spec.grid[0];
      spec.kernel = family + "mark_documents";
      spec.grid[0] = static_cast<unsigned>(std::min<int64_t>((src.count + 7) / 8, static_cast<int64_t>(props_.sms) * 16));
      LaunchWithParams(spec, &p);
      spec.kernel = family + "documents_" + suffix;
      spec.grid[0] = token_grid;
      LaunchWithParams(spec, &p);
    }
  }
  unsigned long long first_bad = ~0ull;
  Download(&first_bad, bad.get(), sizeof(first_bad));  // synchronizes
  if (first_bad != ~0ull) {
    throw std::invalid_argument("Expected finite values to quantize but received a non-finite value at token " +
                                std::to_string(first_bad));
  }
  dst->tokens = src.tokens;
  dst->count = src.count;
  dst->max_length = src.max_length;
  if (src.HostSpans()) {  // the kernel copies the item table unchanged
    dst->host_starts = src.host_starts;
    dst->host_lengths = src.host_lengths;
  }
  return dst;
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

std::shared_ptr<DeviceTokens> Runtime::CastSet(const DeviceTokens& src, DType to) {
  if (src.dtype != DType::Float32 || src.e4m3 || src.parent || !src.HostSpans()) {
    throw std::invalid_argument("Expected a float32 token set made by upload() or append() to cast");
  }
  auto t = AllocTokens(to, src.dim, src.tokens, src.count);
  CastFromF32(src.data, t->data, to, static_cast<uint64_t>(src.tokens) * static_cast<uint64_t>(src.dim));
  if (src.count > 0) {
    StagedWriter w(*this, t->starts);
    w.Write(src.host_starts.data(), src.host_starts.size() * sizeof(int64_t));
    w.Retarget(t->lengths);
    w.Write(src.host_lengths.data(), src.host_lengths.size() * sizeof(int32_t));
    w.Finish();
  }
  t->tokens = src.tokens;
  t->count = src.count;
  t->max_length = src.max_length;
  t->host_starts = src.host_starts;
  t->host_lengths = src.host_lengths;
  return t;
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

void Runtime::Launch(const DeviceTokens& q, const DeviceTokens& d, const LaunchSpec& spec, cu::CUdeviceptr scores) {
  if (q.count == 0 || d.count == 0) return;
  FunctionInfo& f = Function(spec.kernel);
  // TMA variants take the documents' tensor map as a second (by-value, 64-byte aligned) parameter
  cu::CUtensorMap docs_map{};
  const bool tma = spec.tma_box[0] > 0;
  if (tma) docs_map = TokensTensorMap(d, spec.tma_box);
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
  const int64_t tile = spec.query_tile > 0 ? spec.query_tile : q.count;
  const std::string call = "cuLaunchKernel(" + spec.kernel + ")";
  for (int64_t off = 0; off < q.count; off += tile) {
    // One tile of queries per launch: [query_tile_offset, num_queries); scores stay indexed by the
    // global query (row stride num_docs), so tiles write disjoint rows of the same matrix.
    p.query_tile_offset = static_cast<int32_t>(off);
    p.num_queries = static_cast<int32_t>(std::min(off + tile, q.count));
    // by value: the driver copies each parameter's declared size from these addresses
    void* args[] = {&p, &docs_map};
    Check(Api().cuLaunchKernel(f.fn, spec.grid[0], spec.grid[1], spec.grid[2], spec.block[0], spec.block[1],
                               spec.block[2], spec.smem, stream_, args, nullptr),
          call.c_str());
  }
}

void Runtime::Download(void* dst, cu::CUdeviceptr src, uint64_t bytes) {
  const Driver& d = Api();
  auto* out = static_cast<uint8_t*>(dst);
  for (uint64_t off = 0; off < bytes; off += kStagingBytes) {
    const uint64_t n = std::min(kStagingBytes, bytes - off);
    void* stage = Staging(0);
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
  if (bytes > readback_bytes_) {
    uint64_t size = 64 << 10;
    while (size < bytes) size <<= 1;
    if (readback_) {
      Synchronize();  // no copy may still target the old buffer
      Check(d.cuMemFreeHost(readback_), "cuMemFreeHost");
      readback_ = nullptr;
      readback_bytes_ = 0;
    }
    Check(d.cuMemHostAlloc(&readback_, size, cu::CU_MEMHOSTALLOC_DEFAULT), "cuMemHostAlloc");
    readback_bytes_ = size;
  }
  if (bytes > 0) Check(d.cuMemcpyDtoHAsync(readback_, src, bytes, stream_), "cuMemcpyDtoHAsync");
  Synchronize();
  return readback_;
}

void Runtime::Upload(cu::CUdeviceptr dst, const void* src, uint64_t bytes) {
  if (bytes == 0) return;
  StagedWriter w(*this, dst);
  w.Write(src, bytes);
  w.Finish();
}

void Runtime::LaunchWithParams(const LaunchSpec& spec, const void* params) {
  ValidateLaunch(spec);
  FunctionInfo& f = Function(spec.kernel);
  // One by-value argument: the driver copies the kernel's declared parameter size from params.
  void* args[] = {const_cast<void*>(params)};
  const std::string call = "cuLaunchKernel(" + spec.kernel + ")";
  Check(Api().cuLaunchKernel(f.fn, spec.grid[0], spec.grid[1], spec.grid[2], spec.block[0], spec.block[1], spec.block[2],
                             spec.smem, stream_, args, nullptr),
        call.c_str());
}

bool Runtime::HasKernel(const std::string& name) {
  if (functions_.count(name) > 0) return true;
  for (cu::CUmodule m : modules_) {
    cu::CUfunction fn = nullptr;
    if (Api().cuModuleGetFunction(&fn, m, name.c_str()) == cu::CUDA_SUCCESS) {
      Function(name);  // caches its attributes
      return true;
    }
  }
  return false;
}

void Runtime::Synchronize() { Check(Api().cuStreamSynchronize(stream_), "cuStreamSynchronize"); }

}  // namespace maxsim_cuda
