#include "launcher/cli/options.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/error.hpp"
#include "common/strings.hpp"
#include "common/version.hpp"
#include "launcher/hosts/slurm_env.hpp"
#include "proto/rendezvous/join_auth.hpp"

namespace meshrun::launcher {
namespace {

constexpr uint16_t kDefaultRdzvPort = 29400;
constexpr uint16_t kDefaultEtcdPort = 2379;

std::optional<double> to_double(const std::string& text) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used != text.size()) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool truthy(const std::string& v) {
  std::string s = v;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s == "1" || s == "true" || s == "yes" || s == "on";
}

bool is_boolean(const std::string& v) {
  std::string s = v;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return truthy(s) || s == "0" || s == "false" || s == "no" || s == "off";
}

// A vector option that takes one value per use (--export A --export B): otherwise it would swallow the entrypoint.
void repeatable(CLI::Option* option) {
  option->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

// One torchrun option: the dashed spelling (the underscore one is derived) and whether it is a flag.
struct OptionName {
  const char* dashed;  // "--nproc-per-node"
  bool flag;
};

// Options that torchrun reads from PET_<DEST> when absent from argv.
constexpr OptionName kEnvOptions[] = {
    {"--nnodes", false},
    {"--nproc-per-node", false},
    {"--rdzv-backend", false},
    {"--rdzv-endpoint", false},
    {"--rdzv-id", false},
    {"--rdzv-conf", false},
    {"--standalone", true},
    {"--max-restarts", false},
    {"--monitor-interval", false},
    {"--start-method", false},
    {"--event-log-handler", false},
    {"--role", false},
    {"--module", true},
    {"--no-python", true},
    {"--run-path", true},
    {"--log-dir", false},
    {"--redirects", false},
    {"--tee", false},
    {"--log-line-prefix-template", false},
    {"--local-ranks-filter", false},
    {"--duplicate-stdout-filters", false},
    {"--duplicate-stderr-filters", false},
    {"--node-rank", false},
    {"--master-addr", false},
    {"--master-port", false},
    {"--local-addr", false},
    {"--signals-to-handle", false},
    {"--shutdown-timeout", false},
    {"--virtual-local-rank", true},
};

// "--nproc-per-node" -> "PET_NPROC_PER_NODE"
std::string pet_name(const char* dashed) {
  std::string name = "PET_";
  for (const char* p = dashed + 2; *p; ++p) name += (*p == '-') ? '_' : static_cast<char>(std::toupper(*p));
  return name;
}

// "--nproc-per-node" -> "--nproc-per-node,--nproc_per_node" (plus a short alias when torchrun has one).
std::string both_spellings(const std::string& dashed, const char* short_name = nullptr) {
  std::string underscored = dashed;
  std::replace(underscored.begin() + 2, underscored.end(), '-', '_');
  std::string names = short_name ? std::string(short_name) + "," + dashed : dashed;
  if (underscored != dashed) names += "," + underscored;
  return names;
}

// The argv that PET_* variables stand for; placed before the user's argv so explicit flags win.
std::vector<std::string> env_arguments(const EnvLookup& env) {
  std::vector<std::string> out;
  for (const auto& opt : kEnvOptions) {
    const auto value = env(pet_name(opt.dashed));
    if (!value) continue;
    if (opt.flag) {
      if (truthy(*value)) out.emplace_back(opt.dashed);
    } else {
      out.push_back(std::string(opt.dashed) + "=" + *value);
    }
  }
  return out;
}

double require_positive(double v, const std::string& what) {
  if (!(v > 0)) throw UsageError(what + " must be greater than 0 (got " + std::to_string(v) + ")");
  return v;
}

// --hang-timeout auto|off|SECONDS.
void parse_hang_timeout(const std::string& text, HangPolicy& policy) {
  if (text == "auto") {
    policy.mode = HangPolicy::Mode::kAuto;
  } else if (text == "off") {
    policy.mode = HangPolicy::Mode::kOff;
  } else if (const auto s = to_double(text); s && *s > 0) {
    policy.mode = HangPolicy::Mode::kFixed;
    policy.fixed_s = *s;
  } else {
    throw UsageError("--hang-timeout '" + text + "': expected auto, off, or seconds greater than 0");
  }
}

// --hang-busy-timeout off|SECONDS.
std::optional<double> parse_busy_timeout(const std::string& text) {
  if (text == "off") return std::nullopt;
  if (const auto s = to_double(text); s && *s > 0) return *s;
  throw UsageError("--hang-busy-timeout '" + text +
                   "': expected off, or the seconds a busy rank may keep the others waiting (greater than 0)");
}

// --hang-outside-timeout off|SECONDS.
std::optional<double> parse_outside_timeout(const std::string& text) {
  if (text == "off") return std::nullopt;
  if (const auto s = to_double(text); s && *s > 0) return *s;
  throw UsageError("--hang-outside-timeout '" + text +
                   "': expected off, or the seconds a rank that waits outside the job may keep the others waiting "
                   "(greater than 0)");
}

std::string help_footer() {
  return "\nENTRYPOINT: a .py file or -m MODULE runs under `python -u` from PATH (or $PYTHON_EXEC); anything\n"
         "else is executed directly (`python train.py` too, and it is a Python script run: standby workers\n"
         "serve it). Everything after ENTRYPOINT goes to the workers untouched.\n"
         "Also: `meshrun run ...` (same as meshrun ...), `meshrun ping`, `meshrun check`.\n"
         "Exit codes: 0 success; the first failed worker's exit code (128+N when killed by signal N);\n"
         "128+N when meshrun itself got signal N; 1 rendezvous/launcher errors; 2 bad options;\n"
         "127 entrypoint not found. See docs/launcher.md.\n";
}

// Fills the rendezvous settings from SLURM's environment (see slurm_env.hpp); warns instead when SLURM
// variables are present but srun did not start this process (e.g. meshrun run from the batch script).
void apply_slurm(ParseResult& result, const EnvLookup& env) {
  const auto job = detect_slurm_job(env);
  if (!job) return;
  LaunchOptions& o = result.options;
  if (!job->under_srun) {
    result.warnings.push_back("SLURM job " + job->job_id +
                              " detected (SLURM_JOB_ID) but meshrun was not started by "
                              "srun (no SLURM_STEP_ID): running a single node here; to use every node of the job, "
                              "run `srun --ntasks-per-node=1 meshrun ...`");
    return;
  }
  if (job->num_tasks > 0 && job->num_tasks != job->num_nodes) {
    throw UsageError("srun started " + std::to_string(job->num_tasks) + " tasks on " + std::to_string(job->num_nodes) +
                     " node(s), but meshrun needs exactly one task per node (it starts the workers itself): use "
                     "`srun --ntasks-per-node=1 meshrun ...` (or pass --rdzv-endpoint to opt out of SLURM detection)");
  }
  if (job->first_host.empty()) {
    throw UsageError("SLURM job " + job->job_id +
                     ": SLURM_JOB_NODELIST is empty, cannot tell the rendezvous host; "
                     "pass --rdzv-endpoint HOST:PORT");
  }
  o.backend = RdzvBackend::kC10d;
  o.rdzv_endpoint = Endpoint{.host = job->first_host, .port = slurm_rdzv_port(job->job_id)};
  if (!o.run_id_given) o.run_id = job->job_id;
  if (!o.nnodes_given) o.min_nodes = o.max_nodes = job->num_nodes;
  // A node of the allocation beyond --nnodes MAX asks for no node rank: it waits as a hot spare.
  const bool spare = job->node_id >= o.max_nodes;
  o.node_rank = spare ? 0 : job->node_id;
  o.node_rank_given = !spare;
  if (!o.nproc_given && job->gpus && *job->gpus > 0) o.nproc_per_node = *job->gpus;
  o.slurm = true;
  result.notes.push_back("SLURM job " + job->job_id + ": node " + std::to_string(job->node_id) + " of " +
                         std::to_string(o.max_nodes) + (spare ? " (beyond --nnodes: a hot spare)" : "") +
                         ", rendezvous at " + o.rdzv_endpoint->to_string() + ", " + std::to_string(o.nproc_per_node) +
                         " worker(s) per node");
}

/// "h1:2379,h2,[::1]:2379" -> the etcd members; the port defaults to etcd's 2379. `https`: whether they were
/// written https:// (every one, or none).
std::vector<Endpoint> parse_etcd_endpoints(const std::string& text, bool& https) {
  std::vector<Endpoint> endpoints;
  int secure = 0;
  int plain = 0;
  for (const auto& item : split(text, ',')) {
    std::string member = std::string(trim(item));
    if (member.rfind("http://", 0) == 0) {  // etcdctl's spelling
      member = member.substr(7);
      ++plain;
    } else if (member.rfind("https://", 0) == 0) {
      member = member.substr(8);
      ++secure;
    }
    if (!member.empty() && member.back() == '/') member.pop_back();
    if (!member.empty()) endpoints.push_back(parse_endpoint(member, kDefaultEtcdPort));
  }
  if (endpoints.empty()) {
    throw UsageError(
        "--rdzv-backend etcd-v3 needs --rdzv-endpoint with the etcd members, e.g. etcd0:2379,etcd1:2379,etcd2:2379");
  }
  if (secure > 0 && plain > 0)
    throw UsageError("--rdzv-endpoint '" + text + "': some members https://, some http://; write them all one way");
  https = secure > 0;
  return endpoints;
}

}  // namespace

std::pair<int, int> parse_nnodes(const std::string& text) {
  const auto parts = split(text, ':');
  const auto bad = [&](const std::string& why) {
    return UsageError("--nnodes '" + text + "': " + why + " (expected N or MIN:MAX, e.g. --nnodes 2 or --nnodes 1:4)");
  };
  if (parts.size() > 2) throw bad("too many ':'");
  const auto lo = to_int(trim(parts[0]));
  const auto hi = parts.size() == 2 ? to_int(trim(parts[1])) : lo;
  if (!lo || !hi) throw bad("not a number");
  if (*lo <= 0) throw bad("the minimum number of nodes must be greater than 0");
  if (*lo > *hi) throw bad("MIN is greater than MAX");
  return {*lo, *hi};
}

StreamMask parse_stream_mask(const std::string& text, const std::string& flag) {
  StreamMask mask;
  const auto bad = [&](const std::string& why) {
    return UsageError(flag + " '" + text + "': " + why +
                      " (expected 0-3, or LOCAL_RANK:MASK pairs like 0:1,1:2; 1=stdout, 2=stderr, 3=both)");
  };
  const auto parse_bits = [&](const std::string& s) {
    const auto v = to_int(trim(s));
    if (!v || *v < 0 || *v > 3) throw bad("'" + s + "' is not a stream mask");
    return *v;
  };
  if (trim(text).empty()) return mask;
  if (text.find(':') == std::string::npos) {
    mask.all = parse_bits(text);
    return mask;
  }
  for (const auto& item : split(text, ',')) {
    const auto kv = split(item, ':');
    if (kv.size() != 2) throw bad("'" + item + "' is not LOCAL_RANK:MASK");
    const auto rank = to_int(trim(kv[0]));
    if (!rank || *rank < 0) throw bad("'" + kv[0] + "' is not a local rank");
    mask.by_rank[*rank] = parse_bits(kv[1]);
  }
  return mask;
}

namespace {

// The --rdzv-conf keys that take seconds, and the field each sets.
constexpr std::pair<const char*, double RdzvConf::*> kSecondsKeys[] = {
    {"join_timeout", &RdzvConf::join_timeout_s},
    {"timeout", &RdzvConf::join_timeout_s},
    {"last_call_timeout", &RdzvConf::last_call_timeout_s},
    {"close_timeout", &RdzvConf::close_timeout_s},
    {"read_timeout", &RdzvConf::read_timeout_s},
    {"heartbeat_timeout", &RdzvConf::heartbeat_timeout_s},
    {"keep_alive_interval", &RdzvConf::keep_alive_interval_s},
};

// Sets one --rdzv-conf key that does not take seconds; throws UsageError naming a bad value or key.
/// `file` when it can be read, for --rdzv-conf `key`; a UsageError naming both when not.
std::string readable_file(const std::string& key, const std::string& file) {
  if (file.empty() || !std::ifstream(file)) throw UsageError("--rdzv-conf " + key + "=" + file + ": cannot read it");
  return file;
}

void set_rdzv_conf_key(RdzvConf& conf, const std::string& key, const std::string& value) {
  if (key == "keep_alive_max_attempt") {
    const auto v = to_int(value);
    if (!v || *v <= 0)
      throw UsageError("--rdzv-conf keep_alive_max_attempt='" + value + "': expected a positive integer");
    conf.keep_alive_max_attempt = *v;
  } else if (key == "is_host") {
    conf.is_host = truthy(value);
  } else if (key == "http_port") {
    const auto v = to_int(value);
    if (!v || *v < 0 || *v > 65535)
      throw UsageError("--rdzv-conf http_port='" + value + "': expected a port, 0 to 65535 (0 picks a free one)");
    conf.http_port = static_cast<uint16_t>(*v);
  } else if (key == "token") {
    if (value.empty()) throw UsageError("--rdzv-conf token= is empty: give the job's join token (or leave it out)");
    conf.token = value;
  } else if (key == "username" || key == "user") {
    if (value.empty()) throw UsageError("--rdzv-conf " + key + "= is empty: give etcd's user name");
    conf.etcd_user = value;
  } else if (key == "password") {
    conf.etcd_password = value;
  } else if (key == "password_file") {
    std::ifstream in(value);
    if (!in) throw UsageError("--rdzv-conf password_file=" + value + ": cannot read it");
    std::getline(in, conf.etcd_password);
    while (!conf.etcd_password.empty() && (conf.etcd_password.back() == '\r' || conf.etcd_password.back() == '\n'))
      conf.etcd_password.pop_back();
  } else if (key == "protocol") {
    if (value != "http" && value != "https")
      throw UsageError("--rdzv-conf protocol=" + value + ": expected http or https (etcd-v3's client URLs)");
    conf.etcd_https = value == "https";
  } else if (key == "ca_cert" || key == "cacert") {
    conf.etcd_ca_file = readable_file(key, value);
  } else if (key == "ssl_cert" || key == "cert") {
    conf.etcd_cert_file = readable_file(key, value);
  } else if (key == "ssl_cert_key" || key == "key") {
    conf.etcd_key_file = readable_file(key, value);
  } else if (key == "local_addr") {
    if (value.empty()) throw UsageError("--rdzv-conf local_addr= is empty: give this node's address");
    conf.local_addr = value;
  } else if (key == "store_type") {
    // torchrun's c10d backend over a TCPStore ("tcp") or a FileStore ("file"); the daemon is a TCP store.
    if (value != "tcp") {
      throw UsageError("--rdzv-conf store_type=" + value +
                       ": meshrun's rendezvous is a TCP store only; drop store_type (or use store_type=tcp)");
    }
  } else if (key == "use_libuv") {
    // Which server PyTorch's own TCPStore would use; under meshrun the daemon is the server, so there is
    // no choice to make. Still a boolean, as for torchrun.
    if (!is_boolean(value)) throw UsageError("--rdzv-conf use_libuv='" + value + "': expected true/false or 1/0");
  } else {
    throw UsageError(
        "--rdzv-conf: unknown key '" + key +
        "' (known: join_timeout, last_call_timeout, close_timeout, read_timeout, heartbeat_timeout, "
        "keep_alive_interval, keep_alive_max_attempt, is_host, http_port, token, local_addr, store_type, use_libuv, "
        "username, password, password_file, protocol, ca_cert, ssl_cert, ssl_cert_key)");
  }
}

}  // namespace

RdzvConf parse_rdzv_conf(const std::string& text) {
  RdzvConf conf;
  if (trim(text).empty()) return conf;
  for (const auto& item : split(text, ',')) {
    if (trim(item).empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      throw UsageError("--rdzv-conf: '" + item + "' is not KEY=VALUE (e.g. --rdzv-conf join_timeout=900)");
    }
    const std::string key = trim(item.substr(0, eq));
    const std::string value = trim(item.substr(eq + 1));
    const auto seconds_key =
        std::find_if(std::begin(kSecondsKeys), std::end(kSecondsKeys), [&](const auto& k) { return key == k.first; });
    if (seconds_key == std::end(kSecondsKeys)) {
      set_rdzv_conf_key(conf, key, value);
      continue;
    }
    const auto v = to_double(value);
    if (!v || *v <= 0)
      throw UsageError("--rdzv-conf " + key + "='" + value + "': expected a positive number of seconds");
    conf.*(seconds_key->second) = *v;
  }
  return conf;
}

std::vector<int> parse_signal_list(const std::string& text) {
  static constexpr std::pair<const char*, int> kNames[] = {
      {"TERM", SIGTERM}, {"INT", SIGINT},   {"HUP", SIGHUP},   {"QUIT", SIGQUIT},
      {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"ALRM", SIGALRM}, {"CONT", SIGCONT},
  };
  std::vector<int> out;
  for (const auto& raw : split(text, ',')) {
    std::string name = trim(raw);
    if (name.empty()) continue;
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::toupper(c); });
    if (name.rfind("SIG", 0) == 0) name = name.substr(3);
    int sig = 0;
    for (const auto& [n, s] : kNames) {
      if (name == n) sig = s;
    }
    if (sig == 0) {
      const auto num = to_int(name);
      if (num && *num > 0 && *num < NSIG && *num != SIGKILL && *num != SIGSTOP && *num != SIGCHLD) sig = *num;
    }
    if (sig == 0) {
      throw UsageError("--signals-to-handle: '" + raw +
                       "' is not a signal that can be forwarded (use names like SIGTERM,SIGINT,SIGUSR1)");
    }
    if (std::find(out.begin(), out.end(), sig) == out.end()) out.push_back(sig);
  }
  return out;
}

std::vector<std::string> parse_filter_list(std::string_view text) {
  std::vector<std::string> out(1);
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      out.back() += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      out.back() += ',';
      ++i;
    } else {
      out.emplace_back();
    }
  }
  return out;
}

// torchrun flags that load Python plugins or need what meshrun does not do: refused with what to use
// instead, never accepted and silently ignored.
void refuse_python_only_flags(const std::string& event_log_handler, const std::string& logs_specs,
                              const std::string& numa_binding) {
  if (event_log_handler != "null") {
    throw UsageError("--event-log-handler " + event_log_handler +
                     ": meshrun has no Python event handlers; its events are on the console, in "
                     "`meshrun-rendezvous status --json`, the live page and /metrics (drop the flag)");
  }
  if (!logs_specs.empty()) {
    throw UsageError(
        "--logs-specs " + logs_specs +
        ": a torchrun.logs_specs Python entry point, which meshrun cannot load; drop it and choose "
        "the logs with --log-dir, --redirects, --tee, --local-ranks-filter and --duplicate-stdout-filters");
  }
  if (!numa_binding.empty()) {
    throw UsageError("--numa-binding " + numa_binding +
                     ": not implemented by meshrun; drop it and bind each worker yourself, e.g. --no-python "
                     "with a wrapper that runs `numactl --cpunodebind=N --membind=N python train.py` (N from "
                     "LOCAL_RANK)");
  }
}

std::vector<int> default_forwarded_signals() { return {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}; }

int resolve_nproc_per_node(const std::string& spec, const HostInfo& host) {
  if (spec == "cpu") return std::max(1, host.cpu_count);
  if (spec == "gpu" || spec == "cuda") {
    if (host.gpu_count <= 0) {
      throw UsageError("--nproc-per-node gpu: no GPU found on this host (use a number, or 'cpu')");
    }
    return host.gpu_count;
  }
  if (spec == "auto") return host.gpu_count > 0 ? host.gpu_count : std::max(1, host.cpu_count);
  if (spec == "xpu") throw UsageError("--nproc-per-node xpu: meshrun does not detect XPUs; give a number");
  const auto n = to_int(spec);
  if (!n || *n <= 0) {
    throw UsageError("--nproc-per-node '" + spec + "': expected a positive number, auto, gpu or cpu");
  }
  return *n;
}

HostInfo detect_host_info() {
  HostInfo info;
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  info.cpu_count = cpus > 0 ? static_cast<int>(cpus) : 1;
  std::error_code ec;
  int gpus = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    (void)entry;
    ++gpus;
  }
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr && gpus > 0) {
    // The workers see only these; an empty value hides every GPU.
    const std::string v = visible;
    gpus = v.empty() ? 0 : std::min<int>(gpus, static_cast<int>(split(v, ',').size()));
  }
  info.gpu_count = gpus;
  return info;
}

namespace {

// The command line's values that need more than CLI11's type check (converted after parsing), with the
// defaults torchrun shows. The rest bind straight to LaunchOptions.
struct RawFlags {
  std::string nnodes = "1:1", backend = "static", endpoint, run_id = "none", conf, redirects = "0", tee = "0";
  std::string filter, master_port, signals, start_method = "spawn", event_log_handler = "null";
  std::string logs_specs, numa_binding, print_completion, dup_out, dup_err;
  std::string hang_timeout = "auto", hang_busy_timeout = "off", hang_outside_timeout = "off";
  std::optional<double> shutdown_timeout;
  bool no_evict = false;
  bool no_standby = false;
  std::string standby_start = "idle";
  bool no_quick_exit = false;
  std::string preload;
};

// The options whose presence matters (PET_* variables count as given, as in torchrun).
struct GivenFlags {
  CLI::Option* nnodes = nullptr;
  CLI::Option* nproc = nullptr;
  CLI::Option* backend = nullptr;
  CLI::Option* endpoint = nullptr;
  CLI::Option* run_id = nullptr;
  CLI::Option* node_rank = nullptr;
  CLI::Option* master_addr = nullptr;
  CLI::Option* master_port = nullptr;
  CLI::Option* hostfile = nullptr;
};

// meshrun's command line: the CLI11 app, bound to `options` and to its own RawFlags. The option groups
// are added in --help's order.
class LaunchCommandLine {
 public:
  explicit LaunchCommandLine(LaunchOptions& options);
  LaunchCommandLine(const LaunchCommandLine&) = delete;
  LaunchCommandLine& operator=(const LaunchCommandLine&) = delete;

  /// Parses `argv`; the text to print instead of launching for --help and --version.
  std::optional<std::string> parse(const std::vector<std::string>& argv);
  /// What follows meshrun's options: the entrypoint and its arguments.
  std::vector<std::string> remaining() const { return app_.remaining(); }

  RawFlags raw;
  GivenFlags given;

 private:
  void add_job_options(LaunchOptions& o);
  void add_entrypoint_and_output_options(LaunchOptions& o);
  void add_node_options(LaunchOptions& o);
  std::string help_text() const;
  void add_signal_options(LaunchOptions& o);
  void add_restart_options(LaunchOptions& o);
  void add_hang_options(LaunchOptions& o);
  void add_hosting_options(LaunchOptions& o);
  void add_fanout_options(LaunchOptions& o);
  void add_log_options(LaunchOptions& o);

  CLI::App app_{"meshrun: a drop-in torchrun replacement; starts workers in milliseconds and supervises them.",
                "meshrun"};
};

LaunchCommandLine::LaunchCommandLine(LaunchOptions& options) {
  app_.footer(help_footer());
  // Stop at the entrypoint: everything from it on belongs to the worker.
  app_.prefix_command();
  // argparse semantics: a repeated option takes its last value (PET_* values come first, argv wins).
  app_.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app_.set_version_flag("--version", std::string("meshrun ") + kVersion);
  // --help in groups: torchrun's own options first, as its users look for them, then meshrun's by subject.
  app_.option_defaults()->group("torchrun's options: the job");
  add_job_options(options);
  app_.option_defaults()->group("torchrun's options: the entrypoint and its output");
  add_entrypoint_and_output_options(options);
  app_.option_defaults()->group("torchrun's options: nodes, signals, the rest");
  add_node_options(options);
  add_signal_options(options);
  app_.option_defaults()->group("meshrun: restarts (standby workers, quick exit, hot spares)");
  add_restart_options(options);
  app_.option_defaults()->group("meshrun: hangs and stragglers (docs/progress.md)");
  add_hang_options(options);
  app_.option_defaults()->group("meshrun: the rendezvous it hosts (docs/security.md)");
  add_hosting_options(options);
  app_.option_defaults()->group("meshrun: many hosts over ssh (docs/multi-node.md)");
  add_fanout_options(options);
  app_.option_defaults()->group("meshrun: its own output");
  add_log_options(options);
}

void LaunchCommandLine::add_job_options(LaunchOptions& o) {
  given.nnodes = app_.add_option(both_spellings("--nnodes"), raw.nnodes, "Number of nodes: N or MIN:MAX (elastic)")
                     ->default_str("1:1");
  given.nproc =
      app_.add_option(both_spellings("--nproc-per-node"), o.nproc_spec, "Workers per node: N, auto, gpu or cpu")
          ->default_str("1");
  given.backend =
      app_.add_option(both_spellings("--rdzv-backend"), raw.backend, "Rendezvous backend: c10d, static or etcd-v3")
          ->default_str("static");
  given.endpoint = app_.add_option(
      both_spellings("--rdzv-endpoint"), raw.endpoint,
      "Rendezvous endpoint HOST[:PORT] (port 29400); etcd-v3: the members, HOST[:PORT],... (port 2379)");
  given.run_id =
      app_.add_option(both_spellings("--rdzv-id"), raw.run_id, "Job id shared by all nodes")->default_str("none");
  app_.add_option(
      both_spellings("--rdzv-conf"), raw.conf,
      "k=v,... : join_timeout, last_call_timeout, close_timeout, read_timeout, keep_alive_interval, "
      "keep_alive_max_attempt, heartbeat_timeout, is_host, http_port (the hosted daemon's live page), token (the "
      "join token; prefer $MESHRUN_RDZV_TOKEN, which `ps` does not show); etcd-v3: username, password_file (or "
      "password, or $MESHRUN_ETCD_PASSWORD); protocol=https, ca_cert, ssl_cert, ssl_cert_key (TLS)");
  app_.add_flag("--standalone", o.standalone, "Single node: in-process rendezvous on a free port, random run id");
  app_.add_option(both_spellings("--max-restarts"), o.max_restarts, "Worker-group restarts before failing")
      ->check(CLI::NonNegativeNumber)
      ->default_str("0");
  app_.add_option(both_spellings("--monitor-interval"), o.monitor_interval_s, "Seconds between worker checks")
      ->default_str("0.1");
  app_.add_option(both_spellings("--start-method"), raw.start_method,
                  "spawn, fork or forkserver: as in torchrun, a script always starts in a fresh process")
      ->check(CLI::IsMember({"spawn", "fork", "forkserver"}));
  app_.add_option(both_spellings("--event-log-handler"), raw.event_log_handler,
                  "Only null: meshrun's events go to the console, the daemon's status and /metrics");
  app_.add_option("--role", o.role, "Worker role name (ROLE_NAME)")->default_str("default");
}

void LaunchCommandLine::add_entrypoint_and_output_options(LaunchOptions& o) {
  app_.add_flag("-m,--module", o.module, "Run ENTRYPOINT as `python -m ENTRYPOINT`");
  app_.add_flag(both_spellings("--no-python"), o.no_python, "Execute ENTRYPOINT directly");
  app_.add_flag(both_spellings("--run-path"), o.run_path, "Run ENTRYPOINT as a Python file");
  app_.add_option(both_spellings("--log-dir"), o.log_dir, "Write per-attempt, per-rank stdout/stderr files here");
  app_.add_option(both_spellings("--redirects", "-r"), raw.redirects,
                  "Send streams to log files only: 1=stdout 2=stderr 3=both, or 0:1,1:2 per local rank");
  app_.add_option(both_spellings("--tee", "-t"), raw.tee, "Like --redirects but also to the console");
  app_.add_option(both_spellings("--log-line-prefix-template"), o.log_line_prefix_template,
                  "Console line prefix; ${rank} ${local_rank} ${role_name} ${hostname}; default [rank${rank}]:");
  app_.add_option(both_spellings("--local-ranks-filter"), raw.filter,
                  "Only show these local ranks on the console: 0,1");
  app_.add_option(both_spellings("--duplicate-stdout-filters"), raw.dup_out,
                  "Also copy every rank's stdout lines that contain one of these comma-separated strings (\",,\": a "
                  "comma) to <log dir>/<run>/attempt_<n>/filtered_stdout.log");
  app_.add_option(both_spellings("--duplicate-stderr-filters"), raw.dup_err,
                  "The same for stderr lines, to filtered_stderr.log");
}

void LaunchCommandLine::add_node_options(LaunchOptions& o) {
  given.node_rank =
      app_.add_option(both_spellings("--node-rank"), o.node_rank, "This node's rank (static backend; c10d: requested)")
          ->check(CLI::NonNegativeNumber);
  given.master_addr =
      app_.add_option(both_spellings("--master-addr"), o.master_addr, "Static backend: node 0's address")
          ->default_str("127.0.0.1");
  given.master_port = app_.add_option(both_spellings("--master-port"), raw.master_port,
                                      "Static backend: the daemon's port on node 0 (29500)");
  app_.add_option(both_spellings("--local-addr"), o.local_addr, "The address other nodes reach this node at");
  app_.add_option(both_spellings("--logs-specs"), raw.logs_specs,
                  "Refused: a Python plugin of torchrun's; use --log-dir, --redirects, --tee, --local-ranks-filter");
  app_.add_option(both_spellings("--numa-binding"), raw.numa_binding,
                  "Refused: not implemented; bind workers with numactl from a --no-python wrapper");
}

void LaunchCommandLine::add_signal_options(LaunchOptions& o) {
  app_.add_option(both_spellings("--signals-to-handle"), raw.signals,
                  "Signals forwarded to workers (default SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2)");
  app_.add_option(
      both_spellings("--shutdown-timeout"), raw.shutdown_timeout,
      "Seconds between SIGTERM and SIGKILL when stopping workers (default 30, or $TORCH_ELASTIC_SHUTDOWN_TIMEOUT)");
  app_.add_flag(both_spellings("--virtual-local-rank"), o.virtual_local_rank,
                "LOCAL_RANK=0 in every worker, CUDA_VISIBLE_DEVICES narrowed to its GPU");
  app_.add_option(both_spellings("--print-completion"), raw.print_completion, "Not supported by meshrun");
}

void LaunchCommandLine::add_restart_options(LaunchOptions& o) {
  app_.add_option("--fault-stop-timeout", o.fault_stop_timeout_s,
                  "Seconds between SIGTERM and SIGKILL when a fault ends the attempt (a node lost, a worker failed "
                  "or hung here or elsewhere): the workers' peers are gone, so nothing collective can finish. At "
                  "most --shutdown-timeout, which signals, ends and scale-ups keep")
      ->default_str("3");
  app_.add_flag("--no-standby", raw.no_standby,
                "Start every worker as a fresh interpreter: by default, a job that may restart keeps one standby "
                "Python per local rank with torch imported, and a restart's workers start from them "
                "(docs/multi-node.md#standby-workers)");
  app_.add_option("--standby-start", raw.standby_start,
                  "When standby workers start beside a running job: idle (one at a time, each into a core that sat "
                  "idle: their imports never slow the job), or now (all at its first step: a restart always finds "
                  "them, at the cost of a few seconds of a core each)")
      ->default_str("idle");
  app_.add_flag(
      "--no-quick-exit", raw.no_quick_exit,
      "Let a worker that dies of a lost peer's collective error go through Python's whole teardown: by "
      "default, while the job may restart, it ends once its atexit functions ran and its writers and "
      "files were closed, through libc's exit(); never for its own exception (docs/multi-node.md#quick-exit)");
  app_.add_option(
      "--preload", raw.preload,
      "Comma-separated modules the standby workers import besides torch and torch._dynamo (e.g. transformers)");
  app_.add_flag("--no-evict", raw.no_evict,
                "Keep a hang verdict's suspect node in the job: by default it makes way for a hot spare when one "
                "waits (docs/multi-node.md#hot-spares)");
}

void LaunchCommandLine::add_hang_options(LaunchOptions& o) {
  app_.add_option("--hang-timeout", raw.hang_timeout,
                  "How long a rank may wait in one collective (PyTorch workers, read by meshrun's startup hook) or "
                  "stay silent after a progress beat before a hang is suspected: auto (floor + 2x the job's "
                  "cadence, from the first collective; after 3 steps for beats), off (no hook either), or SECONDS. "
                  "The ranks waited for are then judged: stopped, or idle on what only the job itself can end (a lock "
                  "nothing else releases, the job's own sockets), is a hang; busy (computing, reading, writing) or "
                  "waiting on the world outside the job (a service, a sleep, a file) is only late (docs/progress.md)")
      ->default_str("auto");
  app_.add_option("--hang-busy-timeout", raw.hang_busy_timeout,
                  "How long a busy rank (one that computes or does I/O) may keep the others waiting in a collective "
                  "before the job counts as hung: off (never: PyTorch's own timeout ends such a job, as under "
                  "torchrun), or SECONDS. Set it for a rank that may spin forever")
      ->default_str("off");
  app_.add_option("--hang-outside-timeout", raw.hang_outside_timeout,
                  "How long an idle rank that waits on something outside the job (a service's reply, a sleep, a file "
                  "or pipe another process feeds, or a wait meshrun cannot classify) may keep the others waiting in a "
                  "collective before the job counts as hung: off (never: PyTorch's own timeout ends such a job, as "
                  "under torchrun), or SECONDS")
      ->default_str("off");
  app_.add_option("--hang-floor", o.progress.floor_s,
                  "Seconds added to the automatic hang budget; also how long a stopped (state T) worker may stay "
                  "stopped")
      ->default_str("60");
  app_.add_option("--hang-phase-timeout", o.progress.phase_s,
                  "The least hang budget while a rank is in a phase other than train (eval, checkpoint...)")
      ->default_str("1800");
  app_.add_option("--straggler-threshold", o.straggler_threshold,
                  "Name ranks this many times slower per step than the run's median (0: off)")
      ->default_str("1.3");
  app_.add_flag("--replace-slow-nodes", o.slow_nodes.replace,
                "Let a node whose ranks stay named stragglers make way for a hot spare, when one waits and the "
                "restart pays for itself (docs/multi-node.md#slow-nodes); off by default: every worker restarts");
  app_.add_option("--slow-node-after", o.slow_nodes.after_s,
                  "With --replace-slow-nodes: seconds a node is named slow without a break before it may be evicted")
      ->default_str("60");
  app_.add_option("--slow-node-cooldown", o.slow_nodes.cooldown_s,
                  "With --replace-slow-nodes: seconds an evicted node is not taken back, not even as a spare")
      ->default_str("1800");
}

void LaunchCommandLine::add_hosting_options(LaunchOptions& o) {
  app_.add_option("--host", o.hosted_bind,
                  "When this agent hosts the rendezvous (the c10d endpoint's host, static node 0, node rank 0's store "
                  "under etcd): the address it listens on, e.g. the nodes' network's (default: every address; "
                  "127.0.0.1 with --standalone)");
  repeatable(app_.add_option("--allow", o.hosted_allow,
                             "When this agent hosts the rendezvous: accept only peers in this CIDR, e.g. 10.0.0.0/8; "
                             "repeatable (as meshrun-rendezvous --allow)"));
}

void LaunchCommandLine::add_fanout_options(LaunchOptions& o) {
  given.hostfile = app_.add_option("-H,--hostfile", o.fanout.hostfile,
                                   "Start one meshrun per host of FILE over ssh (lines: `host slots=N`)");
  app_.add_option("-i,--include", o.fanout.include, "With --hostfile: only these hosts/slots, e.g. node1@node2:0,1");
  app_.add_option("-e,--exclude", o.fanout.exclude, "With --hostfile: skip these hosts/slots, e.g. node3");
  repeatable(app_.add_option("--export", o.fanout.exports,
                             "With --hostfile: send VAR (or VAR=VALUE) to every host; repeatable"));
  app_.add_option("--ssh-opts", o.fanout.ssh_opts,
                  "With --hostfile: extra ssh arguments, e.g. \"-i ~/.ssh/k -p 2222\"");
  app_.add_option("--remote-meshrun", o.fanout.remote_meshrun,
                  "With --hostfile: meshrun's path on the hosts (default: this binary's path)");
  app_.add_option("--ssh-connect-timeout", o.fanout.connect_timeout_s, "With --hostfile: ssh ConnectTimeout seconds")
      ->default_str("10");
}

void LaunchCommandLine::add_log_options(LaunchOptions& o) {
  app_.add_option(both_spellings("--log-level"), o.log_level, "meshrun's own log level: trace..error, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->default_str("warn");
}

std::string LaunchCommandLine::help_text() const {
  // CLI11 2.1 cannot be told the usage line; the entrypoint it stops at (prefix_command) belongs there.
  std::string text = app_.help();
  const std::string bare = "Usage: " + app_.get_name() + " [OPTIONS]\n";
  if (const auto at = text.find(bare); at != std::string::npos) {
    text.replace(at, bare.size(), "Usage: " + app_.get_name() + " [OPTIONS] ENTRYPOINT [ARGS...]\n");
  }
  return text;
}

std::optional<std::string> LaunchCommandLine::parse(const std::vector<std::string>& argv) {
  // CLI11 wants the arguments in reverse order.
  std::vector<std::string> reversed(argv.rbegin(), argv.rend());
  try {
    app_.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return help_text();
  } catch (const CLI::CallForAllHelp&) {
    return help_text();
  } catch (const CLI::CallForVersion&) {
    return std::string("meshrun ") + kVersion + "\n";
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  return std::nullopt;
}

// The entrypoint and its arguments from what follows meshrun's options; also what preceded them in the
// user's argv (meshrun's own options, which the ssh fan-out passes on).
void take_entrypoint(std::vector<std::string> rest, const std::vector<std::string>& user_args, LaunchOptions& o) {
  if (!rest.empty() && rest.front() == "--") {
    rest.erase(rest.begin());
  } else if (!rest.empty() && rest.front().size() > 1 && rest.front().front() == '-') {
    throw UsageError("unknown option '" + rest.front() +
                     "' (see meshrun --help; put the program after `--` if it "
                     "really starts with '-')");
  }
  if (rest.empty()) throw UsageError("missing ENTRYPOINT: meshrun [OPTIONS] ENTRYPOINT [ARGS...] (see meshrun --help)");
  o.entrypoint = rest.front();
  o.args.assign(rest.begin() + 1, rest.end());
  const size_t tail =
      o.args.size() + 1 +
      (user_args.size() >= o.args.size() + 2 && user_args[user_args.size() - o.args.size() - 2] == "--" ? 1 : 0);
  if (user_args.size() >= tail) o.launcher_args.assign(user_args.begin(), user_args.end() - static_cast<long>(tail));
}

RdzvBackend convert_backend(const std::string& backend, ParseResult& result) {
  if (backend == "c10d") return RdzvBackend::kC10d;
  if (backend == "static") return RdzvBackend::kStatic;
  if (backend == "etcd-v3" || backend == "etcd" || backend == "etcd-v2") {
    if (backend != "etcd-v3") {
      result.warnings.push_back("--rdzv-backend " + backend +
                                ": meshrun speaks etcd's v3 API (torchrun's etcd-v2 backend is legacy); using etcd-v3");
    }
    return RdzvBackend::kEtcd;
  }
  throw UsageError("--rdzv-backend '" + backend + "': expected c10d, static or etcd-v3");
}

/// Whether etcd-v3 speaks TLS: https:// members or protocol=https, the two agreeing; TLS files only with TLS.
void settle_etcd_tls(RdzvConf& conf, bool https_members) {
  if (conf.etcd_https == false && https_members)
    throw UsageError("--rdzv-conf protocol=http, but --rdzv-endpoint names https:// members: drop one of the two");
  conf.etcd_https = conf.etcd_https.value_or(https_members);
  const bool files = !conf.etcd_ca_file.empty() || !conf.etcd_cert_file.empty() || !conf.etcd_key_file.empty();
  if (files && !*conf.etcd_https) {
    throw UsageError(
        "--rdzv-conf ca_cert=/ssl_cert=/ssl_cert_key= are for TLS, but the etcd members are plain http: add "
        "protocol=https (or write the members https://host:2379)");
  }
}

void convert_rendezvous(const RawFlags& raw, const EnvLookup& env, const HostInfo& host, ParseResult& result) {
  LaunchOptions& o = result.options;
  std::tie(o.min_nodes, o.max_nodes) = parse_nnodes(raw.nnodes);
  o.nproc_per_node = resolve_nproc_per_node(o.nproc_spec, host);
  o.backend = convert_backend(raw.backend, result);
  bool https_members = false;
  if (o.backend == RdzvBackend::kEtcd) {
    o.etcd_endpoints = parse_etcd_endpoints(raw.endpoint, https_members);
  } else if (!raw.endpoint.empty()) {
    o.rdzv_endpoint = parse_endpoint(raw.endpoint, kDefaultRdzvPort);
  }
  o.run_id = raw.run_id;
  o.rdzv_conf = parse_rdzv_conf(raw.conf);
  if (o.backend == RdzvBackend::kEtcd) settle_etcd_tls(o.rdzv_conf, https_members);
  if (o.local_addr.empty()) o.local_addr = o.rdzv_conf.local_addr;  // --local-addr wins, as in torchrun
  o.master_addr = strip_brackets(o.master_addr);                    // "[fd00::1]" as in an endpoint
  if (const auto token = env(proto::kTokenEnv); o.rdzv_conf.token.empty() && token) o.rdzv_conf.token = trim(*token);
  if (const auto password = env(kEtcdPasswordEnv); o.rdzv_conf.etcd_password.empty() && password)
    o.rdzv_conf.etcd_password = *password;
}

std::optional<std::set<int>> convert_ranks_filter(const std::string& filter) {
  if (trim(filter).empty()) return std::nullopt;
  std::set<int> ranks;
  for (const auto& item : split(filter, ',')) {
    const auto r = to_int(trim(item));
    if (!r || *r < 0) throw UsageError("--local-ranks-filter '" + filter + "': '" + item + "' is not a local rank");
    ranks.insert(*r);
  }
  return ranks;
}

void convert_output(const RawFlags& raw, LaunchOptions& o) {
  o.redirects = parse_stream_mask(raw.redirects, "--redirects");
  o.tee = parse_stream_mask(raw.tee, "--tee");
  if (auto ranks = convert_ranks_filter(raw.filter)) o.local_ranks_filter = std::move(*ranks);
}

void convert_shutdown_timeouts(const RawFlags& raw, const EnvLookup& env, LaunchOptions& o) {
  if (raw.shutdown_timeout) {
    o.shutdown_timeout_s = *raw.shutdown_timeout;
  } else if (const auto v = env("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")) {
    const auto parsed = to_double(*v);
    if (!parsed || *parsed < 0) throw UsageError("TORCH_ELASTIC_SHUTDOWN_TIMEOUT='" + *v + "': expected seconds");
    o.shutdown_timeout_s = *parsed;
  }
  if (o.shutdown_timeout_s < 0) throw UsageError("--shutdown-timeout must not be negative");
  if (o.fault_stop_timeout_s < 0) throw UsageError("--fault-stop-timeout must not be negative");
}

// --preload: dotted Python module names, comma-separated.
std::vector<std::string> parse_preload(const std::string& text) {
  std::vector<std::string> modules;
  for (const auto& item : split(text, ',')) {
    const std::string module = trim(item);
    if (module.empty()) continue;
    const bool valid = std::all_of(module.begin(), module.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.';
    });
    if (!valid || module.front() == '.' || module.back() == '.' ||
        std::isdigit(static_cast<unsigned char>(module.front())) != 0) {
      throw UsageError("--preload '" + text + "': '" + module +
                       "' is not a module name (dotted Python identifiers, comma-separated)");
    }
    modules.push_back(module);
  }
  return modules;
}

void convert_supervision(const RawFlags& raw, const EnvLookup& env, LaunchOptions& o) {
  o.signals_to_handle = raw.signals.empty() ? default_forwarded_signals() : parse_signal_list(raw.signals);
  if (!raw.signals.empty()) o.signals_to_handle_text = raw.signals;  // torchrun passes its flag on as given
  convert_shutdown_timeouts(raw, env, o);
  o.evict_suspects = !raw.no_evict;
  o.standby = !raw.no_standby;
  if (raw.standby_start != "idle" && raw.standby_start != "now") {
    throw UsageError("--standby-start '" + raw.standby_start + "': expected idle or now");
  }
  o.standby_at_once = raw.standby_start == "now";
  o.quick_exit = !raw.no_quick_exit;
  o.preload = parse_preload(raw.preload);
  parse_hang_timeout(raw.hang_timeout, o.progress);
  o.progress.busy_timeout_s = parse_busy_timeout(raw.hang_busy_timeout);
  o.progress.outside_timeout_s = parse_outside_timeout(raw.hang_outside_timeout);
  require_positive(o.progress.floor_s, "--hang-floor");
  require_positive(o.progress.phase_s, "--hang-phase-timeout");
  require_positive(o.slow_nodes.after_s, "--slow-node-after");
  if (!(o.slow_nodes.cooldown_s >= 0)) throw UsageError("--slow-node-cooldown: expected 0 seconds or more");
  if (o.slow_nodes.replace && o.straggler_threshold == 0) {
    throw UsageError("--replace-slow-nodes needs the straggler alert: drop --straggler-threshold 0");
  }
  if (o.straggler_threshold != 0 && o.straggler_threshold <= 1) {
    throw UsageError("--straggler-threshold " + std::to_string(o.straggler_threshold) +
                     ": expected a factor above 1 (1.3 names ranks 30% slower than the median), or 0 for off");
  }
}

void check_entrypoint_kind(ParseResult& result) {
  LaunchOptions& o = result.options;
  if (o.module && o.no_python) {
    throw UsageError("--module and --no-python contradict each other: a module needs Python");
  }
  if (o.run_path && o.module) throw UsageError("--run-path and --module contradict each other: pick one");
  if (o.run_path && o.no_python) {
    result.warnings.push_back("--run-path takes precedence over --no-python (as in torchrun)");
    o.no_python = false;
  }
}

void check_standalone(const RawFlags& raw, const GivenFlags& given, ParseResult& result) {
  LaunchOptions& o = result.options;
  if (o.max_nodes > 1) {
    throw UsageError("--standalone runs a single node but --nnodes is " + raw.nnodes +
                     "; drop --standalone and give --rdzv-endpoint for multi-node runs");
  }
  if (given.backend->count() > 0 && o.backend != RdzvBackend::kC10d) {
    throw UsageError("--standalone uses the c10d rendezvous but --rdzv-backend " + raw.backend +
                     " was given; drop one of them");
  }
  if (given.endpoint->count() > 0 || given.run_id->count() > 0) {
    result.warnings.push_back(
        "--standalone: --rdzv-endpoint and --rdzv-id are ignored (a local rendezvous on a "
        "free port with a random id is used, as in torchrun)");
  }
  o.backend = RdzvBackend::kC10d;
  o.rdzv_endpoint.reset();
}

void check_static(const RawFlags& raw, const GivenFlags& given, LaunchOptions& o) {
  if (o.min_nodes != o.max_nodes) {
    throw UsageError("--nnodes " + raw.nnodes +
                     ": the static backend needs a fixed node count; use --rdzv-backend c10d "
                     "for an elastic range");
  }
  if (o.node_rank >= o.max_nodes) {
    throw UsageError("--node-rank " + std::to_string(o.node_rank) + " is out of range for --nnodes " + raw.nnodes +
                     " (valid: 0.." + std::to_string(o.max_nodes - 1) + ")");
  }
  if (given.endpoint->count() > 0 && given.master_addr->count() == 0 && o.rdzv_endpoint) {
    // torchrun's static backend takes the master from --rdzv-endpoint when given.
    o.master_addr = o.rdzv_endpoint->host;
    if (!o.master_port && raw.endpoint.find(':') != std::string::npos) o.master_port = o.rdzv_endpoint->port;
  }
}

// Contradictions between options: fail now rather than hang later.
void check_contradictions(const RawFlags& raw, const GivenFlags& given, ParseResult& result) {
  LaunchOptions& o = result.options;
  check_entrypoint_kind(result);
  if (o.standalone) check_standalone(raw, given, result);
  if (o.backend == RdzvBackend::kStatic) {
    check_static(raw, given, o);
  } else if (o.backend == RdzvBackend::kC10d && !o.standalone && !o.rdzv_endpoint && o.max_nodes > 1) {
    throw UsageError("--rdzv-backend c10d with --nnodes " + raw.nnodes +
                     " needs --rdzv-endpoint HOST[:PORT] (otherwise every node would form a world of its own)");
  }
  if (o.node_rank_given && o.backend != RdzvBackend::kStatic && o.node_rank >= o.max_nodes) {
    throw UsageError("--node-rank " + std::to_string(o.node_rank) + " is out of range for --nnodes " + raw.nnodes);
  }
  if (!raw.print_completion.empty()) {
    throw UsageError("--print-completion is not supported by meshrun");
  }
  refuse_python_only_flags(raw.event_log_handler, raw.logs_specs, raw.numa_binding);
}

}  // namespace

ParseResult parse_launch_options(const std::vector<std::string>& user_args, const EnvLookup& env,
                                 const HostInfo& host) {
  ParseResult result;
  LaunchOptions& o = result.options;
  LaunchCommandLine line(o);
  std::vector<std::string> argv = env_arguments(env);
  argv.insert(argv.end(), user_args.begin(), user_args.end());
  if (auto text = line.parse(argv)) {
    result.print_and_exit = std::move(text);
    return result;
  }
  take_entrypoint(line.remaining(), user_args, o);

  const RawFlags& raw = line.raw;
  const GivenFlags& given = line.given;
  convert_rendezvous(raw, env, host, result);
  require_positive(o.monitor_interval_s, "--monitor-interval");
  convert_output(raw, o);
  o.node_rank_given = given.node_rank->count() > 0;
  if (given.master_port->count() > 0) o.master_port = parse_port(raw.master_port, "--master-port");
  convert_supervision(raw, env, o);
  o.nnodes_given = given.nnodes->count() > 0;
  o.nproc_given = given.nproc->count() > 0;
  o.run_id_given = given.run_id->count() > 0;

  // Inside srun with no rendezvous flags: take nodes, rank, endpoint and run id from SLURM.
  const bool rdzv_flags = o.standalone || given.backend->count() > 0 || given.endpoint->count() > 0 ||
                          given.master_addr->count() > 0 || given.master_port->count() > 0 || o.node_rank_given;
  if (!rdzv_flags && !given.hostfile->count()) apply_slurm(result, env);

  check_contradictions(raw, given, result);
  if (!raw.dup_out.empty()) o.duplicate_stdout_filters = parse_filter_list(raw.dup_out);
  if (!raw.dup_err.empty()) o.duplicate_stderr_filters = parse_filter_list(raw.dup_err);
  if (o.standalone) o.run_id.clear();  // the agent picks a random id, as torchrun does
  return result;
}

}  // namespace meshrun::launcher
