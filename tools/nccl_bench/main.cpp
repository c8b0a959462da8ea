// meshrun-nccl-bench: an all-reduce bus-bandwidth sweep like nccl-tests' all_reduce_perf, one process
// per GPU, started by meshrun (or torchrun): `meshrun --nproc-per-node 8 ... --no-python meshrun-nccl-bench`.
// Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; rank 0's ncclUniqueId travels through
// the run's store (nccl_id_exchange.hpp); rank 0 prints the table (nccl_sweep.hpp). Built only with CUDA+NCCL.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "common/endpoint.hpp"
#include "common/error.hpp"
#include "common/run_main.hpp"
#include "proto/store/store_client.hpp"
#include "tools/nccl_bench/nccl_id_exchange.hpp"
#include "tools/nccl_bench/nccl_sweep.hpp"

namespace meshrun::tools {
namespace {

// CUDA and NCCL failures become exceptions with file:line; only main() catches.
class GpuError : public Error {
 public:
  using Error::Error;
};

#define MESHRUN_CUDA_CHECK(call)                                                                \
  do {                                                                                          \
    const cudaError_t err_ = (call);                                                            \
    if (err_ != cudaSuccess) {                                                                  \
      throw GpuError(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " #call ": " + \
                     cudaGetErrorString(err_));                                                 \
    }                                                                                           \
  } while (0)

#define MESHRUN_NCCL_CHECK(comm, call)                                                                                \
  do {                                                                                                                \
    const ncclResult_t res_ = (call);                                                                                 \
    if (res_ != ncclSuccess) {                                                                                        \
      const char* last_ = (comm) != nullptr ? ncclGetLastError(comm) : nullptr;                                       \
      throw GpuError(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " #call ": " +                       \
                     ncclGetErrorString(res_) + (last_ != nullptr && *last_ ? std::string(" (") + last_ + ")" : "") + \
                     " (NCCL_DEBUG=INFO shows why)");                                                                 \
    }                                                                                                                 \
  } while (0)

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  Endpoint master;
  std::string restart = "0";  // TORCHELASTIC_RESTART_COUNT: a new id key per restart of the job
};

std::string require_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    throw UsageError(std::string(name) +
                     " is not set: start meshrun-nccl-bench under meshrun (or torchrun), "
                     "one process per GPU, e.g. `meshrun --nproc-per-node 8 --no-python "
                     "meshrun-nccl-bench`");
  }
  return v;
}

int env_int(const char* name) {
  const std::string text = require_env(name);
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size() && v >= 0) return v;
  } catch (const std::exception&) {}
  throw UsageError(std::string(name) + "='" + text + "' is not a non-negative integer");
}

RankEnv read_env() {
  RankEnv env;
  env.rank = env_int("RANK");
  env.world_size = env_int("WORLD_SIZE");
  env.local_rank = env_int("LOCAL_RANK");
  env.master = Endpoint{require_env("MASTER_ADDR"), parse_port(require_env("MASTER_PORT"), "MASTER_PORT")};
  if (const char* r = std::getenv("TORCHELASTIC_RESTART_COUNT")) env.restart = r;
  if (env.world_size < 1 || env.rank >= env.world_size) {
    throw UsageError("RANK=" + std::to_string(env.rank) + " is not below WORLD_SIZE=" + std::to_string(env.world_size));
  }
  return env;
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { MESHRUN_CUDA_CHECK(cudaMalloc(&ptr_, bytes)); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

class Stream {
 public:
  Stream() { MESHRUN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class Communicator {
 public:
  Communicator(int world_size, const ncclUniqueId& id, int rank) {
    MESHRUN_NCCL_CHECK(comm_, ncclCommInitRank(&comm_, world_size, id, rank));
  }
  ~Communicator() {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ncclComm_t get() const { return comm_; }

 private:
  ncclComm_t comm_ = nullptr;
};

// Average seconds of one all-reduce of `count` floats, as the slowest rank saw it.
double time_allreduce(const Communicator& comm, const Stream& stream, void* send, void* recv, size_t count,
                      const SweepOptions& options, double* slowest_scratch) {
  for (int i = 0; i < options.warmup; ++i) {
    MESHRUN_NCCL_CHECK(comm.get(), ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm.get(), stream.get()));
  }
  MESHRUN_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < options.iters; ++i) {
    MESHRUN_NCCL_CHECK(comm.get(), ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm.get(), stream.get()));
  }
  MESHRUN_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / options.iters;
  // Ranks finish at slightly different times: report the slowest, as the collective is only as fast.
  MESHRUN_CUDA_CHECK(cudaMemcpy(slowest_scratch, &seconds, sizeof seconds, cudaMemcpyHostToDevice));
  MESHRUN_NCCL_CHECK(
      comm.get(), ncclAllReduce(slowest_scratch, slowest_scratch, 1, ncclFloat64, ncclMax, comm.get(), stream.get()));
  MESHRUN_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  MESHRUN_CUDA_CHECK(cudaMemcpy(&seconds, slowest_scratch, sizeof seconds, cudaMemcpyDeviceToHost));
  return seconds;
}

int run(const SweepOptions& options, double id_timeout_s) {
  const RankEnv env = read_env();
  const auto sizes = sweep_sizes(options, sizeof(float));

  int devices = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&devices); err != cudaSuccess || devices == 0) {
    throw GpuError(std::string("no usable CUDA device on this host: ") +
                   (err != cudaSuccess ? cudaGetErrorString(err) : "none visible") +
                   " (is the NVIDIA driver loaded? see nvidia-smi and CUDA_VISIBLE_DEVICES; between CPU nodes use "
                   "`meshrun check --bandwidth --peers N` instead)");
  }
  if (env.local_rank >= devices) {
    throw UsageError("LOCAL_RANK=" + std::to_string(env.local_rank) + " but only " + std::to_string(devices) +
                     " GPU(s) are visible (CUDA_VISIBLE_DEVICES?): use --nproc-per-node " + std::to_string(devices));
  }
  MESHRUN_CUDA_CHECK(cudaSetDevice(env.local_rank));

  proto::ConnectOptions connect;
  connect.connect_timeout = from_seconds(id_timeout_s);
  auto store = proto::StoreClient::connect(env.master, connect);
  ncclUniqueId id{};
  if (env.rank == 0) MESHRUN_NCCL_CHECK(nullptr, ncclGetUniqueId(&id));
  const std::string bytes =
      exchange_unique_id(store, "meshrun/nccl-bench/" + env.restart + "/unique_id", env.rank,
                         std::string(id.internal, sizeof id.internal), sizeof id.internal, from_seconds(id_timeout_s));
  std::copy(bytes.begin(), bytes.end(), id.internal);

  Communicator comm(env.world_size, id, env.rank);
  Stream stream;
  DeviceBuffer send(sizes.back());
  DeviceBuffer recv(sizes.back());
  DeviceBuffer scratch(sizeof(double));
  MESHRUN_CUDA_CHECK(cudaMemset(send.get(), 0, sizes.back()));

  if (env.rank == 0) {
    int nccl_version = 0;
    ncclGetVersion(&nccl_version);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, env.local_rank);
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    std::cout << "# meshrun-nccl-bench: all_reduce sum float, " << env.world_size << " rank(s), NCCL " << nccl_version
              << ", warmup " << options.warmup << ", iters " << options.iters << "\n"
              << "#  Rank  0 Pid " << ::getpid() << " on " << host << " device " << env.local_rank << " " << prop.name
              << "\n#\n"
              << sweep_header();
  }
  std::vector<SweepRow> rows;
  for (const uint64_t size : sizes) {
    SweepRow row;
    row.bytes = size;
    row.count = size / sizeof(float);
    row.out_of_place_us = 1e6 * time_allreduce(comm, stream, send.get(), recv.get(), row.count, options,
                                               static_cast<double*>(scratch.get()));
    row.in_place_us = 1e6 * time_allreduce(comm, stream, recv.get(), recv.get(), row.count, options,
                                           static_cast<double*>(scratch.get()));
    rows.push_back(row);
    if (env.rank == 0) std::cout << format_sweep_row(row, env.world_size, "float") << std::flush;
  }
  if (env.rank == 0) std::cout << sweep_footer(rows, env.world_size) << std::flush;
  return 0;
}

}  // namespace
}  // namespace meshrun::tools

int main(int argc, char** argv) {
  using namespace meshrun::tools;
  CLI::App app{
      "meshrun-nccl-bench: NCCL all-reduce bus bandwidth (like nccl-tests' all_reduce_perf); one "
      "process per GPU under meshrun"};
  SweepOptions options;
  std::string min_bytes = "8";
  std::string max_bytes = "256M";
  double id_timeout_s = 120;
  app.add_option("-b,--minbytes", min_bytes, "Smallest message (K, M, G suffixes)")->capture_default_str();
  app.add_option("-e,--maxbytes", max_bytes, "Largest message")->capture_default_str();
  app.add_option("-f,--stepfactor", options.factor, "Size multiplier between steps")
      ->capture_default_str()
      ->check(CLI::Range(2, 1024));
  app.add_option("-n,--iters", options.iters, "Timed iterations per size")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("-w,--warmup_iters", options.warmup, "Untimed iterations per size")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  app.add_option("--id-timeout", id_timeout_s, "Seconds to reach the store and receive rank 0's NCCL id")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 3600.0));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return meshrun::run_main("meshrun-nccl-bench", [&] {
    options.min_bytes = parse_size(min_bytes);
    options.max_bytes = parse_size(max_bytes);
    return run(options, id_timeout_s);
  });
}
