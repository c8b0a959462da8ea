// The CUDA side of the process group: c10d's ProcessGroupNCCL over our store. Rank 0 creates the
// ncclUniqueId and ProcessGroupNCCL passes it to the other ranks through that store, i.e. through the
// rendezvous daemon. Only compiled when CMake found CUDA and NCCL (MESHRUN_HAVE_NCCL).
#pragma once

#include <chrono>

#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace meshrun::trainer {

/// Throws meshrun::UsageError when the build has no NCCL.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int world_size, int local_rank,
                                                    std::chrono::milliseconds timeout);

}  // namespace meshrun::trainer
