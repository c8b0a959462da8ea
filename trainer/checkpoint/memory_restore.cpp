#include "trainer/checkpoint/memory_restore.hpp"

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "common/error.hpp"
#include "proto/memory_copy.hpp"
#include "trainer/checkpoint/atomic_file.hpp"
#include "trainer/checkpoint/checkpoint_files.hpp"
#include "trainer/checkpoint/memory_checkpointer.hpp"
#include "trainer/distributed/communicator.hpp"

namespace meshrun::trainer {
namespace {

using nlohmann::json;

// A slot mapped read-only for the restore.
class MappedCopy {
 public:
  MappedCopy(int fd, const std::string& label) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || st.st_size <= 0) throw Error(label + ": the agent's slot has no size");
    bytes_ = static_cast<size_t>(st.st_size);
    data_ = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd, 0);
    if (data_ == MAP_FAILED) throw Error(label + ": cannot map the agent's slot: " + std::strerror(errno));
  }
  ~MappedCopy() { ::munmap(data_, bytes_); }
  MappedCopy(const MappedCopy&) = delete;
  MappedCopy& operator=(const MappedCopy&) = delete;
  const char* data() const { return static_cast<const char*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// The steps the agent can give this rank, newest first (none when it cannot say, and why).
std::vector<int64_t> held_steps(AgentLink& agent, MemoryRestore& out) {
  try {
    // The agent may wait for every node's inventory (up to 10 s) before it answers.
    const AgentReply reply = agent.request({{"op", "plan"}}, std::chrono::seconds(30));
    auto steps = reply.message.value("candidates", std::vector<int64_t>{});
    out.steps_done = reply.message.value("steps_done", int64_t{0});
    out.why_not = reply.message.value("why_none", "");
    std::sort(steps.rbegin(), steps.rend());
    return steps;
  } catch (const std::exception& e) {
    out.why_not = e.what();
    return {};
  }
}

// The newest step every rank holds: rank 0 proposes its steps newest first, every rank says whether it holds
// the proposal. -1 when no step is held by every rank.
int64_t agree_on_step(Communicator& world, const std::vector<int64_t>& held) {
  for (size_t i = 0;; ++i) {
    const int64_t proposal = world.broadcast_value(i < held.size() ? held[i] : -1, 0);
    if (proposal < 0) return -1;
    const bool have = std::find(held.begin(), held.end(), proposal) != held.end();
    if (world.sum_over_ranks({have ? 1.0 : 0.0})[0] == world.world_size()) return proposal;
  }
}

// Every check of a copy before a byte of it is loaded: the header, whose copy it is, and every chunk's CRC.
json checked_index(const MappedCopy& copy, int64_t step, int rank, int world_size, uint64_t digest,
                   const std::string& label) {
  if (const std::string why = proto::validate_header(copy.data(), copy.bytes()); !why.empty())
    throw Error(label + " is unusable: " + why);
  proto::CopyHeader h;
  std::memcpy(&h, copy.data(), sizeof h);
  if (h.step != step || h.rank != rank || h.world_size != world_size)
    throw Error(label + " holds step " + std::to_string(h.step) + " of rank " + std::to_string(h.rank) + " of " +
                std::to_string(h.world_size));
  if (h.config_digest != digest) throw Error(label + " is of another model, data or training config");
  json index = json::parse(copy.data() + h.index_offset, copy.data() + h.index_offset + h.index_bytes, nullptr, false);
  if (!index.is_object() || !index.contains("chunks")) throw Error(label + ": its chunk index is not JSON");
  const char* payload = copy.data() + h.payload_offset;
  for (const auto& [name, chunks] : index["chunks"].items()) {
    for (const auto& c : chunks) {
      const uint64_t offset = c.at("offset").get<uint64_t>();
      const size_t n = c.at("count").get<size_t>() * sizeof(float);
      if (offset + n > h.payload_bytes || crc32_of(payload + offset, n) != c.at("crc32").get<uint32_t>())
        throw Error(label + " is damaged: the CRC-32 of " + name + " does not match");
    }
  }
  index["payload_offset"] = h.payload_offset;
  index["optimizer_steps"] = h.optimizer_steps;
  return index;
}

// A reader over this rank's copy of `step`: metadata as a storage checkpoint's, bytes from the mapping.
CheckpointReader open_copy(AgentLink& agent, const TrainerConfig& config, Communicator& world, int64_t step,
                           uint64_t digest, std::shared_ptr<MappedCopy>& mapping, bool& fetched) {
  const std::string label =
      "the copy in memory of step " + std::to_string(step) + " (rank " + std::to_string(world.rank()) + ")";
  // A copy on another node is fetched first: a transfer's worth of time.
  const AgentReply reply = agent.request({{"op", "open"}, {"step", step}}, std::chrono::seconds(120));
  fetched = reply.message.value("source", "own") != "own";
  if (reply.message.value("op", "") != "copy" || reply.fds.empty())
    throw Error(label + ": the agent says " + reply.message.value("reason", reply.message.dump()));
  mapping = std::make_shared<MappedCopy>(reply.fds.front().get(), label);
  const json index = checked_index(*mapping, step, world.rank(), world.world_size(), digest, label);
  json tensors = empty_tensor_table(config.model);
  for (const auto& [name, chunks] : index["chunks"].items()) {
    for (const auto& c : chunks) tensors.at(name)["chunks"].push_back(c);
  }
  json meta = {{"step", step}, {"optimizer_steps", index["optimizer_steps"]}, {"tensors", std::move(tensors)}};
  const char* payload = mapping->data() + index["payload_offset"].get<uint64_t>();
  // checked_index verified every chunk's CRC before any rank loads a byte: the reader does not again.
  return CheckpointReader(
      label, std::move(meta),
      [payload](const std::string&, uint64_t offset, size_t n, void* dst) { std::memcpy(dst, payload + offset, n); },
      /*chunks_verified=*/true);
}

}  // namespace

MemoryRestore restore_from_memory(AgentLink& agent, const TrainerConfig& config, ShardedModel& model, AdamW& optimizer,
                                  Communicator& world, std::optional<int64_t> storage_step) {
  MemoryRestore out;
  const std::vector<int64_t> held = held_steps(agent, out);
  const int64_t step = agree_on_step(world, held);
  if (step < 0) {
    if (out.why_not.empty() && !held.empty()) out.why_not = "no step is held in memory for every rank";
    return out;
  }
  out.why_not.clear();
  // Rank 0's view of storage decides for all: node-local folders or a lagging file system must not split them.
  const int64_t storage = world.broadcast_value(storage_step.value_or(-1), 0);
  if (storage >= step) {
    out.why_not = "the storage checkpoint of step " + std::to_string(storage) +
                  " is at least as new as the newest step in memory, " + std::to_string(step);
    return out;
  }
  std::shared_ptr<MappedCopy> mapping;
  const uint64_t digest = memory_copy_digest(config);
  try {
    bool fetched = false;
    const auto open = [&] { return open_copy(agent, config, world, step, digest, mapping, fetched); };
    out.state = load_from(open, "memory", config, model, optimizer, world, &out.stats);
    out.fetched_ranks = static_cast<int>(world.sum_over_ranks({fetched ? 1.0 : 0.0})[0]);
  } catch (const std::exception& e) {
    // load_from changes nothing until every rank has opened and checked its copy.
    out.why_not = e.what();
  }
  return out;
}

}  // namespace meshrun::trainer
