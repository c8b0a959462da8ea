#include "proto/agents/copy_port_messages.hpp"

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace meshrun::proto {
namespace {

using nlohmann::json;

// Runs `read`; a field of the wrong type becomes a ProtocolError that names the frame.
template <typename Read>
void reading(const json& j, Read read) {
  if (!j.is_object()) throw ProtocolError("copy port: a frame that is not a JSON object: " + j.dump());
  try {
    read();
  } catch (const json::exception& e) {
    throw ProtocolError(std::string("copy port: a malformed frame: ") + e.what());
  }
}

}  // namespace

CopyPortRequest CopyPortRequest::push(std::string run, int rank, int64_t step, int64_t round, int world_size,
                                      uint64_t digest, uint64_t bytes) {
  CopyPortRequest r = fetch(std::move(run), rank, step, world_size);
  r.kind = Kind::kPush;
  r.round = round;
  r.digest = digest;
  r.bytes = bytes;
  return r;
}

CopyPortRequest CopyPortRequest::fetch(std::string run, int rank, int64_t step, int world_size) {
  CopyPortRequest r;
  r.kind = Kind::kFetch;
  r.run = std::move(run);
  r.rank = rank;
  r.step = step;
  r.world_size = world_size;
  return r;
}

CopyPortReply CopyPortReply::go() {
  CopyPortReply r;
  r.kind = Kind::kGo;
  return r;
}

CopyPortReply CopyPortReply::have() {
  CopyPortReply r;
  r.kind = Kind::kHave;
  return r;
}

CopyPortReply CopyPortReply::ok(uint64_t bytes) {
  CopyPortReply r;
  r.kind = Kind::kOk;
  r.bytes = bytes;
  return r;
}

CopyPortReply CopyPortReply::failed(std::string error) {
  CopyPortReply r;
  r.error = std::move(error);
  return r;
}

void to_json(json& j, const CopyPortRequest& m) {
  const bool push = m.kind == CopyPortRequest::Kind::kPush;
  j = {{"op", push ? "push" : "fetch"}, {"run", m.run}, {"rank", m.rank}, {"step", m.step}};
  if (push) {
    j["round"] = m.round;
    j["world_size"] = m.world_size;
    j["digest"] = m.digest;
    j["bytes"] = m.bytes;
  } else if (m.world_size >= 0) {
    j["world_size"] = m.world_size;
  }
  if (!m.client_nonce.empty()) j["client_nonce"] = m.client_nonce;
  if (!m.proof.empty()) j["proof"] = m.proof;
}

void from_json(const json& j, CopyPortRequest& m) {
  reading(j, [&] {
    const std::string op = j.value("op", "");
    if (op != "push" && op != "fetch") throw ProtocolError("copy port: unknown op '" + op + "'");
    m.kind = op == "push" ? CopyPortRequest::Kind::kPush : CopyPortRequest::Kind::kFetch;
    m.run = j.value("run", "");
    m.rank = j.value("rank", -1);
    m.step = j.value("step", int64_t{-1});
    m.world_size = j.value("world_size", -1);
    m.digest = j.value("digest", uint64_t{0});
    m.bytes = j.value("bytes", uint64_t{0});
    m.round = j.value("round", int64_t{-1});
    m.client_nonce = j.value("client_nonce", "");
    m.proof = j.value("proof", "");
  });
}

void to_json(json& j, const CopyPortReply& m) {
  switch (m.kind) {
    case CopyPortReply::Kind::kGo: j = {{"go", true}}; break;
    case CopyPortReply::Kind::kHave: j = {{"ok", true}, {"have", true}}; break;
    case CopyPortReply::Kind::kOk:
      j = {{"ok", true}};
      if (m.bytes > 0) j["bytes"] = m.bytes;
      break;
    case CopyPortReply::Kind::kError: j = {{"error", m.error}}; break;
  }
}

void from_json(const json& j, CopyPortReply& m) {
  reading(j, [&] {
    m = CopyPortReply{};
    if (j.value("go", false)) {
      m.kind = CopyPortReply::Kind::kGo;
    } else if (j.value("ok", false)) {
      m.kind = j.value("have", false) ? CopyPortReply::Kind::kHave : CopyPortReply::Kind::kOk;
      m.bytes = j.value("bytes", uint64_t{0});
    } else {
      m.error = j.value("error", j.dump());  // an answer with no error said: the frame itself is the clue
    }
  });
}

std::string describe(const CopyPortReply& reply) {
  if (reply.kind == CopyPortReply::Kind::kError) return reply.error;
  std::string quoted(1, '\'');
  quoted += json(reply).dump();
  quoted += '\'';
  return quoted;
}

void to_json(json& j, const CopyPortChallenge& m) { j = {{"nonce", m.nonce}}; }

void from_json(const json& j, CopyPortChallenge& m) {
  reading(j, [&] { m.nonce = j.value("nonce", ""); });
}

void to_json(json& j, const CopyPortProof& m) {
  j = m.refused ? json(CopyPortReply::refused()) : json{{"proof", m.proof}};
}

void from_json(const json& j, CopyPortProof& m) {
  reading(j, [&] {
    m.refused = j.contains("error");
    m.proof = j.value("proof", "");
  });
}

void to_json(json& j, const CopyPortTag& m) { j = {{"mac", m.mac}}; }

void from_json(const json& j, CopyPortTag& m) {
  reading(j, [&] { m.mac = j.value("mac", ""); });
}

}  // namespace meshrun::proto
