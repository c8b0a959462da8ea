#include "launcher/memory/copy_shelf.hpp"

#include <algorithm>

#include "common/strings.hpp"

namespace meshrun::launcher {

CopyShelf::CopyShelf(int slots_per_rank) : slots_per_rank_(std::max(2, slots_per_rank)) {}

std::vector<SlotView>& CopyShelf::slots_of(int rank) {
  auto& slots = slots_[rank];
  if (slots.empty()) slots.resize(static_cast<size_t>(slots_per_rank_));
  return slots;
}

const std::vector<SlotView>& CopyShelf::slots(int rank) const {
  static const std::vector<SlotView> kNone;
  const auto it = slots_.find(rank);
  return it == slots_.end() ? kNone : it->second;
}

std::optional<int64_t> CopyShelf::newest_commit(int rank) const {
  const auto it = committed_.find(rank);
  if (it == committed_.end() || it->second.empty()) return std::nullopt;
  return *it->second.rbegin();
}

LendResult CopyShelf::lend(int rank, int64_t step) {
  auto& slots = slots_of(rank);
  for (const auto& s : slots) {
    if (s.state == SlotState::kLent) {
      return {std::nullopt, "a copy (step " + std::to_string(s.step) + ") is already in flight"};
    }
  }
  const auto committed = newest_commit(rank);
  const auto durable = durable_.find(rank);
  std::optional<int> pick;
  std::vector<std::string> kept;
  for (size_t i = 0; i < slots.size(); ++i) {
    const SlotView& s = slots[i];
    if (s.state == SlotState::kSealed && pinned_.count({rank, s.step}) > 0) {
      kept.push_back(std::to_string(s.step) + " (being sent to another node)");
      continue;
    }
    // A step written again (training resumed from before it) replaces its older copy.
    if (s.state == SlotState::kEmpty || s.state == SlotState::kTorn || s.step == step) {
      pick = static_cast<int>(i);
      break;
    }
    if (committed && s.step == *committed) {
      kept.push_back(std::to_string(s.step) + " (the newest committed)");
    } else if (durable != durable_.end() && s.step == durable->second) {
      kept.push_back(std::to_string(s.step) + " (the newest on every buddy)");
    } else if (!pick || s.step < slots[static_cast<size_t>(*pick)].step) {
      pick = static_cast<int>(i);
    }
  }
  if (!pick) return {std::nullopt, "every slot holds a copy that must stay: step " + join(kept)};
  SlotView& chosen = slots[static_cast<size_t>(*pick)];
  committed_[rank].erase(chosen.step);  // an older committed copy is overwritten: no longer a candidate
  chosen = {SlotState::kLent, step};
  return {pick, ""};
}

std::string CopyShelf::seal(int rank, int slot, int64_t step) {
  auto& slots = slots_of(rank);
  if (slot < 0 || static_cast<size_t>(slot) >= slots.size()) return "no slot " + std::to_string(slot);
  SlotView& s = slots[static_cast<size_t>(slot)];
  if (s.state != SlotState::kLent) return "slot " + std::to_string(slot) + " was not lent";
  if (s.step != step) {
    return "slot " + std::to_string(slot) + " was lent for step " + std::to_string(s.step) + ", not " +
           std::to_string(step);
  }
  s.state = SlotState::kSealed;
  return "";
}

void CopyShelf::commit(int rank, int64_t step) {
  if (slot_of(rank, step)) committed_[rank].insert(step);
}

void CopyShelf::durable(int rank, int64_t step) {
  auto& newest = durable_[rank];
  newest = std::max(newest, step);
}

void CopyShelf::pin(int rank, int64_t step) { ++pinned_[{rank, step}]; }

void CopyShelf::unpin(int rank, int64_t step) {
  const auto it = pinned_.find({rank, step});
  if (it != pinned_.end() && --it->second == 0) pinned_.erase(it);
}

void CopyShelf::restored(int rank, int64_t step) {
  for (auto& s : slots_of(rank)) {
    if (s.state == SlotState::kSealed && s.step > step && pinned_.count({rank, s.step}) == 0) {
      committed_[rank].erase(s.step);
      s = {SlotState::kTorn, -1};
    }
  }
  // The step the run resumed from is what a next restart falls back on, until a newer one is on every buddy.
  durable_[rank] = step;
}

void CopyShelf::on_disconnect(int rank) {
  for (auto& s : slots_of(rank)) {
    if (s.state == SlotState::kLent) s = {SlotState::kTorn, -1};
  }
}

void CopyShelf::forget(int rank) {
  slots_.erase(rank);
  committed_.erase(rank);
  durable_.erase(rank);
  std::erase_if(pinned_, [rank](const auto& pin) { return pin.first.first == rank; });
}

std::vector<int64_t> CopyShelf::candidates(int rank) const {
  std::vector<int64_t> out;
  const auto it = committed_.find(rank);
  if (it == committed_.end()) return out;
  for (auto step = it->second.rbegin(); step != it->second.rend(); ++step) {
    if (slot_of(rank, *step)) out.push_back(*step);
  }
  return out;
}

std::optional<int> CopyShelf::committed_slot(int rank, int64_t step) const {
  const auto it = committed_.find(rank);
  if (it == committed_.end() || it->second.count(step) == 0) return std::nullopt;
  return slot_of(rank, step);
}

std::optional<int> CopyShelf::slot_of(int rank, int64_t step) const {
  const auto& slots = this->slots(rank);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].state == SlotState::kSealed && slots[i].step == step) return static_cast<int>(i);
  }
  return std::nullopt;
}

}  // namespace meshrun::launcher
