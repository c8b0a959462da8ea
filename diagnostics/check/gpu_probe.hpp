// What the GPU stack looks like to this process, found at run time with dlopen (no link-time CUDA
// dependency): the CUDA driver (libcuda.so.1: device count, driver version) and NCCL (libnccl.so.2).
#pragma once

#include <string>

namespace meshrun::diagnostics {

struct GpuInfo {
  bool driver_found = false;
  std::string driver_error;    // why the driver could not be used (not found, cuInit failed...)
  int device_count = 0;        // as CUDA sees it, i.e. after CUDA_VISIBLE_DEVICES
  int driver_version = 0;      // the newest CUDA the driver runs, e.g. 12040 for CUDA 12.4
  std::string driver_release;  // the kernel module's release, e.g. "580.159.04" ("" when unknown)
  bool nccl_found = false;
  std::string nccl_error;
  std::string nccl_version;  // "2.21.5"
};

/// Loads libcuda.so.1 and libnccl.so.2 if present and asks them; never throws.
GpuInfo probe_gpus();

/// ncclGetVersion's integer as "major.minor.patch" (both the pre- and post-2.9 encodings).
std::string nccl_version_text(int code);

/// The release in /proc/driver/nvidia/version's text ("NVRM version: ... Kernel Module  580.159.04 ..."),
/// or "" when there is none.
std::string parse_driver_release(const std::string& proc_version_text);

/// The CUDA version that cuDriverGetVersion's integer stands for: 13000 -> "13.0".
std::string cuda_version_text(int code);

/// Number of entries in a CUDA_VISIBLE_DEVICES value ("" means none; "0,1" means 2).
int count_visible_devices(const std::string& value);

}  // namespace meshrun::diagnostics
