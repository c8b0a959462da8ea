// LaunchOptions: everything `meshrun` can be told on its command line, with torchrun's meaning, and the
// pure function that parses argv (plus torchrun's PET_* environment fallbacks) into it. The settings each
// folder reads are declared in that folder (rdzv/rendezvous_settings.hpp, workers/worker_settings.hpp,
// progress/hang_policy.hpp); LaunchOptions composes them, and only the files beside the folders (main, the
// agent, the fan-out) include this one.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/endpoint.hpp"
#include "common/env_lookup.hpp"
#include "launcher/progress/hang_policy.hpp"
#include "launcher/rdzv/rendezvous_settings.hpp"
#include "launcher/workers/worker_settings.hpp"

namespace meshrun::launcher {

/// --hostfile fan-out: this meshrun starts one meshrun per host over ssh and relays their output.
struct FanoutOptions {
  std::string hostfile;  // empty: no fan-out
  std::string include;   // DeepSpeed syntax: host1@host2:0,2
  std::string exclude;
  std::vector<std::string> exports;  // VAR or VAR=VALUE, sent to every host
  std::string ssh_opts;              // extra ssh arguments, split on blanks ("-i key -p 2222")
  std::string remote_meshrun;        // meshrun on the hosts; empty: this binary's path
  double connect_timeout_s = 10;     // ssh ConnectTimeout for the pre-flight check and the launch
};

/// Everything `meshrun` was told: each folder's own settings (the rendezvous', the workers' entrypoint), which
/// the agent hands each folder as it is, and what the agent itself reads.
struct LaunchOptions : RendezvousSettings, EntrypointSettings {
  std::string nproc_spec = "1";  // as given: N, auto, gpu, cpu, xpu
  int max_restarts = 0;
  double monitor_interval_s = 0.1;
  std::string role = "default";
  std::string log_dir;  // empty: no per-rank log files unless --redirects/--tee ask for them
  StreamMask redirects;
  StreamMask tee;
  std::optional<std::set<int>> local_ranks_filter;    // unset: every local rank reaches the console
  std::vector<std::string> duplicate_stdout_filters;  // lines containing one also go to <attempt>/filtered_stdout.log
  std::vector<std::string> duplicate_stderr_filters;
  std::vector<int> signals_to_handle;                                    // forwarded to workers
  std::string signals_to_handle_text = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";  // as given: the workers' environment
  double shutdown_timeout_s = 30;        // SIGTERM -> SIGKILL grace when stopping workers
  double fault_stop_timeout_s = 3;       // ... when a fault stops them (capped by shutdown_timeout_s)
  bool standby = true;                   // keep standby workers for restarts (--no-standby)
  bool standby_at_once = false;          // start them at the first step even without an idle core (--standby-start)
  bool quick_exit = true;                // a failed worker skips Python's teardown (--no-quick-exit)
  std::vector<std::string> preload;      // modules a standby imports besides torch (--preload)
  HangPolicy progress;                   // --hang-timeout, --hang-floor, --hang-phase-timeout, --hang-*-timeout
  std::string log_line_prefix_template;  // console prefix; empty = "[rank${rank}]:"
  bool virtual_local_rank = false;       // LOCAL_RANK=0 and one CUDA device per worker
  std::string log_level = "warn";        // the launcher's own log (spdlog)
  FanoutOptions fanout;
  std::vector<std::string> launcher_args;  // meshrun's own options as given (before ENTRYPOINT), for fan-out
  bool nnodes_given = false;               // --nnodes (or PET_NNODES) was given
  bool nproc_given = false;                // --nproc-per-node was given
  bool run_id_given = false;               // --rdzv-id was given
  bool slurm = false;                      // the rendezvous settings came from SLURM's environment
};

/// What the command line asked for.
struct ParseResult {
  LaunchOptions options;
  /// Set for --help / --version: print this on stdout and exit 0 without launching.
  std::optional<std::string> print_and_exit;
  /// Accepted-but-ignored torchrun options and overridden values, for the caller to print.
  std::vector<std::string> warnings;
  /// Settings meshrun derived by itself (SLURM detection), for the caller to log at info level.
  std::vector<std::string> notes;
};

/// Host facts that `--nproc-per-node auto|gpu|cpu` resolve against.
struct HostInfo {
  int gpu_count = 0;
  int cpu_count = 1;
};

/// Parses `args` (without the program name; a leading "run" is the caller's business). Options not on the
/// command line come from PET_<NAME> variables as in torchrun. Throws UsageError naming the option on
/// unknown, malformed or contradictory options.
ParseResult parse_launch_options(const std::vector<std::string>& args, const EnvLookup& env, const HostInfo& host);

/// "N", "MIN:MAX" -> (min, max); throws UsageError.
std::pair<int, int> parse_nnodes(const std::string& text);
/// "3" or "0:1,1:2" -> StreamMask; `flag` names the option in errors.
StreamMask parse_stream_mask(const std::string& text, const std::string& flag);
/// "k=v,k=v" -> RdzvConf (starting from defaults); throws UsageError naming an unknown key or bad value.
RdzvConf parse_rdzv_conf(const std::string& text);
/// "SIGTERM,SIGINT,USR1,15" -> signal numbers.
std::vector<int> parse_signal_list(const std::string& text);
/// torchrun's list syntax for --duplicate-*-filters: comma-separated, ",," stands for a comma in a filter.
std::vector<std::string> parse_filter_list(std::string_view text);
/// N | auto | gpu | cpu | xpu -> a worker count.
int resolve_nproc_per_node(const std::string& spec, const HostInfo& host);

/// GPUs and CPUs of this machine, without CUDA: /proc/driver/nvidia/gpus, CUDA_VISIBLE_DEVICES, sysconf.
HostInfo detect_host_info();

/// The default signal list: torchrun's (TERM, INT, HUP, QUIT) plus SLURM's preemption signals USR1/USR2.
std::vector<int> default_forwarded_signals();

}  // namespace meshrun::launcher
