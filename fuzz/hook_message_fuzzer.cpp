// libFuzzer target: arbitrary bytes as a datagram on a worker's progress socket, read as meshrun's hook sends
// them ("fr status ...", "fr frames {...}", ...) and as the hook's dump file (the collective record the agent
// reads on a hang). Either parses or throws ProtocolError; nothing else, and never a crash or an overread.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.hpp"
#include "launcher/hang/collective_record.hpp"
#include "launcher/progress/collective_watch.hpp"
#include "proto/worker/hook_messages.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  meshrun::launcher::CollectiveWatch watch;
  try {
    if (meshrun::proto::is_hook_message(bytes)) {
      watch.on_message(meshrun::proto::parse_hook_message(bytes), meshrun::launcher::CollectiveWatch::Clock::now());
      (void)watch.oldest_wait();
      (void)watch.stack_motion({});
    }
  } catch (const meshrun::ProtocolError&) {}
  try {
    (void)meshrun::proto::parse_hook_request(bytes);  // what meshrun-trainer's reporter reads
  } catch (const meshrun::ProtocolError&) {}
  meshrun::launcher::RankRecord record;
  try {
    meshrun::launcher::read_hook_dump(std::string(bytes), record);
  } catch (const meshrun::ProtocolError&) {}
  return 0;
}
