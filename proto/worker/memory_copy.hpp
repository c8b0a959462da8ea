// A memory copy: one rank's training state at one step, held in a slot (a memfd the agent lends its worker;
// docs/design/in-memory-checkpoints.md). Header-only and std-only: the trainer writes it, the agent checks it.
//
//   offset 0               CopyHeader (kHeaderBytes reserved)
//   kHeaderBytes           the index JSON (index_capacity bytes: the chunk table of the shard file format)
//   payload_offset         the payload, byte for byte what the rank's rank<R>.bin would hold
//
// The worker writes the header first with state kWriting and last with kSealed: a copy whose worker died
// mid-way stays kWriting and is refused as torn.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace meshrun::proto {

/// The environment variable naming the agent's handover socket in a worker.
inline constexpr const char* kMemoryEnv = "MESHRUN_MEMORY";
inline constexpr size_t kHeaderBytes = 4096;
inline constexpr char kCopyMagic[8] = {'M', 'R', 'M', 'E', 'M', 'C', 'P', '1'};
inline constexpr uint32_t kCopyVersion = 1;

enum class CopyState : uint32_t { kEmpty = 0, kWriting = 1, kSealed = 2 };

struct CopyHeader {
  char magic[8];
  uint32_t version = kCopyVersion;
  CopyState state = CopyState::kEmpty;
  int64_t step = 0;
  int64_t optimizer_steps = 0;
  int64_t seed = 0;
  int32_t rank = 0;
  int32_t world_size = 0;
  int32_t shard_index = 0;
  int32_t shard_count = 0;
  uint64_t config_digest = 0;  // FNV-1a-64 of the run's model, data and train config: another run's copy is refused
  uint64_t index_offset = 0;
  uint64_t index_bytes = 0;
  uint64_t index_capacity = 0;
  uint64_t payload_offset = 0;
  uint64_t payload_bytes = 0;
  char layout[64] = {};       // "FULL_SHARD", ...: for messages only
  uint64_t header_check = 0;  // fnv1a64 of every byte before this field
};
static_assert(sizeof(CopyHeader) <= kHeaderBytes, "the header must fit its reserved bytes");

/// FNV-1a, 64 bits: a check of the header (no zlib in the launcher), and the config digest.
inline uint64_t fnv1a64(const void* data, size_t bytes, uint64_t hash = 14695981039346656037ULL) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ULL;
  return hash;
}

/// The check of `h` as written in header_check.
inline uint64_t header_check_of(const CopyHeader& h) { return fnv1a64(&h, offsetof(CopyHeader, header_check)); }

/// Bytes of a slot: the header, the index's capacity and the payload, each rounded up to 4 KiB. Sizes a slot of
/// this process's own copy; no sum here can wrap below 2^62 bytes of either.
inline uint64_t slot_bytes(uint64_t index_capacity, uint64_t payload_bytes) {
  const auto round_up = [](uint64_t n) { return (n + kHeaderBytes - 1) / kHeaderBytes * kHeaderBytes; };
  return kHeaderBytes + round_up(index_capacity) + round_up(payload_bytes);
}

/// [offset, offset + bytes) lies within [0, size), computed so that no sum can wrap around (the values come
/// from a copy another process wrote: a crafted one must be refused, not read past its mapping).
inline bool range_within(uint64_t offset, uint64_t bytes, uint64_t size) {
  return offset <= size && bytes <= size - offset;
}

/// Why the copy starting at `bytes` (a slot of `slot_size` bytes) cannot be used; "" when it can.
inline std::string validate_header(const void* bytes, uint64_t slot_size) {
  if (slot_size < kHeaderBytes) return "the slot is smaller than a copy's header";
  CopyHeader h;
  std::memcpy(&h, bytes, sizeof h);
  if (std::string_view(h.magic, sizeof h.magic) != std::string_view(kCopyMagic, sizeof kCopyMagic)) {
    return h.state == CopyState::kEmpty ? "empty: no copy was written here" : "not a memory copy (bad magic)";
  }
  if (h.version != kCopyVersion) return "copy version " + std::to_string(h.version) + " (this build reads 1)";
  if (h.state == CopyState::kWriting) return "torn: the worker stopped mid-copy";
  if (h.state != CopyState::kSealed) return "not sealed (state " + std::to_string(static_cast<uint32_t>(h.state)) + ")";
  if (h.header_check != header_check_of(h)) return "the header's check does not match (damaged)";
  const bool index_fits = h.index_offset >= kHeaderBytes && h.index_bytes <= h.index_capacity &&
                          range_within(h.index_offset, h.index_capacity, h.payload_offset);
  if (!index_fits || !range_within(h.payload_offset, h.payload_bytes, slot_size)) {
    return "offsets beyond the slot (index at " + std::to_string(h.index_offset) + ", payload " +
           std::to_string(h.payload_offset) + "+" + std::to_string(h.payload_bytes) + " of " +
           std::to_string(slot_size) + " bytes)";
  }
  return "";
}

}  // namespace meshrun::proto
