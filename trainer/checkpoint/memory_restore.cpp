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
#include "proto/worker/memory_copy.hpp"
#include "proto/worker/memory_handover.hpp"
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

using proto::HeldStep;  // a step the agent can give this rank, in the layout of a `world_size` world

// What the agent can give this rank, newest first (none when it cannot say, and why).
std::vector<HeldStep> held_steps(AgentLink& agent, MemoryRestore& out) {
  try {
    // The agent may wait for every node's inventory (up to 10 s) before it answers.
    const AgentReply reply = agent.request(proto::HandoverRequest::plan(), std::chrono::seconds(30));
    out.steps_done = reply.message.steps_done;
    out.why_not = reply.message.reason;
    return reply.message.held;  // in the agent's order: newest first, this world's layout first at a step
  } catch (const std::exception& e) {
    out.why_not = e.what();
    return {};
  }
}

// The newest step every rank holds: rank 0 proposes its steps in order, every rank says whether it holds
// the proposal. nullopt when no step is held by every rank.
std::optional<HeldStep> agree_on_step(Communicator& world, const std::vector<HeldStep>& held) {
  for (size_t i = 0;; ++i) {
    const HeldStep mine = i < held.size() ? held[i] : HeldStep{-1, 0};
    const HeldStep proposal{world.broadcast_value(mine.step, 0),
                            static_cast<int>(world.broadcast_value(mine.world_size, 0))};
    if (proposal.step < 0) return std::nullopt;
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
      const uint64_t count = c.at("count").get<uint64_t>();
      // A count or an offset past the payload is refused before any multiplication or sum could wrap.
      if (count > h.payload_bytes / sizeof(float) ||
          !proto::range_within(offset, count * sizeof(float), h.payload_bytes))
        throw Error(label + " is damaged: a chunk of " + name + " lies outside its payload");
      if (crc32_of(payload + offset, count * sizeof(float)) != c.at("crc32").get<uint32_t>())
        throw Error(label + " is damaged: the CRC-32 of " + name + " does not match");
    }
  }
  index["payload_offset"] = h.payload_offset;
  index["optimizer_steps"] = h.optimizer_steps;
  return index;
}

// A reader over the copies of `step` this rank restores from: its own copy in the round's layout (`from` is
// nothing), or, after the job shrank or grew, every rank's copy of the `from`-rank world, whose chunks cover
// every tensor as the ranks' files of a storage checkpoint do: the load reads the ranges it needs (a
// reshard). Metadata as a storage checkpoint's, bytes from the mappings.
CheckpointReader open_copies(AgentLink& agent, const TrainerConfig& config, Communicator& world, HeldStep held,
                             uint64_t digest, std::vector<std::shared_ptr<MappedCopy>>& mappings, int& fetched) {
  const bool reshard = held.world_size != world.world_size();
  const int first = reshard ? 0 : world.rank();
  const int last = reshard ? held.world_size : world.rank() + 1;
  json tensors = empty_tensor_table(config.model);
  std::map<std::string, const char*> payloads;  // rank<R>.bin -> its bytes
  json optimizer_steps;
  for (int r = first; r < last; ++r) {
    const std::string label = "the copy in memory of step " + std::to_string(held.step) + " (rank " +
                              std::to_string(r) + " of " + std::to_string(held.world_size) + ")";
    const auto request =
        reshard ? proto::HandoverRequest::open(held.step, r, held.world_size) : proto::HandoverRequest::open(held.step);
    // A copy on another node is fetched first: a transfer's worth of time.
    const AgentReply reply = agent.request(request, std::chrono::seconds(120));
    if (reply.message.kind != proto::HandoverReply::Kind::kCopy || reply.fds.empty())
      throw Error(label + ": the agent says " + proto::describe(reply.message));
    if (reply.message.from_node >= 0) ++fetched;
    mappings.push_back(std::make_shared<MappedCopy>(reply.fds.front().get(), label));
    const json index = checked_index(*mappings.back(), held.step, r, held.world_size, digest, label);
    for (const auto& [name, chunks] : index["chunks"].items()) {
      auto& list = tensors.at(name)["chunks"];
      for (const auto& c : chunks) {
        // Replicas (HYBRID, NO_SHARD) hold the same ranges: one copy of each range is read.
        const bool seen =
            std::any_of(list.begin(), list.end(), [&](const json& o) { return o["begin"] == c["begin"]; });
        if (!seen) list.push_back(c);
      }
    }
    payloads[index["file"].get<std::string>()] = mappings.back()->data() + index["payload_offset"].get<uint64_t>();
    optimizer_steps = index["optimizer_steps"];
  }
  if (reshard) check_chunks_tile(tensors);  // every tensor whole, or the copies are not a checkpoint
  json meta = {{"step", held.step}, {"optimizer_steps", optimizer_steps}, {"tensors", std::move(tensors)}};
  const std::string label = "the copies in memory of step " + std::to_string(held.step);
  // checked_index verified every chunk's CRC before any rank loads a byte: the reader does not again.
  return CheckpointReader(
      label, std::move(meta),
      [payloads](const std::string& file, uint64_t offset, size_t n, void* dst) {
        const auto it = payloads.find(file.substr(file.rfind('/') + 1));
        if (it == payloads.end()) throw Error("internal: no copy in memory holds " + file);
        std::memcpy(dst, it->second + offset, n);
      },
      /*chunks_verified=*/true);
}

}  // namespace

MemoryRestore restore_from_memory(AgentLink& agent, const TrainerConfig& config, ShardedModel& model, AdamW& optimizer,
                                  Communicator& world, std::optional<int64_t> storage_step) {
  MemoryRestore out;
  const std::vector<HeldStep> held = held_steps(agent, out);
  const auto chosen = agree_on_step(world, held);
  if (!chosen) {
    if (out.why_not.empty() && !held.empty()) out.why_not = "no step is held in memory for every rank";
    return out;
  }
  out.why_not.clear();
  const int64_t step = chosen->step;
  // Rank 0's view of storage decides for all: node-local folders or a lagging file system must not split them.
  const int64_t storage = world.broadcast_value(storage_step.value_or(-1), 0);
  if (storage >= step) {
    out.why_not = "the storage checkpoint of step " + std::to_string(storage) +
                  " is at least as new as the newest step in memory, " + std::to_string(step);
    return out;
  }
  std::vector<std::shared_ptr<MappedCopy>> mappings;
  const uint64_t digest = memory_copy_digest(config);
  try {
    int fetched = 0;
    const auto open = [&] { return open_copies(agent, config, world, *chosen, digest, mappings, fetched); };
    out.state = load_from(open, "memory", config, model, optimizer, world, &out.stats);
    out.fetched_ranks = static_cast<int>(world.sum_over_ranks({fetched > 0 ? 1.0 : 0.0})[0]);
    out.resharded_from = chosen->world_size != world.world_size() ? chosen->world_size : 0;
  } catch (const std::exception& e) {
    // load_from changes nothing until every rank has opened and checked its copies.
    out.why_not = e.what();
  }
  return out;
}

}  // namespace meshrun::trainer
