// The messages between an agent and its workers about copies in memory (docs/design/in-memory-checkpoints.md,
// 2.2), on the agent's handover socket (MESHRUN_MEMORY: Unix SOCK_SEQPACKET, one JSON object per packet; the
// slots travel beside a reply as descriptors). The worker asks, the agent answers, except for the one-way
// requests (commit, durable, restored), which have no reply:
//
//   {"op":"hello","rank":R,"world_size":W,"layout":L,"slot_bytes":B,"largest_slot_bytes":M,"digest":D}
//        -> {"op":"granted","slot_bytes":B,"slots":2} + [slot0, slot1, control] | {"op":"refused","reason":..}
//   {"op":"begin","step":S}             -> {"op":"lend","slot":s} | {"op":"busy","reason":..}
//   {"op":"sealed","step":S,"slot":s}   -> {"op":"kept"} | {"op":"refused","reason":..}
//   {"op":"commit","step":S}  {"op":"durable","step":S}  {"op":"restored","step":S,"source":"memory"}
//   {"op":"plan"}  -> {"op":"plan","steps_done":N,"candidates":[{"step":S,"world_size":W}..],"why_none":..}
//   {"op":"open","step":S[,"rank":r,"world_size":W]}
//        -> {"op":"copy","step":S[,"slot":s],"source":"own"|"node N"[,"host":H]} + [the copy's memfd]
//   anything else, or before a hello  -> {"op":"error","reason":..}
//
// Std and nlohmann only: meshrun-trainer links it without the rest of proto.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace meshrun::proto {

/// What a worker's copies are: the slots the agent lends it are made to fit them.
struct CopyShape {
  int world_size = 0;
  std::string layout;               // "FULL_SHARD", ...: for messages only
  uint64_t slot_bytes = 0;          // this rank's copy: header, index and payload
  uint64_t largest_slot_bytes = 0;  // the largest copy of any rank: what the buddy takes in a push
  uint64_t digest = 0;              // the run's config digest: another run's copies are not this one's

  bool operator==(const CopyShape&) const = default;
};

/// A worker's request.
struct HandoverRequest {
  enum class Kind { kHello, kBegin, kSealed, kCommit, kDurable, kRestored, kPlan, kOpen };
  Kind kind = Kind::kPlan;
  int rank = -1;        // kHello: the worker's rank; kOpen: whose copy, of another layout (-1: the worker's own)
  int world_size = -1;  // kOpen: that layout's world (-1: the worker's own); a hello's is in `shape`
  int64_t step = -1;    // every kind but kHello and kPlan
  int slot = -1;        // kSealed
  CopyShape shape;      // kHello
  std::string source;   // kRestored: where the state came from, LoadSource's wire word ("memory", "storage", ...)

  static HandoverRequest hello(int rank, CopyShape shape);
  static HandoverRequest begin(int64_t step);
  static HandoverRequest sealed(int64_t step, int slot);
  static HandoverRequest commit(int64_t step);
  static HandoverRequest durable(int64_t step);
  static HandoverRequest restored(int64_t step, std::string source);
  static HandoverRequest plan();
  /// The worker's own copy of `step`, or with `rank` and `world_size` that rank's copy of another layout.
  static HandoverRequest open(int64_t step, int rank = -1, int world_size = -1);

  /// Requests the agent does not answer.
  bool one_way() const { return kind == Kind::kCommit || kind == Kind::kDurable || kind == Kind::kRestored; }
  bool operator==(const HandoverRequest&) const = default;
};

/// A step held in memory, in the layout of a `world_size` world.
struct HeldStep {
  int64_t step = 0;
  int world_size = 0;

  bool operator==(const HeldStep&) const = default;
};

/// The agent's answer.
struct HandoverReply {
  enum class Kind { kGranted, kRefused, kBusy, kLend, kKept, kPlan, kCopy, kError };
  Kind kind = Kind::kError;
  std::string reason;          // kRefused, kBusy, kError; kPlan: why no step is held (on the wire: why_none)
  uint64_t slot_bytes = 0;     // kGranted: the bytes of each slot lent
  int slots = 0;               // kGranted: how many (their descriptors, then the control block's)
  int slot = -1;               // kLend: the slot to write; kCopy: the rank's own slot that holds it, or -1
  int64_t steps_done = 0;      // kPlan: the steps the run had done when its round began
  std::vector<HeldStep> held;  // kPlan: what the rank can restore, newest first
  int64_t step = -1;           // kCopy
  int from_node = -1;          // kCopy: the node it was fetched from (-1: it was on this node)
  std::string host;            // kCopy: that node's host

  static HandoverReply granted(uint64_t slot_bytes, int slots);
  static HandoverReply refused(std::string reason);
  static HandoverReply busy(std::string reason);
  static HandoverReply lend(int slot);
  static HandoverReply kept();
  static HandoverReply plan(int64_t steps_done, std::vector<HeldStep> held, std::string why_none);
  static HandoverReply copy(int64_t step, int slot, int from_node = -1, std::string host = "");
  static HandoverReply error(std::string reason);

  bool operator==(const HandoverReply&) const = default;
};

/// A JSON object with no op this build knows (a newer peer's, or none): the agent answers a worker's with an
/// error and serves on.
class UnknownHandoverOp : public ProtocolError {
 public:
  using ProtocolError::ProtocolError;
};

/// Reads only the fields of the request's kind. Throws ProtocolError naming what is malformed (no JSON object,
/// one of those fields of the wrong type), or UnknownHandoverOp.
HandoverRequest parse_handover_request(std::string_view packet);
std::string format_handover_request(const HandoverRequest& request);

/// Throws ProtocolError naming what is malformed.
HandoverReply parse_handover_reply(std::string_view packet);
std::string format_handover_reply(const HandoverReply& reply);

/// The reply's reason, or the reply itself when it gives none: for a message that says what the agent answered.
std::string describe(const HandoverReply& reply);

/// The words of the "op" field, for messages ("hello", "lend", ...).
std::string_view op_name(HandoverRequest::Kind kind);
std::string_view op_name(HandoverReply::Kind kind);

}  // namespace meshrun::proto
