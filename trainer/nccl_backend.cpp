#include "trainer/nccl_backend.hpp"

#include "common/error.hpp"

#if MESHRUN_HAVE_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace meshrun::trainer {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int world_size, int local_rank,
                                                    std::chrono::milliseconds timeout) {
#if MESHRUN_HAVE_NCCL
  if (local_rank >= c10::cuda::device_count()) {
    throw UsageError("LOCAL_RANK=" + std::to_string(local_rank) + " but this node has " +
                     std::to_string(c10::cuda::device_count()) + " CUDA devices: lower --nproc-per-node");
  }
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(local_rank));
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
#else
  (void)store, (void)rank, (void)world_size, (void)local_rank, (void)timeout;
  throw UsageError("this meshrun-trainer was built without CUDA/NCCL: use system.backend=gloo");
#endif
}

}  // namespace meshrun::trainer
