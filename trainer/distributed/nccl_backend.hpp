// The CUDA side of the process group: c10d's ProcessGroupNCCL over our store. Rank 0 creates the
// ncclUniqueId and ProcessGroupNCCL passes it to the other ranks through that store, i.e. through the
// rendezvous daemon.
//
// The CUDA code lives in a plugin, libmeshrun_trainer_cuda.so (trainer/distributed/cuda_plugin.cpp), built when CMake
// found CUDA and NCCL and linked against libtorch_cuda. meshrun-trainer itself links only libtorch_cpu and
// dlopens the plugin when a run asks for a GPU: merely loading libtorch_cuda and the CUDA libraries it
// pulls in costs a CPU process ~250 MB of resident memory (measured), which would otherwise swamp the
// memory that sharding saves. Loading the plugin also registers LibTorch's CUDA hooks and kernels, so
// at::hasCUDA() and CUDA tensors work from then on.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace meshrun::trainer {

/// Loads the CUDA plugin (and with it libtorch_cuda) when `device` (system.device) may use a GPU: always
/// for "cuda" (throws UsageError naming the reason when it cannot), for "auto" only when an NVIDIA driver
/// is present (a failure then leaves the run on the CPU), never for "cpu". Returns whether it is loaded.
bool load_cuda_plugin(const std::string& device);

/// ProcessGroupNCCL from the plugin. Throws meshrun::UsageError when the build has no NCCL or the plugin
/// is not loaded, and meshrun::Error with the plugin's message when it fails.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int world_size, int local_rank, std::chrono::milliseconds timeout);

/// The CUDA caching allocator's figures for one device, in bytes.
struct CudaMemoryStats {
  int64_t allocated = 0;       // held by live tensors now
  int64_t peak_allocated = 0;  // since the start or the last reset_cuda_peak_memory
  int64_t reserved = 0;        // taken from the driver (allocated + cached)
};

/// All zero when the plugin is not loaded.
CudaMemoryStats cuda_memory_stats(int device);
void reset_cuda_peak_memory(int device);

}  // namespace meshrun::trainer
