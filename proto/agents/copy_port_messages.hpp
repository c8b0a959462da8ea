// The messages between agents on the copy port (docs/design/in-memory-checkpoints.md, "Agent to agent";
// launcher/memory/peer_link.hpp carries them: a length-prefixed JSON frame each). One request per connection,
// proven with the run's secret (launcher/memory/peer_auth.hpp):
//
//   agent -> {"nonce":Na}                                               CopyPortChallenge
//   peer  -> the request, with "client_nonce" and "proof"               CopyPortRequest
//   agent -> {"proof":P} | {"error":"refused"}                          CopyPortProof
//   push   {"op":"push","run":R,"rank":r,"step":S,"round":n,"world_size":W,"digest":D,"bytes":B}
//          -> {"go":true}; peer -> B bytes, {"mac":T}; agent -> {"ok":true} | {"ok":true,"have":true} | {"error":..}
//   fetch  {"op":"fetch","run":R,"rank":r,"step":S[,"world_size":W]}
//          -> {"ok":true,"bytes":B}, B bytes, {"mac":T} | {"error":..}
//
// T is the Poly1305 tag of the B bytes under the connection's one-time key (peer_auth.hpp's copy_data_key): a
// byte changed on the way is caught before the copy is kept or lent.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace meshrun::proto {

/// The one request of a copy-port connection.
struct CopyPortRequest {
  enum class Kind { kPush, kFetch };
  Kind kind = Kind::kFetch;
  std::string run;
  int rank = -1;
  int64_t step = -1;
  int world_size = -1;       // kPush: the copy's world; kFetch: the layout wanted (-1: the rank's own)
  uint64_t digest = 0;       // kPush
  uint64_t bytes = 0;        // kPush
  int64_t round = -1;        // kPush: the sender's round (a replica of an earlier round is renewed)
  std::string client_nonce;  // the proof of the run's secret (launcher/memory/peer_auth.hpp)
  std::string proof;

  static CopyPortRequest push(std::string run, int rank, int64_t step, int64_t round, int world_size, uint64_t digest,
                              uint64_t bytes);
  static CopyPortRequest fetch(std::string run, int rank, int64_t step, int world_size = -1);

  bool operator==(const CopyPortRequest&) const = default;
};

/// Every frame the agent sends once the request is proven.
struct CopyPortReply {
  enum class Kind {
    kGo,    // push: send the bytes
    kHave,  // push: this replica is held already
    kOk,    // push: received; fetch: `bytes` follow
    kError,
  };
  Kind kind = Kind::kError;
  uint64_t bytes = 0;  // kOk of a fetch (0: none said)
  std::string error;   // kError

  static CopyPortReply go();
  static CopyPortReply have();
  static CopyPortReply ok(uint64_t bytes = 0);
  static CopyPortReply failed(std::string error);
  /// What the port answers a request it refuses, whatever the reason: nothing a stranger could use.
  static CopyPortReply refused() { return failed("refused"); }

  bool operator==(const CopyPortReply&) const = default;
};

/// The reply's error, or the reply itself when it is no error: for a message that says what a peer answered.
std::string describe(const CopyPortReply& reply);

/// The agent's first frame: its half of the challenge.
struct CopyPortChallenge {
  std::string nonce;
  bool operator==(const CopyPortChallenge&) const = default;
};

/// The agent's answer to the request's proof: its own proof, or a refusal.
struct CopyPortProof {
  std::string proof;
  bool refused = false;
  bool operator==(const CopyPortProof&) const = default;
};

/// After a copy's bytes: their tag, as hex.
struct CopyPortTag {
  std::string mac;
  bool operator==(const CopyPortTag&) const = default;
};

// nlohmann's conversions (the frames are JSON objects). from_json throws ProtocolError naming a field of the wrong
// type or an unknown op; a missing field keeps its default.
void to_json(nlohmann::json& j, const CopyPortRequest& m);
void from_json(const nlohmann::json& j, CopyPortRequest& m);
void to_json(nlohmann::json& j, const CopyPortReply& m);
void from_json(const nlohmann::json& j, CopyPortReply& m);
void to_json(nlohmann::json& j, const CopyPortChallenge& m);
void from_json(const nlohmann::json& j, CopyPortChallenge& m);
void to_json(nlohmann::json& j, const CopyPortProof& m);
void from_json(const nlohmann::json& j, CopyPortProof& m);
void to_json(nlohmann::json& j, const CopyPortTag& m);
void from_json(const nlohmann::json& j, CopyPortTag& m);

}  // namespace meshrun::proto
