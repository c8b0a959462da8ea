#include "trainer/fault_hooks.hpp"

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

namespace meshrun::trainer {
namespace {

bool first_attempt() {
  const char* count = std::getenv("TORCHELASTIC_RESTART_COUNT");
  return count == nullptr || *count == '\0' || std::string(count) == "0";
}

std::string site_text(const FaultSite& site) { return std::to_string(site.step) + ":" + std::to_string(site.rank); }

}  // namespace

bool fault_at(const char* variable, const FaultSite& site) {
  const char* v = std::getenv(variable);
  return v != nullptr && first_attempt() && std::string(v) == site_text(site);
}

void stall_if_asked(const char* variable, const FaultSite& site) {
  const char* v = std::getenv(variable);
  if (v == nullptr || !first_attempt()) return;
  const std::string spec(v);
  const std::string here = site_text(site) + ":";
  if (spec.rfind(here, 0) != 0) return;
  std::this_thread::sleep_for(std::chrono::duration<double>(std::stod(spec.substr(here.size()))));
}

void kill_if_asked(const char* variable, const FaultSite& site) {
  if (fault_at(variable, site)) ::raise(SIGKILL);
}

}  // namespace meshrun::trainer
