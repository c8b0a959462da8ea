#include "trainer/checkpoint/memory_checkpointer.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/error.hpp"
#include "proto/worker/memory_copy.hpp"
#include "trainer/checkpoint/atomic_file.hpp"
#include "trainer/checkpoint/checkpoint_files.hpp"
#include "trainer/distributed/communicator.hpp"
#include "trainer/faults/fault_hooks.hpp"
#include "trainer/fsdp/adamw.hpp"
#include "trainer/fsdp/sharded_model.hpp"

namespace meshrun::trainer {
namespace {

using nlohmann::json;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t round_up_page(uint64_t n) { return (n + proto::kHeaderBytes - 1) / proto::kHeaderBytes * proto::kHeaderBytes; }

}  // namespace

// The run a copy belongs to: the model, the data and the training settings. A copy of another run's model
// (a changed config between attempts) is never restored.
uint64_t memory_copy_digest(const TrainerConfig& config) {
  uint64_t digest = proto::fnv1a64("", 0);
  for (const char* section : {"model", "data", "train"}) {
    const std::string text = config.merged.at(section).dump();
    digest = proto::fnv1a64(text.data(), text.size(), digest);
  }
  return digest;
}

std::unique_ptr<MemoryCheckpointer> MemoryCheckpointer::create(const TrainerConfig& config, ShardedModel& model,
                                                               AdamW& optimizer, Communicator& world,
                                                               const std::string& socket,
                                                               const std::atomic<int64_t>& training_step) {
  std::unique_ptr<MemoryCheckpointer> made;
  std::string why;
  try {
    // Every rank copies its own state, replicas included: each restores from its own agent.
    std::vector<Piece> pieces;
    const auto units = model.units();
    for (size_t i = 0; i < units.size(); ++i) {
      const auto [lo, hi] = local_range(*units[i]);
      if (lo >= hi) continue;
      for (int k = 0; k < kCheckpointKindCount; ++k) {
        const at::Tensor& source = kind_tensor(*units[i], optimizer, i, k);
        if (source.is_cuda())
          throw Error(
              "copies in memory of shards on a GPU are not built yet (fsdp.cpu_offload=true keeps them in host "
              "memory)");
        if (!source.is_contiguous() || source.scalar_type() != at::kFloat)
          throw Error("internal: copies in memory need contiguous fp32 shards and moments");
        pieces.push_back(
            {&units[i]->spec(), i, k, lo, hi, source.const_data_ptr<float>() + (lo - units[i]->shard_offset())});
      }
    }
    made.reset(
        new MemoryCheckpointer(config, world, std::move(pieces), std::make_unique<AgentLink>(socket), training_step));
    made->unit_count_ = units.size();
  } catch (const std::exception& e) {
    why = e.what();
  }
  // The largest copy of any rank (ranks' shards differ: the last one's chunks end early): the buddy takes no
  // larger push. One number per rank, agreed by every rank whatever happened above.
  std::vector<double> sizes(static_cast<size_t>(world.world_size()), 0.0);
  sizes[static_cast<size_t>(world.rank())] = made ? static_cast<double>(made->slot_bytes_) : 0.0;
  const auto all = world.sum_over_ranks(std::move(sizes));
  if (made && why.empty()) {
    for (const double s : all)
      made->largest_slot_bytes_ = std::max(made->largest_slot_bytes_, static_cast<uint64_t>(s));
    try {
      why = made->say_hello(model);
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  const auto failure = world.first_failure(why);
  if (world.rank() == 0) {
    if (failure) {
      std::printf("checkpoint: copies in memory are off: rank %d: %s; storage checkpoints only\n", failure->rank,
                  failure->message.c_str());
    } else {
      std::printf("checkpoint: a copy in the meshrun agent's memory every %lld steps (2 slots of %.1f MiB per rank)\n",
                  static_cast<long long>(config.checkpoint.memory_interval),
                  static_cast<double>(made->slot_bytes_) / (1 << 20));
    }
    std::fflush(stdout);
  }
  if (failure) return nullptr;
  made->writer_ = std::make_unique<BackgroundWriter>();
  return made;
}

MemoryCheckpointer::MemoryCheckpointer(const TrainerConfig& config, Communicator& world, std::vector<Piece> pieces,
                                       std::unique_ptr<AgentLink> link, const std::atomic<int64_t>& training_step)
    : world_(world),
      pieces_(std::move(pieces)),
      link_(std::move(link)),
      training_step_(training_step),
      digest_(memory_copy_digest(config)),
      world_size_(world.world_size()) {
  for (const auto& p : pieces_) payload_bytes_ += static_cast<uint64_t>(p.hi - p.lo) * sizeof(float);
  // Offsets never change between copies; only the CRCs do, in digits: the index's room is its widest text.
  index_capacity_ = round_up_page(chunk_index(nullptr).dump().size() + 256);
  slot_bytes_ = proto::slot_bytes(index_capacity_, payload_bytes_);
}

MemoryCheckpointer::~MemoryCheckpointer() {
  writer_.reset();  // before the slots it writes into go
  for (const auto& slot : slots_) ::munmap(slot.data, slot.bytes);
  if (pushed_step_ != nullptr) ::munmap(const_cast<std::atomic<int64_t>*>(pushed_step_), proto::kHeaderBytes);
}

std::string MemoryCheckpointer::say_hello(ShardedModel& model) {
  layout_ = model.layout();
  const proto::CopyShape shape{.world_size = world_size_,
                               .layout = layout_,
                               .slot_bytes = slot_bytes_,
                               .largest_slot_bytes = largest_slot_bytes_,  // the buddy takes no larger push
                               .digest = digest_};
  AgentReply reply = link_->request(proto::HandoverRequest::hello(world_.rank(), shape));
  if (reply.message.kind != proto::HandoverReply::Kind::kGranted)
    return "the meshrun agent refused: " + proto::describe(reply.message);
  if (reply.fds.size() != 3 || reply.message.slot_bytes < slot_bytes_)
    return "the meshrun agent lent " + std::to_string(reply.fds.size()) + " descriptor(s) and slots of " +
           std::to_string(reply.message.slot_bytes) + " bytes; a copy needs 2 slots of " + std::to_string(slot_bytes_) +
           " and a control block";
  const size_t bytes = reply.message.slot_bytes;
  void* control = ::mmap(nullptr, proto::kHeaderBytes, PROT_READ, MAP_SHARED, reply.fds.back().get(), 0);
  if (control == MAP_FAILED) return std::string("cannot map the agent's control block: ") + std::strerror(errno);
  pushed_step_ = static_cast<const std::atomic<int64_t>*>(control);
  reply.fds.pop_back();
  for (auto& fd : reply.fds) {
    // Populated now, so the first copy pays no page faults.
    void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
    if (data == MAP_FAILED) return std::string("cannot map a slot the meshrun agent lent: ") + std::strerror(errno);
    slots_.push_back({data, bytes});
    slot_fds_.push_back(std::move(fd));
  }
  return "";
}

json MemoryCheckpointer::chunk_index(const std::vector<uint32_t>* crcs) const {
  ChunkIndex index("rank" + std::to_string(world_.rank()) + ".bin");
  uint64_t at = 0;
  size_t n = 0;
  for (const auto& p : pieces_) {
    for_each_param_slice(*p.spec, p.lo, p.hi, [&](const ParamSlice& slice) {
      index.add(p.kind, *p.spec, slice, at, crcs != nullptr ? (*crcs)[n] : 4294967295U);
      at += static_cast<uint64_t>(slice.count) * sizeof(float);
      ++n;
    });
  }
  return std::move(index).to_json(payload_bytes_);
}

void MemoryCheckpointer::resumed_from(int64_t step, const std::string& source) {
  try {
    link_->tell(proto::HandoverRequest::restored(step, source));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint: rank %d could not tell its agent where training resumes: %s\n", world_.rank(),
                 e.what());
  }
}

void MemoryCheckpointer::start(const TrainState& state) {
  // The gate holds until the copy is sealed: it reads the live shards to its last byte.
  writer_->submit([this, state] { copy_job(state); }, /*holds_gate=*/true);
  in_flight_ = true;
  gate_pending_ = true;
  blocked_ = 0;
}

void MemoryCheckpointer::before_update() {
  if (!gate_pending_) return;
  blocked_ = writer_->wait_for_gate();
  gate_pending_ = false;
}

std::array<double, 2> MemoryCheckpointer::status() const {
  const bool pushed = durable_pending_ > 0 && pushed_step_->load(std::memory_order_relaxed) >= durable_pending_;
  const bool sealed = in_flight_ && writer_->state().idle && copied_.skipped.empty();
  return {sealed ? 1.0 : 0.0, pushed ? 1.0 : 0.0};
}

std::optional<MemoryCopyStats> MemoryCheckpointer::advance(double sealed_sum, double pushed_sum) {
  if (durable_pending_ > 0 && pushed_sum >= static_cast<double>(world_size_)) {
    try {
      link_->tell(proto::HandoverRequest::durable(durable_pending_));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "checkpoint: rank %d could not mark step %lld durable: %s\n", world_.rank(),
                   static_cast<long long>(durable_pending_), e.what());
    }
    durable_pending_ = 0;
  }
  if (!in_flight_ || gate_pending_) return std::nullopt;
  in_flight_ = false;
  MemoryCopyStats stats = copied_;  // the gate passed: the job ended
  stats.blocked_seconds = blocked_;
  ++copies_decided_;
  if (!stats.skipped.empty()) say_skipped(stats);
  if (sealed_sum < static_cast<double>(world_size_)) return stats;
  try {
    link_->tell(proto::HandoverRequest::commit(stats.step));
    stats.committed = true;
    durable_pending_ = stats.step;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint: rank %d could not commit its copy in memory of step %lld: %s\n", world_.rank(),
                 static_cast<long long>(stats.step), e.what());
  }
  return stats;
}

// Never releases the gate early: the copy reads the live shards to its last byte, and advance() reads copied_
// once the gate passed.
void MemoryCheckpointer::copy_job(const TrainState& state) {
  MemoryCopyStats stats;
  stats.step = state.step;
  const double begin = now_seconds();
  try {
    stats.skipped = copy(state, stats);
  } catch (const std::exception& e) {
    stats.skipped = e.what();  // a copy that fails skips this step; training and storage saves go on
  }
  stats.copy_seconds = now_seconds() - begin;
  copied_ = stats;
}

namespace {

// The fix a skip calls for, when the reason is one: the agent keeps two slots per rank, and a copy made at every
// step finds both still holding the newest committed and the newest durable copy.
constexpr const char* kSlotsInUseFix =
    "copy less often (checkpoint.memory_interval=2 or more: the agent keeps two slots per rank, and the newest "
    "committed copy and the newest on every buddy must stay)";

}  // namespace

void MemoryCheckpointer::say_skipped(const MemoryCopyStats& stats) {
  if (stats.slots_in_use) ++skipped_in_use_;
  std::string text = "checkpoint: rank " + std::to_string(world_.rank()) + " made no copy in memory of step " +
                     std::to_string(stats.step) + ": " + stats.skipped;
  if (stats.slots_in_use) text += "; " + std::string(kSlotsInUseFix);
  if (const auto line = skipped_notice_.occurred(text)) std::fprintf(stderr, "%s\n", line->c_str());
}

std::string MemoryCheckpointer::skipped_summary() const {
  const int64_t skipped = skipped_notice_.count();
  if (skipped == 0) return {};
  std::string text = "checkpoint: rank " + std::to_string(world_.rank()) + " made no copy in memory at " +
                     std::to_string(skipped) + " of " + std::to_string(copies_decided_) + " copy steps";
  if (skipped_in_use_ > 0) {
    text += " (" + std::to_string(skipped_in_use_) + " of them because every slot held a copy that must stay); " +
            kSlotsInUseFix;
  }
  return text;
}

std::string MemoryCheckpointer::copy(const TrainState& state, MemoryCopyStats& stats) {
  const AgentReply lent = link_->request(proto::HandoverRequest::begin(state.step));
  if (lent.message.kind != proto::HandoverReply::Kind::kLend) {
    stats.slots_in_use = lent.message.kind == proto::HandoverReply::Kind::kBusy;
    return "the agent lent no slot: " + proto::describe(lent.message);
  }
  const int slot = lent.message.slot;
  if (slot < 0 || static_cast<size_t>(slot) >= slots_.size()) return "the agent lent slot " + std::to_string(slot);
  auto* base = static_cast<char*>(slots_[static_cast<size_t>(slot)].data);

  proto::CopyHeader header;
  std::memcpy(header.magic, proto::kCopyMagic, sizeof header.magic);
  header.state = proto::CopyState::kWriting;
  header.step = state.step;
  header.optimizer_steps = state.optimizer_steps;
  header.rank = world_.rank();
  header.world_size = world_size_;
  header.shard_index = world_.rank();
  header.shard_count = world_size_;
  header.config_digest = digest_;
  header.index_offset = proto::kHeaderBytes;
  header.index_capacity = index_capacity_;
  header.payload_offset = proto::kHeaderBytes + index_capacity_;
  header.payload_bytes = payload_bytes_;
  std::snprintf(header.layout, sizeof header.layout, "%s", layout_.c_str());
  std::memcpy(base, &header, sizeof header);  // "writing" until the last byte is in

  // Raw pointers only: this thread never calls into ATen.
  char* payload = base + header.payload_offset;
  std::vector<uint32_t> crcs;
  const FaultSite site{state.step, world_.rank()};
  for (const auto& p : pieces_) {
    for_each_param_slice(*p.spec, p.lo, p.hi, [&](const ParamSlice& slice) {
      const size_t n = static_cast<size_t>(slice.count) * sizeof(float);
      std::memcpy(payload, p.source + (slice.at - p.lo), n);
      crcs.push_back(crc32_of(payload, n));  // cache-hot
      payload += n;
    });
    if (p.unit == unit_count_ / 2 && p.kind == 0) {
      kill_if_asked("MESHRUN_TRAINER_FAULT_KILL_IN_MEMORY_COPY", site);
      stall_if_asked("MESHRUN_TRAINER_FAULT_STALL_IN_MEMORY_COPY", site);
    }
  }
  const std::string index = chunk_index(&crcs).dump();
  if (index.size() > index_capacity_) return "internal: the copy's index outgrew its room";
  std::memcpy(base + proto::kHeaderBytes, index.data(), index.size());
  header.index_bytes = index.size();
  header.state = proto::CopyState::kSealed;
  header.header_check = proto::header_check_of(header);
  // Every field but the state, then the state: a copy cut short anywhere before says "writing".
  proto::CopyHeader unsealed = header;
  unsealed.state = proto::CopyState::kWriting;
  std::memcpy(base, &unsealed, sizeof unsealed);
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(base + offsetof(proto::CopyHeader, state), &header.state, sizeof header.state);
  // A request, not a note: only a copy the agent checked and kept counts as sealed in the all-reduce.
  const AgentReply kept = link_->request(proto::HandoverRequest::sealed(state.step, slot));
  if (kept.message.kind != proto::HandoverReply::Kind::kKept)
    return "the agent did not keep the copy: " + proto::describe(kept.message);
  stats.bytes = static_cast<int64_t>(payload_bytes_);
  stats.sealed_during_step = training_step_.load();
  return "";
}

}  // namespace meshrun::trainer
