#include "modules.h"

#include <dirent.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "driver.h"

namespace maxsim_cuda {
namespace {

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

void Modules::Load() {
  const Driver& d = Api();
  files_ = FindKernelFiles();
  for (const std::string& name : files_.fatbins) {
    std::ifstream f(files_.dir + "/" + name, std::ios::binary);
    std::vector<char> image((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f.good() && !f.eof()) {
      errors_.push_back(name + ": could not be read");
      continue;
    }
    cu::CUmodule module = nullptr;
    // Not through Check: a fatbin without code for this GPU (CUDA_ERROR_NO_BINARY_FOR_GPU) or with PTX
    // newer than the driver (CUDA_ERROR_UNSUPPORTED_PTX_VERSION) leaves the other modules usable.
    const cu::CUresult r = d.cuModuleLoadData(&module, image.data());
    if (r != cu::CUDA_SUCCESS) {
      errors_.push_back(name + ": cuModuleLoadData failed: " + DescribeResult(r));
      continue;
    }
    modules_.push_back(module);
    stems_.push_back(name.substr(0, name.rfind('.')));
  }
}

std::vector<std::string> Modules::KernelNames() const {
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

KernelFunction& Modules::Function(const std::string& name) {
  auto it = functions_.find(name);
  if (it != functions_.end()) return it->second;
  const Driver& d = Api();
  // One fatbin per kernel family, named after it (maxsim_mma.fatbin holds maxsim_mma_*): look there
  // first, so a lookup normally makes no failing cuModuleGetFunction probe.
  std::vector<cu::CUmodule> order;
  for (size_t i = 0; i < modules_.size(); i++) {
    if (name.rfind(stems_[i] + "_", 0) == 0) order.insert(order.begin(), modules_[i]);
    else order.push_back(modules_[i]);
  }
  for (cu::CUmodule m : order) {
    cu::CUfunction fn = nullptr;
    const cu::CUresult r = d.cuModuleGetFunction(&fn, m, name.c_str());
    if (r == cu::CUDA_ERROR_NOT_FOUND) continue;
    Check(r, "cuModuleGetFunction");
    KernelFunction info;
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
  if (!files_.unavailable.empty()) detail = files_.unavailable;
  for (const std::string& e : errors_) detail += (detail.empty() ? "" : "; ") + e;
  if (detail.empty()) {
    const std::vector<std::string> names = KernelNames();
    detail = "loaded from " + files_.dir;
    if (!names.empty()) {
      detail += "; available:";
      for (const std::string& n : names) detail += " " + n;
    }
  }
  throw std::invalid_argument("Expected the name of a kernel in the CUDA modules for launch.kernel but received '" +
                              name + "' (" + detail + ")");
}

bool Modules::HasKernel(const std::string& name) {
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

}  // namespace maxsim_cuda
