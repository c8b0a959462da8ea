#include "diagnostics/check/gpu_probe.hpp"

#include <dlfcn.h>

#include <fstream>
#include <memory>
#include <regex>
#include <sstream>

namespace meshrun::diagnostics {
namespace {

// dlclose on scope exit; the libraries are only asked a few questions.
struct DlCloser {
  void operator()(void* handle) const {
    if (handle != nullptr) ::dlclose(handle);
  }
};
using LibraryHandle = std::unique_ptr<void, DlCloser>;

std::string dl_error() {
  const char* e = ::dlerror();
  return e == nullptr ? "unknown dlopen error" : e;
}

// Driver API signatures (CUresult and ncclResult_t are int-sized enums; 0 means success).
using CuInit = int (*)(unsigned int);
using CuDeviceGetCount = int (*)(int*);
using CuDriverGetVersion = int (*)(int*);
using NcclGetVersion = int (*)(int*);

}  // namespace

std::string nccl_version_text(int code) {
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch; before that major*1000 + minor*100 + patch.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? (code % 10000) / 100 : (code % 1000) / 100;
  const int patch = code % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::string parse_driver_release(const std::string& proc_version_text) {
  static const std::regex kRelease(R"(Kernel Module(?: for [^ ]+)?\s+(\d+\.\d+(?:\.\d+)?))");
  std::smatch m;
  return std::regex_search(proc_version_text, m, kRelease) ? m[1].str() : std::string();
}

std::string cuda_version_text(int code) { return std::to_string(code / 1000) + "." + std::to_string(code % 1000 / 10); }

int count_visible_devices(const std::string& value) {
  std::stringstream in(value);
  std::string item;
  int n = 0;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) ++n;
  }
  return n;
}

GpuInfo probe_gpus() {
  GpuInfo info;
  LibraryHandle cuda(::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL));
  if (!cuda) {
    info.driver_error = "libcuda.so.1 not found (" + dl_error() + ")";
  } else {
    auto init = reinterpret_cast<CuInit>(::dlsym(cuda.get(), "cuInit"));
    auto count = reinterpret_cast<CuDeviceGetCount>(::dlsym(cuda.get(), "cuDeviceGetCount"));
    auto version = reinterpret_cast<CuDriverGetVersion>(::dlsym(cuda.get(), "cuDriverGetVersion"));
    if (init == nullptr || count == nullptr) {
      info.driver_error = "libcuda.so.1 lacks cuInit/cuDeviceGetCount";
    } else if (const int rc = init(0); rc != 0) {
      // 100 = CUDA_ERROR_NO_DEVICE: a driver but no (visible) device.
      info.driver_found = true;
      info.driver_error = rc == 100 ? "no CUDA device visible" : "cuInit failed with CUresult " + std::to_string(rc);
    } else {
      info.driver_found = true;
      if (version != nullptr) version(&info.driver_version);
      if (const int rc2 = count(&info.device_count); rc2 != 0) {
        info.driver_error = "cuDeviceGetCount failed with CUresult " + std::to_string(rc2);
      }
    }
  }
  if (std::ifstream proc("/proc/driver/nvidia/version"); proc) {
    std::stringstream text;
    text << proc.rdbuf();
    info.driver_release = parse_driver_release(text.str());
  }
  LibraryHandle nccl(::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL));
  if (!nccl) {
    info.nccl_error = "libnccl.so.2 not found (" + dl_error() + ")";
  } else if (auto get = reinterpret_cast<NcclGetVersion>(::dlsym(nccl.get(), "ncclGetVersion")); get == nullptr) {
    info.nccl_error = "libnccl.so.2 lacks ncclGetVersion";
  } else {
    int code = 0;
    if (get(&code) == 0) {
      info.nccl_found = true;
      info.nccl_version = nccl_version_text(code);
    } else {
      info.nccl_error = "ncclGetVersion failed";
    }
  }
  return info;
}

}  // namespace meshrun::diagnostics
