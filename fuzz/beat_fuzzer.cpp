// libFuzzer target: arbitrary bytes as a progress beat from a worker's script (MESHRUN_PROGRESS, docs/progress.md).
// A beat parses or throws ProtocolError; a beat that parses formats back to one that parses the same.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.hpp"
#include "proto/worker/progress_beat.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const meshrun::proto::Beat beat = meshrun::proto::parse_beat(bytes);
    const meshrun::proto::Beat again = meshrun::proto::parse_beat(meshrun::proto::format_beat(beat));
    if (again.step != beat.step || again.phase != beat.phase) __builtin_trap();
  } catch (const meshrun::ProtocolError&) {}
  return 0;
}
