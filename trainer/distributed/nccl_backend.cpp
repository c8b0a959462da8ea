#include "trainer/distributed/nccl_backend.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "common/error.hpp"

#ifndef MESHRUN_HAVE_NCCL
#define MESHRUN_HAVE_NCCL 0
#endif

namespace meshrun::trainer {
namespace {

constexpr const char* kPluginName = "libmeshrun_trainer_cuda.so";

// The plugin's C entry points (trainer/distributed/cuda_plugin.cpp).
struct PluginApi {
  int (*make_nccl_backend)(c10d::Store*, int, int, int, long long, c10d::Backend**, char*, size_t) = nullptr;
  int (*memory_stats)(int, long long*) = nullptr;
  void (*reset_peak_memory)(int) = nullptr;
};

// The plugin once loaded. NOTE: process-wide on purpose: it mirrors the dynamic loader's own state (the
// handle is never closed, as libtorch_cuda cannot be unloaded); written once, before the process group exists.
PluginApi& plugin() {
  static PluginApi api;
  return api;
}

template <typename Fn>
bool resolve(void* handle, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(::dlsym(handle, name));
  return out != nullptr;
}

std::string executable_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

}  // namespace

bool load_cuda_plugin(const std::string& device) {
  if (plugin().make_nccl_backend != nullptr) return true;
  if (device == "cpu") return false;
  const bool required = device == "cuda";
  if (!required && ::access("/proc/driver/nvidia/version", F_OK) != 0) return false;  // no driver, no GPU
  if (!MESHRUN_HAVE_NCCL) {
    if (required) throw UsageError("system.device=cuda, but this meshrun-trainer was built without CUDA/NCCL");
    return false;
  }
  // Next to the executable first (the build tree and installs), then the dynamic linker's search path.
  std::string error;
  void* handle = nullptr;
  for (const std::string& path : {executable_dir() + "/" + kPluginName, std::string(kPluginName)}) {
    handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle != nullptr) break;
    const char* e = ::dlerror();
    error += (error.empty() ? "" : "; ") + std::string(e != nullptr ? e : path);
  }
  PluginApi api;
  const bool complete = handle != nullptr &&
                        resolve(handle, "meshrun_trainer_make_nccl_backend", api.make_nccl_backend) &&
                        resolve(handle, "meshrun_trainer_cuda_memory_stats", api.memory_stats) &&
                        resolve(handle, "meshrun_trainer_cuda_reset_peak_memory", api.reset_peak_memory);
  if (!complete) {
    const std::string why = handle == nullptr ? error
                                              : std::string("an entry point is missing from ") + kPluginName +
                                                    " (a plugin from another build: rebuild meshrun-trainer)";
    if (required) throw UsageError("system.device=cuda: cannot load the CUDA plugin: " + why);
    std::fprintf(stderr,
                 "meshrun-trainer: warning: NVIDIA driver present but the CUDA plugin did not load (%s): "
                 "running on the CPU\n",
                 why.c_str());
    return false;
  }
  plugin() = api;
  return true;
}

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int world_size, int local_rank, std::chrono::milliseconds timeout) {
  if (!MESHRUN_HAVE_NCCL) throw UsageError("this meshrun-trainer was built without CUDA/NCCL: use system.backend=gloo");
  if (plugin().make_nccl_backend == nullptr)
    throw UsageError("system.backend=nccl needs the CUDA plugin: use system.device=cuda");
  c10d::Backend* backend = nullptr;
  char err[1024] = {0};
  const int rc = plugin().make_nccl_backend(store.get(), rank, world_size, local_rank,
                                            static_cast<long long>(timeout.count()), &backend, err, sizeof(err));
  if (rc == 2) throw UsageError(err);
  if (rc != 0 || backend == nullptr) throw Error(std::string("ProcessGroupNCCL: ") + err);
  return c10::intrusive_ptr<c10d::Backend>::reclaim(backend);
}

CudaMemoryStats cuda_memory_stats(int device) {
  if (plugin().memory_stats == nullptr) return {};
  long long figures[3] = {0, 0, 0};
  if (plugin().memory_stats(device, figures) != 0) return {};
  return {figures[0], figures[1], figures[2]};
}

void reset_cuda_peak_memory(int device) {
  if (plugin().reset_peak_memory != nullptr) plugin().reset_peak_memory(device);
}

}  // namespace meshrun::trainer
