#include "rendezvous/run_telemetry.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace meshrun::rendezvous {

void RunTelemetry::fault(TimePoint at, TimePoint now) {
  if (!fault_at_ || at < *fault_at_) fault_at_ = at;
  if (!fault_known_at_) fault_known_at_ = now;
}

void RunTelemetry::hang(const std::string& kind) { ++hangs_by_kind_[kind.empty() ? "beats" : kind]; }

void RunTelemetry::restarted(int64_t round, proto::RestartCause cause, const std::string& reason,
                             TimePoint lost_node_last_seen, TimePoint now) {
  if (recovery_ && !restarts_.empty()) restarts_.back().first.recovery = recovery_->ledger();  // what it reached
  const TimePoint fault = fault_at_.value_or(lost_node_last_seen);
  goodput_.restarted(round, cause, std::min(fault, now));
  recovery_.emplace(fault, fault_known_at_.value_or(now), now);
  fault_at_.reset();
  fault_known_at_.reset();
  proto::RestartRecord record;
  record.round = round;
  record.cause = cause;
  record.reason = reason;
  restarts_.emplace_back(std::move(record), now);
  if (restarts_.size() > proto::kMaxRestartRecords) restarts_.erase(restarts_.begin());
  ++restarts_by_cause_[std::string(proto::to_string(cause))];
  stragglers_ = StragglerFilter{};  // ranks may move to other hosts and steps go back to a checkpoint
  arrivals_.start_over();
}

void RunTelemetry::survivor_back(TimePoint now) {
  if (recovery_) recovery_->survivor_back(now);
}

void RunTelemetry::round_closed(int64_t round, const std::vector<std::string>& nodes, const std::string& replaced,
                                TimePoint now) {
  steps_done_before_ = steps_beaten_;
  fault_at_.reset();
  fault_known_at_.reset();
  if (round > 0 && !restarts_.empty() && restarts_.back().first.round == round) {
    restarts_.back().first.replaced = replaced;
  }
  if (recovery_) recovery_->closed(now, nodes);
}

std::optional<std::string> RunTelemetry::milestones(int64_t round, const std::string& node_id,
                                                    const proto::AttemptMilestones& attempt, TimePoint now,
                                                    bool time_phases) {
  if (attempt.round != round) return std::nullopt;  // an attempt of an earlier round: its figures are spent
  std::optional<std::string> event;
  if (time_phases && recovery_ && !restarts_.empty() && restarts_.back().first.round == round) {
    recovery_->milestones(node_id, attempt, now);
    auto& record = restarts_.back().first;
    if (!record.recovery.complete) {
      record.recovery = recovery_->ledger();
      if (record.recovery.complete) {
        event =
            fmt::format("round {} recovered: the first step {:.1f} s after the fault", round, record.recovery.total_s);
      }
    }
  }
  goodput_.milestones(round, attempt, now);
  beaten(attempt.steps.last_step);
  return event;
}

const proto::RestartRecord* RunTelemetry::recovered() const {
  if (restarts_.empty() || !restarts_.back().first.recovery.complete) return nullptr;
  return &restarts_.back().first;
}

void RunTelemetry::progress(std::vector<HostedRank>& ranks, const std::set<int>& fresh, int world_size,
                            double threshold, TimePoint now) {
  for (const auto& r : ranks) {
    if (fresh.count(r.progress.rank) != 0) beaten(r.progress.step);
  }
  const proto::ArrivalProbeTally before = arrivals_.tally();
  // Probes only while the alert is on and the beats' compute_s does not already measure every rank.
  const bool probes_wanted = threshold > 0 && run_measure(ranks) != proto::StragglerMeasure::kCompute;
  arrivals_.update(ranks, world_size, now, probes_wanted);
  log_probe_outcome(before);
  for (auto& r : ranks) r.progress.arrival_compute_s = arrivals_.compute_s(r.progress.rank);  // fresh figures
  stragglers_.update(ranks, fresh, threshold, now, arrivals_.counted(), arrivals_.over_lately(threshold));
  log_straggler_readings();
}

void RunTelemetry::log_straggler_readings() const {
  if (spdlog::get_level() > spdlog::level::debug || stragglers_.last_readings().empty()) return;
  std::string ratios;
  for (const auto& [rank, ratio] : stragglers_.last_readings()) ratios += fmt::format(" rank {} {:.2f}x", rank, ratio);
  spdlog::debug("straggler reading:{}", ratios);
}

void RunTelemetry::log_probe_outcome(const proto::ArrivalProbeTally& before) const {
  if (spdlog::get_level() > spdlog::level::debug) return;
  const proto::ArrivalProbeTally& now = arrivals_.tally();
  if (now.counted != before.counted) {
    std::string ratios;
    for (const auto& [rank, recent] : arrivals_.recent_ratios()) {
      ratios += fmt::format(" rank {} {:.2f}x", rank, recent.back());
    }
    spdlog::debug("arrival probe {} counted:{}", now.counted, ratios);
  }
  if (now.imprecise != before.imprecise) spdlog::debug("arrival probe not counted: imprecise clocks or no span");
  if (now.partial != before.partial) spdlog::debug("arrival probe not counted: a recorder lost part of the range");
  if (now.abandoned != before.abandoned) spdlog::debug("arrival probe abandoned: a rank never answered");
}

void RunTelemetry::fill(proto::RunStatus& status, TimePoint now) const {
  for (const auto& [record, at] : restarts_) {
    status.restarts.push_back(record);
    status.restarts.back().since_s = to_seconds(now - at);
  }
  if (recovery_ && !status.restarts.empty()) status.restarts.back().recovery = recovery_->ledger();  // so far
  status.restarts_by_cause = restarts_by_cause_;
  status.hangs_by_kind = hangs_by_kind_;
  status.goodput = goodput(now, false);
  status.arrival_probes = arrivals_.tally();
}

}  // namespace meshrun::rendezvous
