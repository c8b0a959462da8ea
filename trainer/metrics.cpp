#include "trainer/metrics.hpp"

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

#include "common/error.hpp"

namespace meshrun::trainer {

nlohmann::json StepRecord::to_json() const {
  return {{"step", step},
          {"loss", loss},
          {"lr", lr},
          {"grad_norm", grad_norm},
          {"tokens_per_s", tokens_per_s},
          {"step_time_s", step_time_s},
          {"flops_per_s", flops_per_s},
          {"mfu", mfu},
          {"comm_share", comm_share}};
}

MetricsLog::MetricsLog(const std::string& path, bool progress_bar, int64_t total_steps)
    : bar_(progress_bar && ::isatty(STDOUT_FILENO) == 1), total_steps_(total_steps) {
  if (!path.empty()) {
    file_.open(path, std::ios::out | std::ios::trunc);
    if (!file_) throw UsageError("cannot write metrics file '" + path + "' (check output.dir)");
  }
}

void MetricsLog::log_step(const StepRecord& r, bool print) {
  if (file_) file_ << r.to_json().dump() << '\n' << std::flush;
  if (print) {
    if (bar_) std::fputs("\r\033[K", stdout);
    std::printf(
        "step %5lld | loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s | step %.0f ms | %.2f GFLOP/s | "
        "MFU %.1f%% | comm %.0f%%\n",
        static_cast<long long>(r.step), r.loss, r.lr, r.grad_norm, r.tokens_per_s, r.step_time_s * 1e3,
        r.flops_per_s / 1e9, r.mfu * 100, r.comm_share * 100);
  } else if (bar_) {
    const int width = 30;
    const int filled = static_cast<int>(width * r.step / std::max<int64_t>(1, total_steps_));
    std::printf("\r\033[K[%s%s] %lld/%lld loss %.4f", std::string(static_cast<size_t>(filled), '#').c_str(),
                std::string(static_cast<size_t>(width - filled), '.').c_str(), static_cast<long long>(r.step),
                static_cast<long long>(total_steps_), r.loss);
  }
  std::fflush(stdout);
}

void MetricsLog::log_eval(int64_t step, double val_loss) {
  if (file_) file_ << nlohmann::json{{"step", step}, {"val_loss", val_loss}}.dump() << '\n' << std::flush;
  if (bar_) std::fputs("\r\033[K", stdout);
  std::printf("step %5lld | val loss %.4f\n", static_cast<long long>(step), val_loss);
  std::fflush(stdout);
}

void MetricsLog::log_event(const nlohmann::json& event) {
  if (file_) file_ << event.dump() << '\n' << std::flush;
}

int64_t heap_in_use_bytes() {
  const struct mallinfo2 m = ::mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
}

int64_t current_rss_bytes() {
  long pages = 0;
  long resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<int64_t>(resident) * ::sysconf(_SC_PAGESIZE) : 0;
}

int64_t peak_rss_bytes() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", bytes, units[u]);
  return buf;
}

}  // namespace meshrun::trainer
