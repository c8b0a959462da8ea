#include "trainer/distributed/intra_node.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <random>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace meshrun::trainer {
namespace {

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string store_get(c10d::Store& store, const std::string& key) {
  const auto bytes = store.get(key);
  return {bytes.begin(), bytes.end()};
}

void store_set(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

// Every member's node, by group rank; keys under the group's own store prefix.
std::vector<std::string> members_nodes(c10d::Store& store, int group_rank, int group_size, const std::string& own,
                                       std::chrono::milliseconds timeout) {
  store_set(store, "cma/node/" + std::to_string(group_rank), own);
  std::vector<std::string> keys;
  for (int r = 0; r < group_size; ++r) keys.push_back("cma/node/" + std::to_string(r));
  store.wait(keys, timeout);
  std::vector<std::string> nodes;
  for (const auto& key : keys) nodes.push_back(store_get(store, key));
  return nodes;
}

std::string random_segment_name() {
  std::random_device entropy;
  const uint64_t token = (static_cast<uint64_t>(entropy()) << 32) | entropy();
  char name[64];
  std::snprintf(name, sizeof name, "/meshrun-cma-%d-%016llx", static_cast<int>(getpid()),
                static_cast<unsigned long long>(token));
  return name;
}

}  // namespace

std::string node_identity(const DistEnv& env) {
  if (env.group_rank < 0) return "";
  struct stat pid_ns {};
  if (stat("/proc/self/ns/pid", &pid_ns) != 0) return "";
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return std::to_string(env.group_rank) + "|" + first_line("/proc/sys/kernel/random/boot_id") + "|" +
         std::to_string(pid_ns.st_ino) + "|" + host;
}

IntraNodeChoice choose_intra_node_transport(c10d::Store& store, int group_rank, int group_size,
                                            const std::string& own_node, IntraNodeTransport mode,
                                            std::chrono::milliseconds timeout) {
  if (mode == IntraNodeTransport::Gloo || group_size < 2) return {nullptr, "sockets (system.intra_node=gloo)"};
  // Every member reaches the same verdict from the same published identities.
  const std::vector<std::string> nodes = members_nodes(store, group_rank, group_size, own_node, timeout);
  for (int r = 0; r < group_size; ++r) {
    if (!nodes[r].empty() && nodes[r] == nodes[0]) continue;
    const std::string why = nodes[r].empty() ? "rank " + std::to_string(r) + "'s launcher did not set GROUP_RANK"
                                             : "group ranks 0 and " + std::to_string(r) + " run on different nodes";
    if (mode == IntraNodeTransport::CrossMemoryAttach) {
      throw UsageError("system.intra_node=cma needs every rank of a process group under one launcher, but " + why +
                       " (use system.intra_node=auto)");
    }
    return {nullptr, "sockets (" + why + ")"};
  }
  try {
    // Rank 0 creates the control block, then publishes its name, or why it could not ("!reason").
    if (group_rank == 0) {
      std::string published = random_segment_name();
      try {
        CmaTransport::create_segment(published, group_size);
      } catch (const CmaUnavailable& e) {
        published = std::string("!") + e.what();
      }
      store_set(store, "cma/segment", published);
    }
    store.wait({"cma/segment"}, timeout);
    const std::string name = store_get(store, "cma/segment");
    if (name.rfind('!', 0) == 0) throw CmaUnavailable("group rank 0: " + name.substr(1));
    auto transport = std::make_shared<CmaTransport>(name, group_rank, group_size, timeout);
    return {std::move(transport), "cross-memory attach"};
  } catch (const CmaUnavailable& e) {
    if (mode == IntraNodeTransport::CrossMemoryAttach)
      throw UsageError(std::string("system.intra_node=cma: ") + e.what());
    return {nullptr, std::string("sockets (cross-memory attach unavailable: ") + e.what() + ")"};
  }
}

}  // namespace meshrun::trainer
