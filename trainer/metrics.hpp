// Step metrics: rank 0's log line, the progress bar on a terminal, and the JSONL metrics file.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace meshrun::trainer {

struct StepRecord {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;  // global: all ranks
  double step_time_s = 0;
  double flops_per_s = 0;  // global achieved
  double mfu = 0;          // flops_per_s / (peak_flops * world)
  double comm_share = 0;   // exposed (blocked) communication / step time, rank 0
  nlohmann::json to_json() const;
};

class MetricsLog {
 public:
  /// `path` empty: no file. The progress bar is drawn only when stdout is a terminal.
  MetricsLog(const std::string& path, bool progress_bar, int64_t total_steps);
  /// Writes the record to the file; prints the line when `print` (every log_interval), else
  /// refreshes the progress bar.
  void log_step(const StepRecord& record, bool print);
  void log_eval(int64_t step, double val_loss);
  void log_event(const nlohmann::json& event);

 private:
  std::ofstream file_;
  bool bar_;
  int64_t total_steps_;
};

/// Peak resident set size of this process (getrusage ru_maxrss), bytes.
int64_t peak_rss_bytes();
/// Resident set size of this process right now (/proc/self/statm), bytes; 0 when unreadable.
int64_t current_rss_bytes();
/// Bytes of the C heap in use right now (glibc mallinfo2: arenas + mmap'd blocks): CPU tensors live there.
int64_t heap_in_use_bytes();
/// "12.3 MiB"
std::string format_bytes(double bytes);

}  // namespace meshrun::trainer
