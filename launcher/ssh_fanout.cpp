#include "launcher/ssh_fanout.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "common/base64.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/say.hpp"
#include "common/signal_set.hpp"
#include "launcher/cli/env_file.hpp"
#include "launcher/net/host_identity.hpp"
#include "launcher/workers/output_pump.hpp"
#include "launcher/workers/worker_command.hpp"
#include "launcher/workers/worker_env.hpp"
#include "launcher/workers/worker_process.hpp"
#include "proto/rendezvous/join_auth.hpp"

namespace meshrun::launcher {
namespace {

using namespace std::chrono_literals;

constexpr uint16_t kDefaultRdzvPort = 29400;
// First line the remote wrapper prints: the remote meshrun's pid, for the fallback kill.
constexpr const char* kPidMarker = "@@meshrun-remote-pid ";
// Variables sent to every host without being asked for (as DeepSpeed does for NCCL/PYTHON/UCX).
constexpr const char* kForwardedPrefixes[] = {"NCCL_", "PYTHON", "UCX_", "GLOO_"};

// Runs on the host. $1: seconds between SIGTERM and SIGKILL; the rest: the command. First it reads the variables
// to export from ssh's stdin, one `NAME=<base64 of the value>` per line up to an empty line: a value (the join
// token, say) on a command line would be readable by every user of the host in /proc/PID/cmdline, an
// environment only by its owner. The command then runs in the background; a watcher reads the rest of stdin
// (fd 3) and, at EOF (local meshrun gone, ssh killed, connection lost), stops the command. `3<&-` keeps the
// lifeline out of the command's hands.
constexpr const char* kRemoteWrapper =
    "g=$1; shift; while IFS= read -r l && [ -n \"$l\" ]; do v=$(printf %s \"${l#*=}\" | base64 -d; echo .); "
    "export \"${l%%=*}=${v%.}\"; done; exec 3<&0; \"$@\" </dev/null 3<&- & c=$!; echo \"@@meshrun-remote-pid $c\"; "
    "( while read -r _ <&3; do :; done; kill -TERM $c 2>/dev/null; i=0; "
    "while [ $i -lt $g ] && kill -0 $c 2>/dev/null; do sleep 1; i=$((i+1)); done; kill -KILL $c 2>/dev/null "
    ") </dev/null >/dev/null 2>&1 & w=$!; exec 3<&-; wait $c; r=$?; kill $w 2>/dev/null; exit $r";

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("cannot create a pipe for ssh: ") + std::strerror(errno));
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

std::vector<std::string> split_blanks(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One stream of one ssh: whole lines to the console with a prefix; the pid marker is taken out.
struct LineStream {
  UniqueFd fd;
  std::string partial;
  int console = 1;

  // Returns false at EOF (the fd is closed then).
  bool on_readable(const std::string& prefix, pid_t& remote_pid) {
    char buf[16384];
    while (true) {
      const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return true;
      if (n <= 0) {
        flush(prefix, remote_pid, true);
        fd.reset();
        return false;
      }
      partial.append(buf, static_cast<size_t>(n));
      flush(prefix, remote_pid, false);
    }
  }

  void flush(const std::string& prefix, pid_t& remote_pid, bool all) {
    size_t start = 0;
    while (true) {
      size_t end = partial.find('\n', start);
      if (end == std::string::npos) {
        if (!all || start == partial.size()) break;
        end = partial.size();
      }
      const std::string line = partial.substr(start, end - start);
      if (line.rfind(kPidMarker, 0) == 0) {
        remote_pid = static_cast<pid_t>(std::atol(line.c_str() + std::strlen(kPidMarker)));
      } else {
        const std::string out = prefix + line + "\n";
        write_all(console, out.data(), out.size());
      }
      start = end + 1;
      if (start > partial.size()) start = partial.size();
    }
    partial.erase(0, start);
  }
};

}  // namespace

struct SshFanout::Remote {
  std::string host;
  std::optional<WorkerProcess> ssh;
  UniqueFd lifeline;  // write end of ssh's stdin: closing it stops the remote side
  LineStream out;
  LineStream err;
  pid_t remote_pid = 0;
  bool done() const { return !ssh || !ssh->running(); }
};

std::string shell_quote(const std::string& word) {
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

namespace {

// --rdzv-conf's value without its token= and password= entries: they travel to the hosts in the environment.
std::string without_token(const std::string& conf) {
  std::string out;
  size_t start = 0;
  while (start <= conf.size()) {
    const auto comma = conf.find(',', start);
    const std::string entry = conf.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const bool secret = entry.rfind("token=", 0) == 0 || entry.rfind("password=", 0) == 0;
    if (!entry.empty() && !secret) out.append(out.empty() ? "" : ",").append(entry);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> strip_fanout_options(const std::vector<std::string>& args) {
  static const char* kWithValue[] = {"--hostfile",       "-H",
                                     "--include",        "-i",
                                     "--exclude",        "-e",
                                     "--export",         "--ssh-opts",
                                     "--remote-meshrun", "--ssh-connect-timeout",
                                     "--node-rank",      "--node_rank",
                                     "--rdzv-endpoint",  "--rdzv_endpoint",
                                     "--rdzv-backend",   "--rdzv_backend",
                                     "--rdzv-id",        "--rdzv_id",
                                     "--nnodes",         "--nproc-per-node",
                                     "--nproc_per_node", "--master-addr",
                                     "--master_addr",    "--master-port",
                                     "--master_port"};
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--standalone") continue;
    if (a == "--rdzv-conf" || a == "--rdzv_conf" || a.rfind("--rdzv-conf=", 0) == 0 ||
        a.rfind("--rdzv_conf=", 0) == 0) {
      const auto eq = a.find('=');
      const std::string value = eq != std::string::npos ? a.substr(eq + 1) : i + 1 < args.size() ? args[++i] : "";
      if (const std::string kept = without_token(value); !kept.empty()) {
        out.emplace_back("--rdzv-conf");
        out.push_back(kept);
      }
      continue;
    }
    bool stripped = false;
    for (const char* name : kWithValue) {
      const std::string n = name;
      if (a == n) {
        ++i;  // and its value
        stripped = true;
        break;
      }
      if (a.rfind(n + "=", 0) == 0) {
        stripped = true;
        break;
      }
    }
    if (!stripped) out.push_back(a);
  }
  return out;
}

SshFanout::SshFanout(const LaunchOptions& options, SignalSet& signals, EnvLookup env)
    : options_(options), signals_(signals), env_(std::move(env)) {}

std::vector<std::string> SshFanout::ssh_argv(const std::string& host) const {
  std::vector<std::string> argv{"ssh"};
  // ssh keeps the first value of an option: the user's --ssh-opts come before our defaults.
  for (auto& w : split_blanks(options_.fanout.ssh_opts)) argv.push_back(std::move(w));
  const int timeout = std::max(1, static_cast<int>(options_.fanout.connect_timeout_s));
  for (const std::string& o : std::vector<std::string>{"BatchMode=yes", "ConnectTimeout=" + std::to_string(timeout)}) {
    argv.push_back("-o");
    argv.push_back(o);
  }
  argv.push_back(host);
  return argv;
}

std::vector<std::pair<std::string, std::string>> SshFanout::exported_env() const {
  std::vector<std::pair<std::string, std::string>> vars;
  const auto put = [&](const std::string& k, const std::string& v) {
    for (auto& kv : vars) {
      if (kv.first == k) {
        kv.second = v;
        return;
      }
    }
    vars.emplace_back(k, v);
  };
  for (const auto& kv : current_environment()) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    for (const char* p : kForwardedPrefixes) {
      if (kv.rfind(p, 0) == 0) put(kv.substr(0, eq), kv.substr(eq + 1));
    }
  }
  std::vector<std::string> files;
  if (const auto home = env_("HOME"); home && !home->empty()) files.push_back(*home + "/" + kEnvFileName);
  files.push_back(std::filesystem::current_path().string() + "/" + kEnvFileName);
  std::error_code ec;
  if (files.size() == 2 && std::filesystem::equivalent(files[0], files[1], ec)) {
    files.pop_back();  // started from $HOME: read the file once
  }
  for (const auto& f : files) {
    if (!std::filesystem::exists(f)) continue;
    for (const auto& [k, v] : parse_env_file(read_text(f), f)) put(k, v);
  }
  for (const auto& e : options_.fanout.exports) {
    const auto eq = e.find('=');
    const std::string name = e.substr(0, eq);
    if (!is_env_name(name)) throw UsageError("--export '" + e + "': expected VAR or VAR=VALUE");
    if (eq != std::string::npos) {
      put(name, e.substr(eq + 1));
    } else if (const auto v = env_(name)) {
      put(name, *v);
    } else {
      throw UsageError("--export " + name + ": " + name + " is not set here (set it, or use --export " + name +
                       "=VALUE)");
    }
  }
  // The job's join token, wherever it came from (--rdzv-conf token=, $MESHRUN_RDZV_TOKEN): the agents need it.
  if (!options_.rdzv_conf.token.empty()) put(proto::kTokenEnv, options_.rdzv_conf.token);
  if (!options_.rdzv_conf.etcd_password.empty()) put(kEtcdPasswordEnv, options_.rdzv_conf.etcd_password);
  return vars;
}

std::vector<std::string> SshFanout::remote_args(const HostEntry& host, int node_rank, int nnodes_total) const {
  std::vector<std::string> args = strip_fanout_options(options_.launcher_args);
  std::string nnodes = std::to_string(nnodes_total);
  if (options_.nnodes_given) {
    nnodes = options_.min_nodes == options_.max_nodes
                 ? std::to_string(options_.min_nodes)
                 : std::to_string(options_.min_nodes) + ":" + std::to_string(options_.max_nodes);
  }
  std::string nproc = options_.nproc_spec;
  if (!options_.nproc_given) {
    if (!host.picked.empty()) {
      nproc = std::to_string(host.picked.size());
    } else if (host.slots > 0) {
      nproc = std::to_string(host.slots);
    }
  }
  const std::vector<std::string> ours{"--nnodes",       nnodes,  "--node-rank",      std::to_string(node_rank),
                                      "--rdzv-backend", "c10d",  "--rdzv-endpoint",  endpoint_,
                                      "--rdzv-id",      run_id_, "--nproc-per-node", nproc};
  args.insert(args.end(), ours.begin(), ours.end());
  if (options_.log_line_prefix_template.empty()) {
    args.push_back("--log-line-prefix-template");
    args.push_back("${rank}: ");  // the local side adds "host:" -> "host:rank: line"
  }
  args.push_back("--");
  args.push_back(options_.entrypoint);
  args.insert(args.end(), options_.args.begin(), options_.args.end());
  return args;
}

SshFanout::~SshFanout() = default;

SpawnSpec SshFanout::ssh_spawn(std::vector<std::string> argv, int stdin_fd, int stdout_fd, int stderr_fd) const {
  return SpawnSpec{.executable = ssh_path_,
                   .argv = std::move(argv),
                   .env = current_environment(),
                   .stdin_fd = stdin_fd,
                   .stdout_fd = stdout_fd,
                   .stderr_fd = stderr_fd,
                   .child_sigmask = signals_.original_mask()};
}

namespace {

// One `ssh HOST true` of the pre-flight check, its output captured (console -1 writes nowhere).
struct HostCheck {
  std::string host;
  std::optional<WorkerProcess> proc;
  LineStream out;
};

// Reads what the check printed so far; true while it may print more or run on.
bool check_busy(HostCheck& c) {
  if (c.out.fd.valid()) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(c.out.fd.get(), buf, sizeof(buf))) > 0) c.out.partial.append(buf, static_cast<size_t>(n));
    if (n == 0) c.out.fd.reset();
  }
  c.proc->poll();
  return c.proc->running() || c.out.fd.valid();
}

// Why a finished (or timed out) check failed; "" when it passed.
std::string check_failure(const HostCheck& c, double timeout_s) {
  if (c.proc->running()) return "no answer within " + std::to_string(static_cast<int>(timeout_s)) + " s";
  if (c.proc->status()->ok()) return "";
  // ssh's own last message says what went wrong (refused, no route, permission denied...).
  std::string text = c.out.partial;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const auto nl = text.rfind('\n');
  return text.empty() ? "ssh failed with " + c.proc->status()->describe()
                      : text.substr(nl == std::string::npos ? 0 : nl + 1);
}

}  // namespace

void SshFanout::preflight(const std::vector<HostEntry>& hosts) {
  std::vector<HostCheck> checks(hosts.size());
  for (size_t i = 0; i < hosts.size(); ++i) {
    Pipe p = make_pipe();
    auto argv = ssh_argv(hosts[i].host);
    argv.push_back("true");
    checks[i].host = hosts[i].host;
    checks[i].proc.emplace(WorkerProcess::spawn(ssh_spawn(argv, -1, p.write.get(), p.write.get())));
    checks[i].proc->confirm_exec();
    ::fcntl(p.read.get(), F_SETFL, O_NONBLOCK);
    checks[i].out.fd = std::move(p.read);
    checks[i].out.console = -1;
  }
  const double timeout_s = options_.fanout.connect_timeout_s + 10;
  const auto deadline = Clock::now() + from_seconds(timeout_s);
  while (Clock::now() < deadline) {
    bool busy = false;
    for (auto& c : checks) busy = check_busy(c) || busy;
    for (int sig : signals_.drain()) {
      if (is_terminating_signal(sig)) throw Error("interrupted by " + signal_name(sig) + " during the ssh check");
    }
    if (!busy) break;
    ::usleep(20000);
  }
  std::string report;
  int failed = 0;
  for (auto& c : checks) {
    const std::string why = check_failure(c, timeout_s);
    c.proc->reap();
    if (!why.empty()) {
      ++failed;
      report += "\n  " + c.host + ": " + why;
    }
  }
  if (failed > 0) {
    throw NetworkError("cannot reach " + std::to_string(failed) + " of " + std::to_string(checks.size()) +
                       " host(s) over ssh; nothing was started:" + report +
                       "\n(meshrun needs `ssh HOST true` to work without a password prompt: check the host name, "
                       "sshd, keys and known_hosts, or pass options with --ssh-opts)");
  }
}

std::string SshFanout::remote_command(const HostEntry& host, int node_rank, int nnodes_total,
                                      const std::string& remote_meshrun) const {
  // Built with append() only: GCC 12 reports a bogus -Wrestrict for `" " + std::string` chains here.
  std::string command;
  const auto word = [&command](const std::string& w) { command.append(" ").append(shell_quote(w)); };
  command.append("cd ").append(shell_quote(std::filesystem::current_path().string())).append(" && exec sh -c");
  word(kRemoteWrapper);
  command.append(" meshrun-fanout ").append(std::to_string(grace_s_)).append(" env");
  if (!host.picked.empty()) {
    std::string cvd = "CUDA_VISIBLE_DEVICES=";
    for (size_t k = 0; k < host.picked.size(); ++k) {
      if (k > 0) cvd.append(",");
      cvd.append(std::to_string(host.picked[k]));
    }
    word(cvd);
  }
  word(remote_meshrun);
  for (const auto& a : remote_args(host, node_rank, nnodes_total)) word(a);
  return command;
}

namespace {

// The variables the remote wrapper exports, as it reads them from ssh's stdin (kRemoteWrapper).
std::string env_block(const std::vector<std::pair<std::string, std::string>>& vars) {
  std::string block;
  for (const auto& [k, v] : vars) block.append(k).append("=").append(base64_encode(v)).append("\n");
  return block + "\n";
}

}  // namespace

void SshFanout::start_remote(Remote& r, const std::string& command, const std::string& env) {
  Pipe in = make_pipe(), out = make_pipe(), err = make_pipe();
  auto argv = ssh_argv(r.host);
  argv.push_back(command);
  r.ssh.emplace(WorkerProcess::spawn(ssh_spawn(argv, in.read.get(), out.write.get(), err.write.get())));
  r.ssh->confirm_exec();
  r.lifeline = std::move(in.write);
  // ssh reads its stdin as soon as it runs; a block larger than the pipe waits for it here.
  write_all(r.lifeline.get(), env.data(), env.size());
  ::fcntl(out.read.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(err.read.get(), F_SETFL, O_NONBLOCK);
  r.out.fd = std::move(out.read);
  r.out.console = 1;
  r.err.fd = std::move(err.read);
  r.err.console = 2;
}

void SshFanout::remote_kill(Remote& r, int sig) {
  if (r.remote_pid <= 0 || r.done()) return;
  auto argv = ssh_argv(r.host);
  argv.push_back("kill -" + std::to_string(sig) + " " + std::to_string(r.remote_pid) + " 2>/dev/null");
  helpers_.push_back(WorkerProcess::spawn(ssh_spawn(argv, -1, 2, 2)));
}

std::vector<int> SshFanout::pump(Clock::time_point deadline) {
  std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
  std::vector<std::pair<LineStream*, Remote*>> streams;
  for (auto& r : remotes_) {
    for (LineStream* s : {&r.out, &r.err}) {
      if (s->fd.valid()) {
        fds.push_back({s->fd.get(), POLLIN, 0});
        streams.emplace_back(s, &r);
      }
    }
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long long>(left, 0, 200)));
  for (size_t k = 1; k < fds.size(); ++k) {
    if (fds[k].revents != 0) {
      auto [s, r] = streams[k - 1];
      s->on_readable(r->host + ":", r->remote_pid);
    }
  }
  for (auto& r : remotes_) {
    // The job's exit code is the first failure in time, not in host order.
    if (r.ssh && r.ssh->running() && r.ssh->poll() && !r.ssh->status()->ok() && first_failure_ == 0) {
      first_failure_ = r.ssh->status()->exit_code();
    }
  }
  for (auto& h : helpers_) h.poll();
  std::vector<int> sigs;
  for (int sig : signals_.drain()) {
    if (sig != SIGCHLD) sigs.push_back(sig);
  }
  return sigs;
}

bool SshFanout::all_done() const {
  for (const auto& r : remotes_) {
    if (!r.done() || r.out.fd.valid() || r.err.fd.valid()) return false;
  }
  return true;
}

int SshFanout::relay_until_done_or_signal() {
  while (!all_done()) {
    for (int sig : pump(Clock::now() + 200ms)) {
      if (is_terminating_signal(sig)) return sig;
      for (auto& r : remotes_) remote_kill(r, sig);  // USR1/USR2: SLURM-style "checkpoint now"
    }
  }
  return 0;
}

void SshFanout::stop_remotes(int stop_signal) {
  say("got " + signal_name(stop_signal) + ": stopping the agents on " + std::to_string(remotes_.size()) + " host(s)");
  for (auto& r : remotes_) r.lifeline.reset();  // EOF -> each remote wrapper sends SIGTERM to its meshrun
  const auto deadline = Clock::now() + std::chrono::seconds(grace_s_);
  bool hurry = false;
  while (!all_done() && Clock::now() < deadline && !hurry) {
    for (int sig : pump(deadline)) hurry = hurry || is_terminating_signal(sig);
  }
  if (all_done()) return;
  // Fallback: the lifeline did not work (an ssh that ignores stdin EOF, a stuck wrapper).
  for (auto& r : remotes_) {
    if (!r.done()) {
      say(r.host + ": still running; killing meshrun (pid " + std::to_string(r.remote_pid) + ") over ssh");
      remote_kill(r, SIGKILL);
    }
  }
  const auto kill_deadline = Clock::now() + from_seconds(options_.fanout.connect_timeout_s + 5);
  while (!all_done() && Clock::now() < kill_deadline) pump(kill_deadline);
}

int SshFanout::reap_remotes() {
  const auto helper_deadline = Clock::now() + from_seconds(options_.fanout.connect_timeout_s + 5);
  for (auto& h : helpers_) {
    while (h.running() && Clock::now() < helper_deadline) {
      h.poll();
      ::usleep(20000);
    }
  }
  int code = first_failure_;
  for (auto& r : remotes_) {
    if (!r.ssh) continue;
    if (r.ssh->running()) r.ssh->signal_group(SIGKILL);
    r.ssh->reap();
    const auto& st = r.ssh->status();
    if (st && !st->ok()) {
      if (st->exit_code() == 255) say(r.host + ": ssh failed (exit code 255): the connection was lost or refused");
      if (code == 0) code = st->exit_code();
    }
  }
  return code;
}

int SshFanout::run() {
  const auto& fo = options_.fanout;
  if (!std::filesystem::exists(fo.hostfile)) throw UsageError("--hostfile " + fo.hostfile + ": no such file");
  const auto hosts = select_hosts(parse_hostfile(read_text(fo.hostfile), fo.hostfile), fo.include, fo.exclude);
  const auto path = env_("PATH");
  const auto ssh = find_executable("ssh", path.value_or("/usr/bin:/bin"));
  if (!ssh) throw UsageError("--hostfile needs ssh, but no `ssh` is on PATH (apt-get install openssh-client)");
  ssh_path_ = *ssh;
  std::string remote_meshrun = fo.remote_meshrun;
  if (remote_meshrun.empty()) remote_meshrun = std::filesystem::read_symlink("/proc/self/exe").string();
  endpoint_ = options_.rdzv_endpoint ? options_.rdzv_endpoint->to_string()
                                     : Endpoint{.host = hosts.front().host, .port = kDefaultRdzvPort}.to_string();
  run_id_ = options_.run_id_given ? options_.run_id : random_run_id();
  const auto vars = exported_env();  // errors in --export / env files before anything runs

  preflight(hosts);
  spdlog::info("ssh check passed for {} host(s); rendezvous at {}, run id {}", hosts.size(), endpoint_, run_id_);

  grace_s_ = static_cast<int>(options_.shutdown_timeout_s) + 5;
  remotes_.resize(hosts.size());
  for (size_t i = 0; i < hosts.size(); ++i) {
    remotes_[i].host = hosts[i].host;
    const int nnodes = static_cast<int>(hosts.size());
    start_remote(remotes_[i], remote_command(hosts[i], static_cast<int>(i), nnodes, remote_meshrun), env_block(vars));
  }
  const int stop_signal = relay_until_done_or_signal();
  if (stop_signal != 0) {
    stop_remotes(stop_signal);
  } else {
    for (auto& r : remotes_) r.lifeline.reset();
  }
  const int code = reap_remotes();
  return stop_signal != 0 ? 128 + stop_signal : code;
}

}  // namespace meshrun::launcher
