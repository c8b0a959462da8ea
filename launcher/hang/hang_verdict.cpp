#include "launcher/hang/hang_verdict.hpp"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/clock_text.hpp"

namespace meshrun::launcher {
namespace {

using RecordIndex = std::map<int, const RankRecord*>;

// One group's oldest open collective: who waits in it, who never entered it, who cannot tell.
struct OpenCollective {
  std::string group;
  std::vector<int> members;
  int64_t seq = -1;
  std::vector<int> waiting;
  std::vector<int> absent;   // recorded members that never entered seq
  std::vector<int> unknown;  // members without a record
};

std::string describe_rank(const RankRecord& r) {
  return fmt::format("rank {} ({}, local rank {}, pid {})", r.rank, r.host, r.local_rank, r.pid);
}

std::string plural_ranks(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + format_ranks(ranks);
}

std::vector<int> members_of(const std::string& group, const RecordIndex& index) {
  for (const auto& [rank, r] : index) {
    const auto g = r->groups.find(group);
    if (g != r->groups.end() && !g->second.ranks.empty()) return g->second.ranks;
  }
  std::vector<int> seen;  // membership unknown: the ranks that report the group
  for (const auto& [rank, r] : index) {
    if (r->groups.count(group) > 0) seen.push_back(rank);
  }
  return seen;
}

std::optional<OpenCollective> open_collective(const std::string& group, const RecordIndex& index) {
  OpenCollective c;
  c.group = group;
  c.members = members_of(group, index);
  for (int m : c.members) {
    const auto it = index.find(m);
    if (it == index.end() || it->second->source != RecordSource::kRecorded) continue;
    const auto g = it->second->groups.find(group);
    if (g != it->second->groups.end() && g->second.last_enqueued > g->second.last_completed) {
      c.waiting.push_back(m);
      // PyTorch reports -1 before the first completion; sequence numbers start at 1.
      const int64_t oldest_open = std::max<int64_t>(g->second.last_completed, 0) + 1;
      c.seq = c.seq < 0 ? oldest_open : std::min(c.seq, oldest_open);
    }
  }
  if (c.waiting.empty()) return std::nullopt;
  for (int m : c.members) {
    const auto it = index.find(m);
    if (it == index.end() || it->second->source != RecordSource::kRecorded) {
      c.unknown.push_back(m);
      continue;
    }
    const auto g = it->second->groups.find(group);
    if (g == it->second->groups.end() || g->second.last_enqueued < c.seq) c.absent.push_back(m);
  }
  return c;
}

// The entries at the hung sequence number, as the waiting ranks recorded them.
const CollectiveEntry* first_entry(const OpenCollective& c, const RecordIndex& index) {
  for (int w : c.waiting) {
    if (const auto* e = index.at(w)->entry(c.group, c.seq)) return e;
  }
  return nullptr;
}

// When the first waiting rank entered the open collective (0: no entry has a time).
int64_t waiting_since(const OpenCollective& c, const RecordIndex& index) {
  int64_t since = 0;
  for (int w : c.waiting) {
    if (const auto* e = index.at(w)->entry(c.group, c.seq); e && e->created_unix_ms > 0) {
      if (since == 0 || e->created_unix_ms < since) since = e->created_unix_ms;
    }
  }
  return since;
}

// A known time is older than an unknown one.
bool older(int64_t a_unix_ms, int64_t b_unix_ms) { return a_unix_ms > 0 && (b_unix_ms == 0 || a_unix_ms < b_unix_ms); }

void describe_collective(HangVerdict& v, const OpenCollective& c, const RecordIndex& index) {
  v.group = c.group;
  v.group_ranks = c.members;
  v.seq = c.seq;
  v.waiting = c.waiting;
  if (const auto* e = first_entry(c, index)) {
    v.op = e->op;
    if (!e->frames.empty()) v.call_site = e->frames.front();
  }
  v.waiting_since_unix_ms = waiting_since(c, index);
}

std::string collective_text(const HangVerdict& v) {
  return fmt::format("{} #{} of group {} (ranks {})", v.op.empty() ? "collective" : v.op, v.seq, v.group,
                     format_ranks(v.group_ranks));
}

// "ranks 0-2 wait in <where> since 10:31:26, called at train.py:88".
std::string waiting_text(const HangVerdict& v, const std::string& where) {
  std::string text =
      fmt::format("{} {} in {}", plural_ranks(v.waiting), v.waiting.size() == 1 ? "waits" : "wait", where);
  if (v.waiting_since_unix_ms > 0) text += " since " + clock_text(v.waiting_since_unix_ms);
  if (!v.call_site.empty()) text += ", called at " + v.call_site;
  return text;
}

void name_suspect(HangVerdict& v, const RecordIndex& index) {
  if (v.culprits.empty()) return;
  const auto it = index.find(v.culprits.front());
  if (it == index.end()) return;
  v.suspect_node = it->second->node;
  v.suspect_host = it->second->host;
}

std::string culprit_text(const std::vector<int>& culprits, const RecordIndex& index) {
  if (culprits.size() == 1 && index.count(culprits.front()) > 0) return describe_rank(*index.at(culprits.front()));
  return plural_ranks(culprits);
}

// The signature ranks are compared on at one sequence number.
std::string signature(const CollectiveEntry& e) { return e.op + " " + e.sizes + " " + e.dtypes; }

std::optional<HangVerdict> mismatch(const OpenCollective& c, const RecordIndex& index) {
  std::map<std::string, std::vector<int>> by_signature;
  std::map<std::string, const CollectiveEntry*> sample;
  for (int m : c.members) {
    const auto* e = index.at(m)->entry(c.group, c.seq);
    if (e == nullptr) return std::nullopt;  // not in the dump: cannot compare
    by_signature[signature(*e)].push_back(m);
    sample[signature(*e)] = e;
  }
  if (by_signature.size() < 2) return std::nullopt;
  std::vector<std::pair<std::string, std::vector<int>>> sides(by_signature.begin(), by_signature.end());
  std::stable_sort(sides.begin(), sides.end(),
                   [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
  HangVerdict v;
  v.kind = HangKind::kMismatch;
  describe_collective(v, c, index);
  v.culprits = sides.front().second;
  const bool same_op = sample[sides.front().first]->op == sample[sides.back().first]->op;
  // "rank 3 called broadcast, ranks 0-2 all_reduce": the minority first.
  std::string joined;
  for (const auto& [sig, ranks] : sides) {
    const auto* e = sample[sig];
    const std::string what = same_op ? e->op + " of " + e->sizes + " " + e->dtypes : e->op;
    joined += joined.empty() ? fmt::format("{} called {}", plural_ranks(ranks), what)
                             : fmt::format(", {} {}", plural_ranks(ranks), what);
  }
  v.line = fmt::format("hang: ranks disagree at #{} of group {} (ranks {}): {}", c.seq, c.group,
                       format_ranks(c.members), joined);
  if (!v.call_site.empty()) v.line += "; called at " + v.call_site;
  return v;
}

std::string never_entered_line(const HangVerdict& v, const RecordIndex& index) {
  return fmt::format("hang: {} never entered {}; {}", culprit_text(v.culprits, index), collective_text(v),
                     waiting_text(v, "it"));
}

HangVerdict never_entered(const OpenCollective& c, const std::vector<int>& culprits, const RecordIndex& index) {
  HangVerdict v;
  v.kind = HangKind::kNeverEntered;
  v.culprits = culprits;
  describe_collective(v, c, index);
  v.line = never_entered_line(v, index);
  return v;
}

HangVerdict no_record(const OpenCollective& c, const RecordIndex& index) {
  HangVerdict v;
  v.kind = HangKind::kNoRecord;
  v.culprits = c.unknown;
  describe_collective(v, c, index);
  v.line = fmt::format("hang: {} {} in {}; {} never reported it: no collective record", plural_ranks(c.waiting),
                       c.waiting.size() == 1 ? "waits" : "wait", collective_text(v), culprit_text(c.unknown, index));
  if (v.waiting_since_unix_ms > 0) v.line += fmt::format(" (waiting since {})", clock_text(v.waiting_since_unix_ms));
  return v;
}

HangVerdict stopped(const RankRecord& r, const std::vector<OpenCollective>& open, const RecordIndex& index) {
  HangVerdict v;
  v.kind = HangKind::kStopped;
  v.culprits = {r.rank};
  std::string line = fmt::format("hang: {} is stopped by a signal (state T)", describe_rank(r));
  for (const auto& c : open) {
    if (std::find(c.members.begin(), c.members.end(), r.rank) == c.members.end()) continue;
    describe_collective(v, c, index);
    line += "; " + waiting_text(v, collective_text(v));
    break;
  }
  v.line = line;
  return v;
}

bool waits_anywhere(int rank, const std::vector<OpenCollective>& open) {
  return std::any_of(open.begin(), open.end(), [rank](const OpenCollective& c) {
    return std::find(c.waiting.begin(), c.waiting.end(), rank) != c.waiting.end();
  });
}

HangVerdict cycle(const std::vector<OpenCollective>& open, const RecordIndex& index) {
  HangVerdict v;
  v.kind = HangKind::kCycle;
  std::vector<std::string> parts;
  std::set<int> named;
  for (const auto& c : open) {
    HangVerdict d;
    describe_collective(d, c, index);
    parts.push_back(fmt::format("{} in {}", plural_ranks(c.waiting), collective_text(d)));
    named.insert(c.absent.begin(), c.absent.end());
  }
  v.culprits.assign(named.begin(), named.end());
  if (!open.empty()) describe_collective(v, open.front(), index);
  std::string joined = parts.front();
  for (size_t i = 1; i < parts.size(); ++i) joined += "; " + parts[i];
  v.line = "hang: ranks wait for each other in different groups (collectives called in another order): " + joined;
  return v;
}

HangVerdict from_fallback(const std::optional<FallbackSuspect>& fallback, const RecordIndex& index) {
  HangVerdict v;
  v.kind = HangKind::kNoCollective;
  if (!fallback || fallback->rank < 0) {
    v.line = "hang: no rank waits in a collective PyTorch recorded, and no rank is stopped";
    return v;
  }
  v.culprits = {fallback->rank};
  const std::string who = culprit_text(v.culprits, index);
  v.line = fmt::format("hang: {}: {}", who, fallback->reason);
  return v;
}

void add_notes(HangVerdict& v, const std::vector<RankRecord>& ranks) {
  std::map<std::string, std::vector<int>> by_reason;
  for (const auto& r : ranks) {
    if (r.source == RecordSource::kRecorded) continue;
    by_reason[r.source_detail.empty() ? std::string(to_string(r.source)) : r.source_detail].push_back(r.rank);
  }
  for (const auto& [reason, who] : by_reason) {
    v.notes.push_back(fmt::format("no collective record from {}: {}", plural_ranks(who), reason));
  }
}

HangVerdict judge(const std::vector<RankRecord>& ranks, const std::optional<FallbackSuspect>& fallback,
                  const RecordIndex& index) {
  std::set<std::string> group_names;
  for (const auto& r : ranks) {
    for (const auto& [name, g] : r.groups) group_names.insert(name);
  }
  std::vector<OpenCollective> open;
  for (const auto& name : group_names) {
    if (auto c = open_collective(name, index)) open.push_back(std::move(*c));
  }
  for (const auto& r : ranks) {
    if (r.state == ProcessState::kStopped) return stopped(r, open, index);
  }
  // A rank that waits for nobody and is waited for: the culprit. Where it is waited for in several groups,
  // the group whose waiting ranks hold up others (the first link of the chain) is the one named; between
  // equals, the oldest wait: a healthy group caught between two ranks' entries is younger than the hang.
  const OpenCollective* named = nullptr;
  std::vector<int> named_roots;
  int named_links = -1;
  int64_t named_since = 0;
  for (const auto& c : open) {
    std::vector<int> roots;
    for (int a : c.absent) {
      if (!waits_anywhere(a, open)) roots.push_back(a);
    }
    if (roots.empty()) continue;
    const int links = static_cast<int>(std::count_if(c.waiting.begin(), c.waiting.end(), [&](int w) {
      return std::any_of(open.begin(), open.end(), [w](const OpenCollective& o) {
        return std::find(o.absent.begin(), o.absent.end(), w) != o.absent.end();
      });
    }));
    const int64_t since = waiting_since(c, index);
    if (links > named_links || (links == named_links && older(since, named_since))) {
      named = &c;
      named_roots = roots;
      named_links = links;
      named_since = since;
    }
  }
  if (named != nullptr) return never_entered(*named, named_roots, index);
  for (const auto& c : open) {
    if (c.absent.empty() && !c.unknown.empty()) return no_record(c, index);
  }
  for (const auto& c : open) {
    if (!c.absent.empty() || !c.unknown.empty()) continue;
    if (auto m = mismatch(c, index)) return *m;
    HangVerdict v;
    v.kind = HangKind::kAllInside;
    v.culprits = {};
    describe_collective(v, c, index);
    v.line = fmt::format("hang: every rank of group {} entered {} and none completes (a transport or network fault?)",
                         c.group, collective_text(v));
    if (!v.call_site.empty()) v.line += "; called at " + v.call_site;
    return v;
  }
  if (!open.empty()) return cycle(open, index);
  return from_fallback(fallback, index);
}

// Kinds whose culprits are judged stuck or busy: a rank that is absent, not one that disagrees or is stopped.
bool judged_by_activity(HangKind kind) {
  return kind == HangKind::kNeverEntered || kind == HangKind::kNoRecord || kind == HangKind::kNoCollective;
}

// "rank 0 (node0)" or "ranks 0,2 (node0, node1)": the short form for late lines.
std::string short_ranks(const std::vector<int>& ranks, const RecordIndex& index) {
  std::vector<std::string> hosts;
  for (int r : ranks) {
    const auto it = index.find(r);
    const std::string host = it != index.end() ? it->second->host : "?";
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
  }
  std::string joined;
  for (const auto& h : hosts) joined += (joined.empty() ? "" : ", ") + h;
  return plural_ranks(ranks) + " (" + joined + ")";
}

// Each rank's wait as the whole job sees it: an address outside the rank's host that another rank listens on is a
// wait on that rank (its agent could not find the address's holder: another host).
using Waits = std::map<int, RankWait>;
Waits job_waits(const std::vector<RankRecord>& ranks) {
  std::map<std::string, int> listeners;
  for (const auto& r : ranks) {
    for (const auto& l : r.wait.listening) listeners.emplace(l, r.rank);
  }
  Waits out;
  for (const auto& r : ranks) {
    RankWait w = r.wait;
    const bool on_ranks = !w.remotes.empty() && std::all_of(w.remotes.begin(), w.remotes.end(),
                                                            [&](const auto& a) { return listeners.count(a) > 0; });
    if (w.place == WaitPlace::kOutside && on_ranks) {
      w.place = WaitPlace::kInside;
      w.phrase = fmt::format("waits on {}, where rank {} listens", w.remotes.front(), listeners.at(w.remotes.front()));
      w.remotes.clear();
    }
    out[r.rank] = std::move(w);
  }
  return out;
}

// How a rank the others wait for stands: computing (late), waiting on the world outside the job or on what meshrun
// cannot classify (late: the wait may end by itself), or stuck (stopped, or every way out of its wait leads back
// into the job: proof of a hang).
enum class Standing { kBusy, kWaitsOutside, kStuck };
Standing standing_of(int rank, const RecordIndex& index, const Waits& waits) {
  const auto it = index.find(rank);
  if (it == index.end()) return Standing::kStuck;  // no record at all: nothing says it is alive
  const RankRecord& r = *it->second;
  if (r.state != ProcessState::kRunning || r.activity.liveness == Liveness::kStopped) return Standing::kStuck;
  if (r.activity.liveness == Liveness::kBusy) return Standing::kBusy;
  const auto w = waits.find(rank);
  return w != waits.end() && w->second.read && w->second.place == WaitPlace::kInside ? Standing::kStuck
                                                                                     : Standing::kWaitsOutside;
}

// What a late rank does, without its subject: "is busy (0.97 CPU, ...) in save at train.py:14", "waits on a reply
// from 127.0.0.1:18765 (HTTP), since 14:02:11, in urlopen at job.py:14".
std::string doing_text(int rank, const RecordIndex& index, const Waits& waits) {
  const RankRecord& r = *index.at(rank);
  if (r.activity.liveness == Liveness::kBusy) return "is " + describe(r.activity);
  const auto w = waits.find(rank);
  if (w != waits.end() && w->second.read) return describe(w->second);
  return "is " + describe(r.activity) + ", and meshrun could not read what it waits on";
}

// Who is late and what each does, without figures: a late line is said again when this changes (a rank that was
// busy now waits on a service), not when only its figures do.
std::string late_kinds(const std::vector<int>& ranks, const RecordIndex& index, const Waits& waits) {
  std::string text;
  for (int r : ranks) {
    const auto it = index.find(r);
    const auto w = waits.find(r);
    const bool busy = it != index.end() && it->second->activity.liveness == Liveness::kBusy;
    text += fmt::format("{}{} {}", text.empty() ? "" : "; ", r,
                        busy                                 ? std::string("busy")
                        : w != waits.end() && w->second.read ? w->second.phrase
                                                             : "idle");
  }
  return text;
}

// "it is busy (0.97 CPU, writing 19.8 MB/s) in save at train.py:14", or per rank when several (or `named`).
std::string activities_text(const std::vector<int>& ranks, const RecordIndex& index, const Waits& waits,
                            bool named = false) {
  if (ranks.size() == 1 && !named) return "it " + doing_text(ranks.front(), index, waits);
  std::string text;
  for (int r : ranks) text += fmt::format("{}rank {} {}", text.empty() ? "" : ", ", r, doing_text(r, index, waits));
  return text;
}

// What the others wait for, in the late line's words.
std::string late_wait_text(const HangVerdict& v, const std::optional<FallbackSuspect>& fallback) {
  const bool one = v.culprits.size() == 1;
  switch (v.kind) {
    case HangKind::kNeverEntered:
      return fmt::format("{} not entered {} for {:.0f} s while {} {}", one ? "it has" : "they have", collective_text(v),
                         v.waited_s, plural_ranks(v.waiting), v.waiting.size() == 1 ? "waits" : "wait");
    case HangKind::kNoRecord:
      return fmt::format("{} {} for {} in {} for {:.0f} s ({} no collective record)", plural_ranks(v.waiting),
                         v.waiting.size() == 1 ? "waits" : "wait", one ? "it" : "them", collective_text(v), v.waited_s,
                         one ? "it sends" : "they send");
    default: return fallback ? fallback->reason : std::string("silent");
  }
}

// Every member inside one collective, none completing: a slow collective (a large transfer, a rank that only
// just entered) while any member is busy, a stalled transport while all are idle.
void apply_to_all_inside(HangVerdict& v, const RecordIndex& index, const Waits& waits, const LatenessRule& rule) {
  std::vector<int> busy;
  for (int m : v.waiting) {
    const auto it = index.find(m);
    if (it != index.end() && it->second->activity.liveness == Liveness::kBusy) busy.push_back(m);
  }
  if (busy.empty() || (rule.busy_timeout_s && rule.waited_s >= *rule.busy_timeout_s)) return;
  v.outcome = HangOutcome::kLate;
  v.line = fmt::format("{} is late: every rank entered it and it has not completed for {:.0f} s; {}",
                       collective_text(v), v.waited_s, activities_text(busy, index, waits, true));
  v.late_subject = fmt::format("{} {} inside {}", v.group, v.seq, late_kinds(busy, index, waits));
}

// The timeout that ends a late rank's wait early, if one is set and passed: --hang-busy-timeout for a busy one,
// --hang-outside-timeout for one that waits outside the job.
std::optional<std::pair<std::string, double>> passed_timeout(Standing s, const LatenessRule& rule) {
  const auto& limit = s == Standing::kBusy ? rule.busy_timeout_s : rule.outside_timeout_s;
  if (!limit || rule.waited_s < *limit) return std::nullopt;
  return std::make_pair(std::string(s == Standing::kBusy ? "--hang-busy-timeout" : "--hang-outside-timeout"), *limit);
}

void apply_lateness(HangVerdict& v, const RecordIndex& index, const Waits& waits, const LatenessRule& rule,
                    const std::optional<FallbackSuspect>& fallback) {
  v.waited_s = rule.waited_s;
  if (v.kind == HangKind::kAllInside) {
    apply_to_all_inside(v, index, waits, rule);
    return;
  }
  if (!judged_by_activity(v.kind) || v.culprits.empty()) return;
  std::vector<int> late, stuck;
  std::optional<std::pair<std::string, double>> timeout;
  for (int c : v.culprits) {
    const Standing s = standing_of(c, index, waits);
    const auto passed = s == Standing::kStuck ? std::nullopt : passed_timeout(s, rule);
    (s == Standing::kStuck || passed ? stuck : late).push_back(c);
    if (passed && !timeout) timeout = passed;
    const auto it = index.find(c);
    if (s == Standing::kBusy || it == index.end()) continue;
    if (it->second->activity.liveness != Liveness::kUnknown) {
      v.notes.push_back(fmt::format("rank {} is {}", c, describe(it->second->activity)));
    }
    const auto w = waits.find(c);
    if (w != waits.end() && w->second.read) v.notes.push_back(fmt::format("rank {} {}", c, describe(w->second)));
  }
  if (!stuck.empty() && !timeout) {
    if (!late.empty() && v.kind == HangKind::kNeverEntered) {  // the late ones are only late: name the others
      v.culprits = stuck;
      v.line = never_entered_line(v, index);
      for (int b : late) {
        v.notes.push_back(fmt::format("rank {} is late, not hung: it {}", b, doing_text(b, index, waits)));
      }
    }
    return;
  }
  const std::string activity = activities_text(v.culprits, index, waits);
  if (timeout) {
    const std::string what = v.kind == HangKind::kNoCollective
                                 ? (fallback ? fallback->reason : std::string("silent"))
                                 : fmt::format("has kept {} waiting in {} for {:.0f} s", plural_ranks(v.waiting),
                                               collective_text(v), v.waited_s);
    v.line = fmt::format("hang: {} {}, past {} ({:.0f} s); {}", culprit_text(v.culprits, index), what, timeout->first,
                         timeout->second, activity);
    return;
  }
  v.outcome = HangOutcome::kLate;
  v.line = fmt::format("{} {} late: {}; {}", short_ranks(v.culprits, index), v.culprits.size() == 1 ? "is" : "are",
                       late_wait_text(v, fallback), activity);
  v.late_subject = fmt::format("{} {} {}", v.group, v.seq, late_kinds(v.culprits, index, waits));
}

}  // namespace

std::string_view to_string(HangOutcome value) {
  switch (value) {
    case HangOutcome::kLate: return "late";
    case HangOutcome::kResolved: return "resolved";
    case HangOutcome::kHung: break;
  }
  return "hung";
}

std::string_view to_string(HangKind value) {
  switch (value) {
    case HangKind::kStopped: return "stopped";
    case HangKind::kNeverEntered: return "never_entered";
    case HangKind::kMismatch: return "mismatch";
    case HangKind::kNoRecord: return "no_record";
    case HangKind::kAllInside: return "all_inside";
    case HangKind::kCycle: return "cycle";
    case HangKind::kNoCollective: return "no_collective";
  }
  return "no_collective";
}

HangVerdict judge_hang(const std::vector<RankRecord>& ranks, const std::optional<FallbackSuspect>& fallback,
                       const LatenessRule& lateness) {
  RecordIndex index;
  for (const auto& r : ranks) index[r.rank] = &r;
  HangVerdict v = judge(ranks, fallback, index);
  if (v.kind == HangKind::kNoCollective && fallback && fallback->from_collective_wait) {
    // The rank was waiting in a collective, and no rank waits in one now: it completed meanwhile (a late rank
    // that caught up just as it was looked at again).
    v.outcome = HangOutcome::kResolved;
    v.line = "the wait in a collective that was suspected has ended";
    return v;
  }
  apply_lateness(v, index, job_waits(ranks), lateness, fallback);
  name_suspect(v, index);
  add_notes(v, ranks);
  return v;
}

std::string format_ranks(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    if (j - i >= 2) {
      out += fmt::format("{}-{}", ranks[i], ranks[j]);
    } else {
      for (size_t k = i; k <= j; ++k) {
        if (k > i) out += ',';
        out += std::to_string(ranks[k]);
      }
    }
    i = j + 1;
  }
  return out;
}

void to_json(nlohmann::json& j, const HangVerdict& v) {
  j = {{"kind", to_string(v.kind)},
       {"outcome", to_string(v.outcome)},
       {"waited_s", v.waited_s},
       {"culprits", v.culprits},
       {"group", v.group},
       {"group_ranks", v.group_ranks},
       {"seq", v.seq},
       {"op", v.op},
       {"waiting", v.waiting},
       {"waiting_since_unix_ms", v.waiting_since_unix_ms},
       {"call_site", v.call_site},
       {"line", v.line},
       {"notes", v.notes},
       {"suspect_node", v.suspect_node},
       {"suspect_host", v.suspect_host},
       {"late_subject", v.late_subject}};
}

}  // namespace meshrun::launcher
