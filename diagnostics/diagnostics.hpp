// `meshrun ping` and `meshrun check`: the launcher's main() hands argv to these when the first
// argument is "ping" or "check", inside run_main (common/run_main.hpp), which words what they throw. Each
// parses its own flags and returns the process exit code.
#pragma once

#include <cstdint>

namespace meshrun::diagnostics {

/// torchrun's default rendezvous port; also the port `meshrun check` looks for on this host.
inline constexpr uint16_t kDefaultRendezvousPort = 29400;
/// torchrun's default MASTER_PORT (static rendezvous).
inline constexpr uint16_t kDefaultMasterPort = 29500;

/// argv[0] is "ping". Exit 0: every probe answered; 1: some did not; 2: usage error. Throws meshrun::Error.
int run_ping_command(int argc, char** argv);

/// argv[0] is "check". Exit 0: no check failed; 1: at least one FAIL; 2: usage error. Throws meshrun::Error.
int run_check_command(int argc, char** argv);

}  // namespace meshrun::diagnostics
