#include "trainer/distributed/intra_node.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <optional>

#include "trainer/distributed/store_text.hpp"

namespace meshrun::trainer {
namespace {

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

constexpr char kSpansNodes = '-';   // verdict prefix: the group is not on one node (sockets in every mode)
constexpr char kUnavailable = '!';  // verdict prefix: it is, but cross-memory attach cannot be set up

std::string node_key(int rank) { return "cma/node/" + std::to_string(rank); }

// Group rank 0's verdict from every member's node: the control block's path (made here, kept in `file`), or
// a prefixed reason why not. One rank reads all identities, so a group of N costs O(N) store requests.
std::string verdict_of_rank0(c10d::Store& store, int group_size, std::optional<CmaSegmentFile>& file,
                             std::chrono::milliseconds timeout) {
  std::vector<std::string> keys;
  for (int r = 0; r < group_size; ++r) keys.push_back(node_key(r));
  store.wait(keys, timeout);
  const auto nodes = store.multiGet(keys);
  for (int r = 0; r < group_size; ++r) {
    if (!nodes[r].empty() && nodes[r] == nodes[0]) continue;
    return kSpansNodes + (nodes[r].empty() ? "rank " + std::to_string(r) + "'s launcher did not set GROUP_RANK"
                                           : "group ranks 0 and " + std::to_string(r) + " run on different nodes");
  }
  try {
    return file.emplace(group_size).path();
  } catch (const CmaUnavailable& e) {
    return kUnavailable + std::string(e.what());
  }
}

// Every member maps the block and learns whether all could: a rank that cannot must not leave the others
// waiting for it.
std::string first_mapping_failure(c10d::Store& store, int group_rank, int group_size, const std::string& own,
                                  std::chrono::milliseconds timeout) {
  store_set_text(store, "cma/mapped/" + std::to_string(group_rank), own.empty() ? "ok" : own);
  std::vector<std::string> keys;
  for (int r = 0; r < group_size; ++r) keys.push_back("cma/mapped/" + std::to_string(r));
  store.wait(keys, timeout);
  for (const auto& value : store.multiGet(keys)) {
    const std::string text(value.begin(), value.end());
    if (text != "ok") return text;
  }
  return "";
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
  if (mode == IntraNodeTransport::kGloo || group_size < 2) return {nullptr, "sockets (system.intra_node=gloo)"};
  store_set_text(store, node_key(group_rank), own_node);
  std::optional<CmaSegmentFile> file;  // rank 0 keeps the block open until every rank has mapped it
  if (group_rank == 0) store_set_text(store, "cma/segment", verdict_of_rank0(store, group_size, file, timeout));
  store.wait({"cma/segment"}, timeout);
  const std::string verdict = store_get_text(store, "cma/segment");
  if (verdict.front() == kSpansNodes) return {nullptr, "sockets (" + verdict.substr(1) + ")"};
  auto unavailable = [mode](const std::string& why) -> IntraNodeChoice {
    if (mode == IntraNodeTransport::kCrossMemoryAttach) throw UsageError("system.intra_node=cma: " + why);
    return {nullptr, "sockets (cross-memory attach unavailable: " + why + ")"};
  };
  if (verdict.front() == kUnavailable) return unavailable("group rank 0: " + verdict.substr(1));
  std::shared_ptr<CmaTransport> transport;
  std::string own_failure;
  try {
    transport = std::make_shared<CmaTransport>(verdict, group_rank, group_size, timeout);
  } catch (const CmaUnavailable& e) {
    own_failure = e.what();
  }
  if (const std::string failure = first_mapping_failure(store, group_rank, group_size, own_failure, timeout);
      !failure.empty()) {
    return unavailable(failure);
  }
  try {
    transport->connect();
  } catch (const CmaUnavailable& e) {
    return unavailable(e.what());
  }
  return {std::move(transport), "cross-memory attach"};
}

}  // namespace meshrun::trainer
