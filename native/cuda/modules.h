// The kernel modules of a runtime: the fatbins found on disk, loaded into the context, and the
// kernels looked up by name with the attributes a launch is checked against (worker thread only).
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_api.h"

namespace maxsim_cuda {

// The kernel fatbins: $MAXSIM_KERNEL_DIR, else <dir of the addon .node>/../kernels (the addon lives
// in build/Release). `unavailable` holds UNAVAILABLE.txt (or why nothing was found) when no fatbin exists.
struct KernelFiles {
  std::string dir;
  std::vector<std::string> fatbins;  // file names, sorted
  std::string unavailable;
};
KernelFiles FindKernelFiles();

struct KernelFunction {
  cu::CUfunction fn = nullptr;
  int max_threads = 0;
  int static_smem = 0;
  int dynamic_smem_limit = 0;  // raised with cuFuncSetAttribute when a launch needs more
  // Whether the kernel takes a second parameter (the TMA variants' tensor map): 1 yes, 0 no, -1 the
  // driver cannot say (before 12.4).
  int takes_tensor_map = -1;
};

class Modules {
 public:
  // Loads every fatbin of FindKernelFiles() into the current context; a module that fails to load is
  // recorded in errors() and the others stay usable.
  void Load();
  // The kernel with its attributes (cached). Throws std::invalid_argument naming what is available.
  KernelFunction& Function(const std::string& name);
  // Whether a loaded module holds this kernel (an optional family, e.g. an older build without it).
  bool HasKernel(const std::string& name);
  // Names of all kernels in the loaded modules (empty when the driver cannot enumerate them).
  std::vector<std::string> KernelNames() const;
  // Problems met while loading modules ("file: reason"), for status and error messages.
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::vector<cu::CUmodule> modules_;
  std::vector<std::string> stems_;  // file name without .fatbin, parallel to modules_
  std::vector<std::string> errors_;
  KernelFiles files_;
  std::unordered_map<std::string, KernelFunction> functions_;
};

}  // namespace maxsim_cuda
