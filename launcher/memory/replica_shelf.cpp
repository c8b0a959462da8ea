#include "launcher/memory/replica_shelf.hpp"

#include <algorithm>

namespace meshrun::launcher {

using State = ReplicaView::State;

ReplicaShelf::Placement ReplicaShelf::place(int rank, int64_t step, int64_t round) {
  auto& slots = slots_[rank];
  if (slots.empty()) slots.resize(kSlotsPerRank);
  std::optional<int> newest;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].state == State::kFilling) return {std::nullopt, false, "a push of this rank is in progress"};
    if (slots[i].state != State::kComplete) continue;
    if (slots[i].step == step && slots[i].round == round) return {static_cast<int>(i), true, ""};
    if (slots[i].step == step) {  // the same step of an earlier round: training redid it, this copy replaces it
      slots[i] = {State::kFilling, step, 0, 0, round};
      return {static_cast<int>(i), false, ""};
    }
    if (!newest || slots[i].step > slots[static_cast<size_t>(*newest)].step) newest = static_cast<int>(i);
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    if (newest && static_cast<int>(i) == *newest) continue;
    slots[i] = {State::kFilling, step, 0, 0, round};
    return {static_cast<int>(i), false, ""};
  }
  return {std::nullopt, false, "no replica slot is free"};
}

void ReplicaShelf::complete(int rank, int slot, const ReplicaView& copy) {
  auto& s = slots_[rank].at(static_cast<size_t>(slot));
  s = copy;
  s.state = State::kComplete;
}

void ReplicaShelf::failed(int rank, int slot) { slots_[rank].at(static_cast<size_t>(slot)) = ReplicaView{}; }

std::optional<int> ReplicaShelf::slot_of(int rank, int64_t step) const {
  const auto it = slots_.find(rank);
  if (it == slots_.end()) return std::nullopt;
  for (size_t i = 0; i < it->second.size(); ++i) {
    if (it->second[i].state == State::kComplete && it->second[i].step == step) return static_cast<int>(i);
  }
  return std::nullopt;
}

std::vector<ReplicaHeld> ReplicaShelf::held() const {
  std::vector<ReplicaHeld> out;
  for (const auto& [rank, slots] : slots_) {
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].state == State::kComplete) out.push_back({rank, static_cast<int>(i), slots[i]});
    }
  }
  return out;
}

std::vector<int> ReplicaShelf::stale(int64_t durable_step, int64_t round) const {
  std::vector<int> out;
  for (const auto& [rank, slots] : slots_) {
    const bool renewable = std::any_of(slots.begin(), slots.end(), [&](const ReplicaView& s) {
      return s.state == State::kFilling ||
             (s.state == State::kComplete && (s.step >= durable_step || s.round >= round));
    });
    if (!renewable) out.push_back(rank);
  }
  return out;
}

}  // namespace meshrun::launcher
