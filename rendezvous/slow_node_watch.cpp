#include "rendezvous/slow_node_watch.hpp"

#include <algorithm>

namespace meshrun::rendezvous {

namespace {

double median(std::vector<double> values) {
  const auto mid = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), mid, values.end());
  return *mid;
}

}  // namespace

void SlowNodeWatch::restarted() {
  streaks_.clear();
  several_at_.reset();
  noted_.reset();
  note_.clear();
}

proto::SlowNodeDecision SlowNodeWatch::update(const std::vector<NamedSlowNode>& named, const SlowNodeContext& context,
                                              TimePoint now) {
  if (named.size() > 1) several_at_ = now;
  std::map<std::string, Streak> streaks;
  proto::SlowNodeFacts facts;
  for (const auto& n : named) {
    const auto it = streaks_.find(n.identity);
    Streak streak = it != streaks_.end() ? std::move(it->second) : Streak{now, {}};
    streak.ratios.push_back(n.node.slowdown);
    if (streak.ratios.size() > kMaxRatios) streak.ratios.erase(streak.ratios.begin());
    facts.slow.push_back(n.node);
    facts.slow.back().slowdown = median(streak.ratios);
    facts.slow.back().slow_for_s = to_seconds(now - std::max(streak.since, several_at_.value_or(streak.since)));
    streaks.emplace(n.identity, std::move(streak));
  }
  streaks_ = std::move(streaks);
  if (context.checkpointing) last_checkpoint_ = now;
  facts.spares = context.spares;
  facts.checkpointing = context.checkpointing;
  facts.recovery_s = context.recovery_s;
  facts.redo_s =
      context.beats ? to_seconds(now - std::max(attempt_started_, last_checkpoint_.value_or(TimePoint{}))) : -1;
  facts.after_s = context.policy.after_s;
  const proto::SlowNodeDecision decision = proto::judge_slow_nodes(facts);
  if (decision.verdict == proto::SlowNodeVerdict::kNone) {
    restarted();  // no node is slow: the streaks are over
  } else if (decision.verdict != proto::SlowNodeVerdict::kTooSoon &&
             decision.verdict != proto::SlowNodeVerdict::kEvict && noted_ != decision.verdict) {
    noted_ = decision.verdict;
    note_ = decision.line();
  }
  return decision;
}

void SlowNodeWatch::evicted(const std::string& identity, const proto::SlowNodeDecision& decision, int64_t round,
                            double cooldown_s, TimePoint now) {
  proto::SlowNodeEviction record = proto::eviction_record(decision);
  record.round = round;
  evictions_.push_back(Eviction{std::move(record), identity, now});
  if (evictions_.size() > proto::kMaxRestartRecords) evictions_.erase(evictions_.begin());
  ++eviction_count_;
  cooling_until_[identity] = now + from_seconds(cooldown_s);
  std::erase_if(cooling_until_, [now](const auto& entry) { return entry.second <= now; });
}

double SlowNodeWatch::cooldown_left(const std::string& identity, TimePoint now) const {
  const auto it = cooling_until_.find(identity);
  return it == cooling_until_.end() ? 0 : std::max(0.0, to_seconds(it->second - now));
}

void SlowNodeWatch::fill(proto::RunStatus& status, TimePoint now) const {
  for (const auto& e : evictions_) {
    status.evictions.push_back(e.record);
    status.evictions.back().since_s = to_seconds(now - e.at);
    status.evictions.back().cooldown_s = cooldown_left(e.identity, now);
  }
  status.slow_node_evictions = eviction_count_;
  status.slow_nodes = note_;
}

}  // namespace meshrun::rendezvous
