// libmeshrun_trainer_cuda.so: the only code of meshrun-trainer that links libtorch_cuda, c10_cuda and NCCL.
// meshrun-trainer dlopens it for GPU runs (see nccl_backend.hpp). C entry points only: the process group,
// and the caching allocator's memory figures; errors come back as text or codes so no C++ exception
// crosses the dlopen boundary.
#include <cstdio>
#include <exception>
#include <string>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

extern "C" {

/// Builds a ProcessGroupNCCL on device `local_rank` over `store` (a c10d::Store*, reference taken).
/// Returns 0 and a released c10d::Backend* in *out; 2 for a usage error (no such device), 1 otherwise,
/// with the message in err.
__attribute__((visibility("default"))) int meshrun_trainer_make_nccl_backend(c10d::Store* store, int rank,
                                                                             int world_size, int local_rank,
                                                                             long long timeout_ms, c10d::Backend** out,
                                                                             char* err, size_t err_len) {
  try {
    const int devices = c10::cuda::device_count();
    if (local_rank >= devices) {
      std::snprintf(err, err_len, "LOCAL_RANK=%d but this node has %d CUDA devices: lower --nproc-per-node", local_rank,
                    devices);
      return 2;
    }
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(local_rank));
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = std::chrono::milliseconds(timeout_ms);
    auto store_ptr = c10::intrusive_ptr<c10d::Store>::reclaim_copy(store);
    auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_ptr, rank, world_size, options);
    *out = pg.release();
    return 0;
  } catch (const c10::Error& e) {
    std::snprintf(err, err_len, "%s", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::snprintf(err, err_len, "%s", e.what());
  }
  return 1;
}

/// The caching allocator's aggregate figures for `device`: out = {allocated now, peak allocated, reserved}.
/// Returns 0, or 1 when the allocator cannot answer.
__attribute__((visibility("default"))) int meshrun_trainer_cuda_memory_stats(int device, long long* out) {
  try {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
    constexpr size_t kAggregate = 0;  // StatType::AGGREGATE: every pool together
    out[0] = stats.allocated_bytes[kAggregate].current;
    out[1] = stats.allocated_bytes[kAggregate].peak;
    out[2] = stats.reserved_bytes[kAggregate].current;
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

__attribute__((visibility("default"))) void meshrun_trainer_cuda_reset_peak_memory(int device) {
  try {
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
  } catch (const std::exception&) {
    // No allocator state yet: nothing to reset.
  }
}

}  // extern "C"
