// The CUDA side of the process group: c10d's ProcessGroupNCCL over our store. Rank 0 creates the
// ncclUniqueId and ProcessGroupNCCL passes it to the other ranks through that store, i.e. through the
// rendezvous daemon.
//
// The CUDA code lives in a plugin, libmeshrun_trainer_cuda.so (trainer/cuda_plugin.cpp), built when CMake
// found CUDA and NCCL and linked against libtorch_cuda. meshrun-trainer itself links only libtorch_cpu and
// dlopens the plugin when a run asks for a GPU: merely loading libtorch_cuda and the CUDA libraries it
// pulls in costs a CPU process ~250 MB of resident memory (measured), which would otherwise swamp the
// memory that sharding saves. Loading the plugin also registers LibTorch's CUDA hooks and kernels, so
// at::hasCUDA() and CUDA tensors work from then on.
#pragma once

#include <chrono>
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
                                                    int world_size, int local_rank,
                                                    std::chrono::milliseconds timeout);

}  // namespace meshrun::trainer
