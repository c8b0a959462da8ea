#include "proto/agents/memory_inventory.hpp"

#include <nlohmann/json.hpp>

namespace meshrun::proto {

using nlohmann::json;

void to_json(json& j, const Inventory& inventory) {
  json copies = json::array();
  for (const auto& c : inventory.copies) {
    copies.push_back({{"rank", c.rank},
                      {"step", c.step},
                      {"world_size", c.world_size},
                      {"digest", c.digest},
                      {"replica", c.replica}});
  }
  j = {{"node", inventory.node},
       {"host", inventory.host},
       {"addr", inventory.addr},
       {"port", inventory.port},
       {"copies", std::move(copies)}};
}

void from_json(const json& j, Inventory& inventory) {
  inventory.node = j.at("node").get<int>();
  inventory.host = j.value("host", "");
  inventory.addr = j.at("addr").get<std::string>();
  inventory.port = j.at("port").get<int>();
  inventory.copies.clear();
  for (const auto& c : j.at("copies")) {
    inventory.copies.push_back({c.at("rank").get<int>(), c.at("step").get<int64_t>(), c.at("world_size").get<int>(),
                                c.at("digest").get<uint64_t>(), c.value("replica", false)});
  }
}

}  // namespace meshrun::proto
