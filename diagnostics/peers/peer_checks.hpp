// Judging a pairwise bandwidth session (`meshrun check --bandwidth --peers N`) as check results:
//   bandwidth.peers  who took part; FAIL naming the instances that never came (or came too late)
//   bandwidth.pairs  the N x N matrix (on #0; the others show their own pairs); FAIL naming each pair
//                    that could not be measured and why ([refused], [timeout], [unreachable], ...)
// Pure functions of the session's outcome, so every verdict is unit-tested without a network.
#pragma once

#include <vector>

#include "diagnostics/peers/peer_session.hpp"
#include "diagnostics/report/check_report.hpp"

namespace meshrun::diagnostics {

/// bandwidth.peers and bandwidth.pairs for `outcome` (`options` for the session name and timeouts).
std::vector<CheckResult> judge_peer_session(const PeerSessionOutcome& outcome, const PeerSessionOptions& options);

}  // namespace meshrun::diagnostics
