// meshrun-rendezvous: the TCPStore-compatible rendezvous daemon, and its `status` client command.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "common/endpoint.hpp"
#include "common/error.hpp"
#include "common/logging.hpp"
#include "common/run_main.hpp"
#include "common/strings.hpp"
#include "common/version.hpp"
#include "proto/rendezvous/join_auth.hpp"
#include "proto/rendezvous/rendezvous_client.hpp"
#include "rendezvous/server.hpp"
#include "rendezvous/status_command.hpp"

namespace {

// Thousands of agents and workers each hold a connection: lift the soft fd limit to the hard one.
void raise_open_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// Serves in the foreground until SIGINT/SIGTERM.
// The join token comes from a file or the environment, never the command line (`ps` shows that).
std::string read_token_file(const std::string& path) {
  std::ifstream in(path);
  std::string token;
  std::getline(in, token);
  token = std::string(meshrun::trim(token));
  if (token.empty()) throw meshrun::UsageError("--token-file " + path + ": the file's first line is empty");
  return token;
}

std::string env_token() {
  const char* token = std::getenv(meshrun::proto::kTokenEnv);
  return token ? std::string(meshrun::trim(token)) : std::string();
}

int serve(const meshrun::rendezvous::ServerOptions& options, const std::string& log_level) {
  using namespace meshrun;
  init_logging("rendezvous", log_level);
  raise_open_file_limit();
  rendezvous::Server server(options);
  std::cout << "listening on " << Endpoint{options.host, server.port()}.to_string() << std::endl;
  if (const auto http_port = server.http_port()) {
    std::cout << "http on " << Endpoint{options.host, *http_port}.to_string() << std::endl;
  }
  spdlog::info("meshrun-rendezvous {} listening on {}", kVersion, Endpoint{options.host, server.port()}.to_string());
  if (!options.join_token.empty()) spdlog::info("agents must prove the join token to join (the token is not logged)");
  server.run(/*handle_signals=*/true);
  spdlog::info("stopped");
  return 0;
}

int run_status(const std::string& endpoint_text, bool as_json, double timeout_s) {
  using namespace meshrun;
  if (endpoint_text.find(',') != std::string::npos) {
    throw UsageError("--endpoint '" + endpoint_text +
                     "' names several hosts (the etcd members of an etcd-v3 job's MESHRUN_RDZV_ENDPOINT): status asks "
                     "one meshrun-rendezvous daemon; pass --endpoint HOST[:PORT]");
  }
  const auto endpoint = parse_endpoint(endpoint_text, 29400);
  proto::ConnectOptions options;
  options.connect_timeout = from_seconds(timeout_s);
  options.op_timeout = from_seconds(timeout_s);
  options.retry_refused = false;
  proto::RendezvousClient client(proto::StoreClient::connect(endpoint, options));
  const auto status = client.status();
  if (as_json) {
    std::cout << nlohmann::json(status).dump(2) << "\n";
  } else {
    rendezvous::print_status_table(status, std::cout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace meshrun;
  CLI::App app{"meshrun-rendezvous: a TCPStore-compatible rendezvous daemon for meshrun and PyTorch"};
  app.set_version_flag("--version", std::string("meshrun-rendezvous ") + kVersion);
  rendezvous::ServerOptions options;
  std::string log_level = "info";
  size_t max_message_bytes = options.limits.max_value_bytes;
  app.option_defaults()->group("Where it listens and whom it serves (docs/security.md)");
  app.add_option("--host", options.host,
                 "Address to listen on (0.0.0.0 = all IPv4; :: = all IPv6 and IPv4; [::] works too)")
      ->capture_default_str();
  app.add_option("--port", options.port, "Port to listen on; 0 picks a free one (printed on the first line)")
      ->capture_default_str();
  app.add_option("--allow", options.allow, "Only accept peers in this CIDR (repeatable), e.g. 10.0.0.0/8");
  std::string token_file;
  app.add_option("--token-file", token_file,
                 "Require every agent to prove this join token (the file's first line; or set MESHRUN_RDZV_TOKEN)")
      ->check(CLI::ExistingFile);
  app.add_option("--max-message-bytes", max_message_bytes, "Largest value or payload accepted in one request")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1024}, size_t{1} << 32));
  app.add_option("--max-connections-per-peer", options.limits.max_connections_per_peer,
                 "Connections one client address may hold at once; past it new ones are closed (0: no cap)")
      ->capture_default_str();
  app.add_option("--max-waited-keys-per-peer", options.limits.max_waited_keys_per_peer,
                 "Keys one client address may wait on at once, over all its connections; a WAIT past it closes "
                 "that connection (0: no cap)")
      ->capture_default_str();
  app.option_defaults()->group("The live view: a page, /api/status, /metrics, /health (docs/daemon.md)");
  app.add_option("--http-port", options.http_port,
                 "Serve the live view (/, /api/status, /metrics, /health) on this port; 0 picks a free one "
                 "(printed as 'http on HOST:PORT'). Off when not given");
  int64_t http_idle_s = options.http_idle_timeout.count();
  app.add_option("--http-idle-timeout", http_idle_s, "Seconds an idle HTTP keep-alive connection stays open")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{3600}));
  app.option_defaults()->group("Its own output");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")->capture_default_str();
  app.option_defaults()->group("Options");

  auto* status_cmd = app.add_subcommand("status", "Print the runs, rounds and nodes of a running daemon");
  std::string endpoint = "127.0.0.1:29400";
  bool as_json = false;
  double timeout_s = 5;
  // Inside a worker meshrun started, the job's own rendezvous is the default.
  status_cmd
      ->add_option("--endpoint", endpoint,
                   "Daemon to ask, HOST[:PORT] (default: $MESHRUN_RDZV_ENDPOINT, as set in "
                   "meshrun's workers, else 127.0.0.1:29400)")
      ->envname("MESHRUN_RDZV_ENDPOINT")
      ->capture_default_str();
  status_cmd->add_flag("--json", as_json, "Print JSON instead of a table");
  status_cmd->add_option("--timeout", timeout_s, "Seconds to wait for the daemon")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return run_main("meshrun-rendezvous", [&] {
    if (status_cmd->parsed()) return run_status(endpoint, as_json, timeout_s);
    options.host = strip_brackets(options.host);  // "[::1]" as in an endpoint
    options.limits.max_value_bytes = max_message_bytes;
    options.http_idle_timeout = std::chrono::seconds(http_idle_s);
    options.join_token = token_file.empty() ? env_token() : read_token_file(token_file);
    return serve(options, log_level);
  });
}
