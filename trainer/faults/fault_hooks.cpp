#include "trainer/faults/fault_hooks.hpp"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "common/strings.hpp"

namespace meshrun::trainer {
namespace {

bool first_attempt() {
  const char* count = std::getenv("TORCHELASTIC_RESTART_COUNT");
  return count == nullptr || *count == '\0' || std::string(count) == "0";
}

std::string site_text(const FaultSite& site) { return std::to_string(site.step) + ":" + std::to_string(site.rank); }

}  // namespace

std::optional<double> fault_seconds(const char* variable, const FaultSite& site) {
  const char* v = std::getenv(variable);
  if (v == nullptr || !first_attempt()) return std::nullopt;
  const std::string spec(v);
  const std::string here = site_text(site) + ":";
  if (spec.rfind(here, 0) != 0) return std::nullopt;
  return std::stod(spec.substr(here.size()));
}

bool fault_at(const char* variable, const FaultSite& site) {
  const char* v = std::getenv(variable);
  return v != nullptr && first_attempt() && std::string(v) == site_text(site);
}

void stall_if_asked(const char* variable, const FaultSite& site) {
  if (const auto s = fault_seconds(variable, site)) std::this_thread::sleep_for(std::chrono::duration<double>(*s));
}

void hold_if_asked(const char* variable, const FaultSite& site) {
  const char* v = std::getenv(variable);
  if (v == nullptr) return;
  const std::string spec(v);
  const auto colon = spec.find(':');
  if (colon == std::string::npos) return;
  const std::string dir = spec.substr(colon + 1);
  bool named = false;
  for (const auto& step : split(spec.substr(0, colon), ',')) named = named || step == std::to_string(site.step);
  const std::string release = dir + "/release." + std::to_string(site.step);
  if (!named || std::filesystem::exists(release)) return;
  const std::string held = dir + "/held." + std::to_string(site.step) + "." + std::to_string(site.rank);
  std::ofstream(held + ".tmp") << site.step << "\n";
  std::filesystem::rename(held + ".tmp", held);
  std::fprintf(stderr, "test hook: rank %d holds after step %lld until %s exists\n", site.rank,
               static_cast<long long>(site.step), release.c_str());
  while (!std::filesystem::exists(release)) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

void busy_if_asked(const char* variable, const FaultSite& site) {
  const auto s = fault_seconds(variable, site);
  if (!s) return;
  std::fprintf(stderr, "test hook: rank %d computes for %.1f s after step %lld\n", site.rank, *s,
               static_cast<long long>(site.step));
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(*s);
  volatile double x = 1;
  while (std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 100000; ++i) x = x * 1.0000001 + 1e-9;
  }
}

void kill_if_asked(const char* variable, const FaultSite& site) {
  if (fault_at(variable, site)) ::raise(SIGKILL);
}

}  // namespace meshrun::trainer
