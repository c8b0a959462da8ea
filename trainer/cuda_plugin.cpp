// libmeshrun_trainer_cuda.so: the only code of meshrun-trainer that links libtorch_cuda, c10_cuda and NCCL.
// meshrun-trainer dlopens it for GPU runs (see nccl_backend.hpp). One C entry point; errors come back as
// text so no C++ exception crosses the dlopen boundary.
#include <cstdio>
#include <exception>
#include <string>

#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

extern "C" {

/// Builds a ProcessGroupNCCL on device `local_rank` over `store` (a c10d::Store*, reference taken).
/// Returns 0 and a released c10d::Backend* in *out; 2 for a usage error (no such device), 1 otherwise,
/// with the message in err.
__attribute__((visibility("default"))) int meshrun_trainer_make_nccl_backend(c10d::Store* store, int rank,
                                                                           int world_size, int local_rank,
                                                                           long long timeout_ms,
                                                                           c10d::Backend** out, char* err,
                                                                           size_t err_len) {
  try {
    const int devices = c10::cuda::device_count();
    if (local_rank >= devices) {
      std::snprintf(err, err_len, "LOCAL_RANK=%d but this node has %d CUDA devices: lower --nproc-per-node",
                    local_rank, devices);
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

}  // extern "C"
