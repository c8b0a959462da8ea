#include "proto/worker/memory_handover.hpp"

#include <array>
#include <utility>

#include <nlohmann/json.hpp>

namespace meshrun::proto {
namespace {

using nlohmann::json;
using namespace std::string_view_literals;

constexpr std::array kRequestOps = {
    std::pair{HandoverRequest::Kind::kHello, "hello"sv},     std::pair{HandoverRequest::Kind::kBegin, "begin"sv},
    std::pair{HandoverRequest::Kind::kSealed, "sealed"sv},   std::pair{HandoverRequest::Kind::kCommit, "commit"sv},
    std::pair{HandoverRequest::Kind::kDurable, "durable"sv}, std::pair{HandoverRequest::Kind::kRestored, "restored"sv},
    std::pair{HandoverRequest::Kind::kPlan, "plan"sv},       std::pair{HandoverRequest::Kind::kOpen, "open"sv}};

constexpr std::array kReplyOps = {
    std::pair{HandoverReply::Kind::kGranted, "granted"sv}, std::pair{HandoverReply::Kind::kRefused, "refused"sv},
    std::pair{HandoverReply::Kind::kBusy, "busy"sv},       std::pair{HandoverReply::Kind::kLend, "lend"sv},
    std::pair{HandoverReply::Kind::kKept, "kept"sv},       std::pair{HandoverReply::Kind::kPlan, "plan"sv},
    std::pair{HandoverReply::Kind::kCopy, "copy"sv},       std::pair{HandoverReply::Kind::kError, "error"sv}};

template <typename Kind, size_t N>
Kind kind_of(const std::array<std::pair<Kind, std::string_view>, N>& ops, std::string_view op) {
  for (const auto& [kind, name] : ops) {
    if (name == op) return kind;
  }
  throw UnknownHandoverOp(op.empty() ? "a message with no op" : "unknown op '" + std::string(op) + "'");
}

template <typename Kind, size_t N>
std::string_view name_of(const std::array<std::pair<Kind, std::string_view>, N>& ops, Kind kind) {
  for (const auto& [k, name] : ops) {
    if (k == kind) return name;
  }
  return "?";
}

// The packet as a JSON object and its op ("" when it says none: no op this build knows); throws
// ProtocolError when it is no JSON object.
std::pair<json, std::string> object_and_op(std::string_view packet) {
  json message = json::parse(packet, nullptr, false);
  if (!message.is_object()) throw ProtocolError("memory handover: not a JSON object: '" + std::string(packet) + "'");
  std::string op = message.contains("op") && message["op"].is_string() ? message["op"].get<std::string>() : "";
  return {std::move(message), std::move(op)};
}

// Runs `read` over a parsed packet; a field of the wrong type becomes a ProtocolError that names the packet.
template <typename Read>
auto reading(std::string_view packet, Read read) {
  try {
    return read();
  } catch (const json::exception& e) {
    throw ProtocolError("memory handover: malformed '" + std::string(packet) + "': " + e.what());
  }
}

// "own" for a copy on this node, "node N" for one fetched from node N.
std::string source_word(int from_node) { return from_node < 0 ? "own" : "node " + std::to_string(from_node); }

int from_node_of(const std::string& source) {
  if (source.rfind("node ", 0) != 0) return -1;
  try {
    return std::stoi(source.substr(5));
  } catch (const std::exception&) {
    throw ProtocolError("memory handover: bad copy source '" + source + "'");
  }
}

}  // namespace

HandoverRequest HandoverRequest::hello(int rank, CopyShape shape) {
  HandoverRequest r;
  r.kind = Kind::kHello;
  r.rank = rank;
  r.shape = std::move(shape);
  return r;
}

HandoverRequest HandoverRequest::begin(int64_t step) {
  HandoverRequest r;
  r.kind = Kind::kBegin;
  r.step = step;
  return r;
}

HandoverRequest HandoverRequest::sealed(int64_t step, int slot) {
  HandoverRequest r = begin(step);
  r.kind = Kind::kSealed;
  r.slot = slot;
  return r;
}

HandoverRequest HandoverRequest::commit(int64_t step) {
  HandoverRequest r = begin(step);
  r.kind = Kind::kCommit;
  return r;
}

HandoverRequest HandoverRequest::durable(int64_t step) {
  HandoverRequest r = begin(step);
  r.kind = Kind::kDurable;
  return r;
}

HandoverRequest HandoverRequest::restored(int64_t step, std::string source) {
  HandoverRequest r = begin(step);
  r.kind = Kind::kRestored;
  r.source = std::move(source);
  return r;
}

HandoverRequest HandoverRequest::plan() {
  HandoverRequest r;
  r.kind = Kind::kPlan;
  return r;
}

HandoverRequest HandoverRequest::open(int64_t step, int rank, int world_size) {
  HandoverRequest r = begin(step);
  r.kind = Kind::kOpen;
  r.rank = rank;
  r.world_size = world_size;
  return r;
}

HandoverReply HandoverReply::granted(uint64_t slot_bytes, int slots) {
  HandoverReply r;
  r.kind = Kind::kGranted;
  r.slot_bytes = slot_bytes;
  r.slots = slots;
  return r;
}

HandoverReply HandoverReply::refused(std::string reason) {
  HandoverReply r;
  r.kind = Kind::kRefused;
  r.reason = std::move(reason);
  return r;
}

HandoverReply HandoverReply::busy(std::string reason) {
  HandoverReply r;
  r.kind = Kind::kBusy;
  r.reason = std::move(reason);
  return r;
}

HandoverReply HandoverReply::lend(int slot) {
  HandoverReply r;
  r.kind = Kind::kLend;
  r.slot = slot;
  return r;
}

HandoverReply HandoverReply::kept() {
  HandoverReply r;
  r.kind = Kind::kKept;
  return r;
}

HandoverReply HandoverReply::plan(int64_t steps_done, std::vector<HeldStep> held, std::string why_none) {
  HandoverReply r;
  r.kind = Kind::kPlan;
  r.reason = std::move(why_none);
  r.steps_done = steps_done;
  r.held = std::move(held);
  return r;
}

HandoverReply HandoverReply::copy(int64_t step, int slot, int from_node, std::string host) {
  HandoverReply r;
  r.kind = Kind::kCopy;
  r.step = step;
  r.slot = slot;
  r.from_node = from_node;
  r.host = std::move(host);
  return r;
}

HandoverReply HandoverReply::error(std::string reason) {
  HandoverReply r;
  r.kind = Kind::kError;
  r.reason = std::move(reason);
  return r;
}

std::string describe(const HandoverReply& reply) {
  if (!reply.reason.empty()) return reply.reason;
  std::string quoted(1, '\'');
  quoted += format_handover_reply(reply);
  quoted += '\'';
  return quoted;
}

std::string_view op_name(HandoverRequest::Kind kind) { return name_of(kRequestOps, kind); }
std::string_view op_name(HandoverReply::Kind kind) { return name_of(kReplyOps, kind); }

std::string format_handover_request(const HandoverRequest& request) {
  using Kind = HandoverRequest::Kind;
  json j = {{"op", op_name(request.kind)}};
  switch (request.kind) {
    case Kind::kHello:
      j["rank"] = request.rank;
      j["world_size"] = request.shape.world_size;
      j["layout"] = request.shape.layout;
      j["slot_bytes"] = request.shape.slot_bytes;
      j["largest_slot_bytes"] = request.shape.largest_slot_bytes;
      j["digest"] = request.shape.digest;
      break;
    case Kind::kSealed:
      j["step"] = request.step;
      j["slot"] = request.slot;
      break;
    case Kind::kRestored:
      j["step"] = request.step;
      j["source"] = request.source;
      break;
    case Kind::kOpen:
      j["step"] = request.step;
      if (request.rank >= 0) {
        j["rank"] = request.rank;
        j["world_size"] = request.world_size;
      }
      break;
    case Kind::kPlan: break;
    case Kind::kBegin:
    case Kind::kCommit:
    case Kind::kDurable: j["step"] = request.step; break;
  }
  return j.dump();
}

HandoverRequest parse_handover_request(std::string_view packet) {
  const auto parsed = object_and_op(packet);
  const json& j = parsed.first;
  return reading(packet, [&] {
    // Only the fields of the request's kind are read: another field, whatever it holds, is not its business.
    using Kind = HandoverRequest::Kind;
    HandoverRequest r;
    r.kind = kind_of(kRequestOps, parsed.second);
    if (r.kind != Kind::kHello && r.kind != Kind::kPlan) r.step = j.value("step", int64_t{-1});
    switch (r.kind) {
      case Kind::kHello:
        r.rank = j.value("rank", -1);
        r.shape.world_size = j.value("world_size", 0);
        r.shape.layout = j.value("layout", "");
        r.shape.slot_bytes = j.value("slot_bytes", uint64_t{0});
        r.shape.largest_slot_bytes = j.value("largest_slot_bytes", uint64_t{0});
        r.shape.digest = j.value("digest", uint64_t{0});
        break;
      case Kind::kSealed: r.slot = j.value("slot", -1); break;
      case Kind::kRestored: r.source = j.value("source", ""); break;
      case Kind::kOpen:
        r.rank = j.value("rank", -1);
        r.world_size = j.value("world_size", -1);
        break;
      case Kind::kBegin:
      case Kind::kCommit:
      case Kind::kDurable:
      case Kind::kPlan: break;
    }
    return r;
  });
}

std::string format_handover_reply(const HandoverReply& reply) {
  using Kind = HandoverReply::Kind;
  json j = {{"op", op_name(reply.kind)}};
  switch (reply.kind) {
    case Kind::kGranted:
      j["slot_bytes"] = reply.slot_bytes;
      j["slots"] = reply.slots;
      break;
    case Kind::kLend: j["slot"] = reply.slot; break;
    case Kind::kPlan: {
      j["steps_done"] = reply.steps_done;
      json held = json::array();
      for (const auto& h : reply.held) held.push_back({{"step", h.step}, {"world_size", h.world_size}});
      j["candidates"] = std::move(held);
      if (!reply.reason.empty()) j["why_none"] = reply.reason;
      break;
    }
    case Kind::kCopy:
      j["step"] = reply.step;
      if (reply.slot >= 0) j["slot"] = reply.slot;
      j["source"] = source_word(reply.from_node);
      if (!reply.host.empty()) j["host"] = reply.host;
      break;
    case Kind::kKept: break;
    case Kind::kRefused:
    case Kind::kBusy:
    case Kind::kError: j["reason"] = reply.reason; break;
  }
  return j.dump();
}

HandoverReply parse_handover_reply(std::string_view packet) {
  const auto parsed = object_and_op(packet);
  const json& j = parsed.first;
  return reading(packet, [&] {
    HandoverReply r;
    r.kind = kind_of(kReplyOps, parsed.second);
    r.reason = j.value(r.kind == HandoverReply::Kind::kPlan ? "why_none" : "reason", "");
    r.slot_bytes = j.value("slot_bytes", uint64_t{0});
    r.slots = j.value("slots", 0);
    r.slot = j.value("slot", -1);
    r.steps_done = j.value("steps_done", int64_t{0});
    for (const auto& h : j.value("candidates", json::array()))
      r.held.push_back({h.at("step").get<int64_t>(), h.at("world_size").get<int>()});
    r.step = j.value("step", int64_t{-1});
    r.from_node = from_node_of(j.value("source", "own"));
    r.host = j.value("host", "");
    return r;
  });
}

}  // namespace meshrun::proto
