// What an agent holds in memory, published in the round's store for every other agent of the round
// (docs/design/in-memory-checkpoints.md, "Restart"; launcher/memory/inventory_exchange.hpp publishes and
// gathers it, launcher/memory/restore_plan.hpp plans from it). One JSON object per node:
//
//   {"node":g,"host":H,"addr":A,"port":P,"copies":[{"rank":r,"step":S,"world_size":W,"digest":D,"replica":b}]}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace meshrun::proto {

/// One copy an agent holds: a rank's state at a step, of one run's config.
struct HeldCopy {
  int rank = 0;
  int64_t step = 0;
  int world_size = 0;
  uint64_t digest = 0;
  bool replica = false;  // held for another node's rank

  bool operator==(const HeldCopy&) const = default;
};

/// An agent's holdings and where to fetch them (its copy port).
struct Inventory {
  int node = -1;
  std::string host;
  std::string addr;
  int port = 0;
  std::vector<HeldCopy> copies;

  bool operator==(const Inventory&) const = default;
};

/// from_json throws nlohmann's exceptions on a missing or mistyped field (the reader names the node).
void to_json(nlohmann::json& j, const Inventory& inventory);
void from_json(const nlohmann::json& j, Inventory& inventory);

}  // namespace meshrun::proto
