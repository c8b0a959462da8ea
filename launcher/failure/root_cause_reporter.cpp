#include "launcher/failure/root_cause_reporter.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "launcher/failure/root_cause.hpp"
#include "launcher/rdzv/heartbeat_keeper.hpp"
#include "launcher/rdzv/rendezvous_backend.hpp"

namespace meshrun::launcher {
namespace {

using Ms = std::chrono::milliseconds;

// How long after its own worker failed an agent waits for other nodes' reports before it names the
// job's first failure: they report within a monitor interval of their worker's exit.
constexpr Ms kSettle{500};
// How long it waits for the report of the culprit a hang verdict named (its agent sends it right after the
// verdict, before reading stacks).
constexpr Ms kExpectedReportWait{10000};
// While the next attempt runs, the pending root cause is asked for this often, not on every wake-up of the
// supervise loop (which wakes for each hook report and heartbeat).
constexpr Ms kQueryEvery{200};

}  // namespace

void RootCauseReporter::expect(const Ending& ending) {
  pending_.reset();
  if (!ending.failed) return;
  const auto now = Clock::now();
  // Another node's report of an earlier failure may still be on its way: give it kSettle after ours. A restart
  // asked for by another node follows that node's report, so it is there at once.
  pending_ = Pending{.round = ending.round,
                     .settled_at = (ending.local ? ending.failed_at : now) + kSettle,
                     .expected_rank = ending.expected_rank,
                     .expected_by = now + kExpectedReportWait,
                     .next_query = {}};
}

bool RootCauseReporter::try_print(RendezvousBackend& rdzv, const Pending& cause) {
  const auto now = Clock::now();
  if (now < cause.settled_at) return false;
  std::vector<proto::FailureReport> failures;
  for (const auto& f : rdzv.failures()) {
    if (f.round == cause.round) failures.push_back(f);
  }
  const bool has_expected =
      cause.expected_rank < 0 ||
      std::any_of(failures.begin(), failures.end(), [&cause](const auto& f) { return f.rank == cause.expected_rank; });
  if (!has_expected && now < cause.expected_by) return false;
  std::fputs(format_root_cause(failures).c_str(), stderr);
  return true;
}

void RootCauseReporter::poll(RendezvousBackend& rdzv) {
  if (!pending_) return;
  const auto now = Clock::now();
  if (now < pending_->next_query) return;
  pending_->next_query = now + kQueryEvery;
  try {
    if (try_print(rdzv, *pending_)) pending_.reset();
  } catch (const std::exception& e) {
    spdlog::warn("cannot name the last failure's root cause: {}", e.what());
    pending_.reset();
  }
}

void RootCauseReporter::flush(RendezvousBackend& rdzv) {
  if (!pending_) return;
  const Pending cause = *pending_;
  pending_.reset();
  try {
    HeartbeatKeeper keeper(rdzv, keep_alive_, {});
    while (!keeper.with_rendezvous([&](RendezvousBackend& r) { return try_print(r, cause); })) {
      std::this_thread::sleep_for(Ms(50));
    }
  } catch (const std::exception& e) {
    spdlog::warn("cannot name the last failure's root cause: {}", e.what());
  }
}

}  // namespace meshrun::launcher
