// Host identity: this machine's name, whether a host the user named is this machine, and fresh run ids.
// The rendezvous backends and the ssh fan-out ask these questions; none of them does a reverse lookup.
#pragma once

#include <string>

namespace meshrun::launcher {

/// gethostname(), or "localhost" when it fails.
std::string local_hostname();

/// True when `host` names this machine (loopback, its host name, or one of its interface addresses).
bool is_local_host(const std::string& host);

/// 16 random hex digits: --standalone's run id.
std::string random_run_id();

}  // namespace meshrun::launcher
