// meshrun-trainer: the FSDP training worker. `--config FILE [--set key=value ...]`; rank layout from
// the environment (meshrun / torchrun), or a single process when RANK is unset.
#include <cstdio>

#include <c10/util/Exception.h>
#include <CLI/CLI.hpp>

#include "common/error.hpp"
#include "common/run_main.hpp"
#include "common/version.hpp"
#include "trainer/checkpoint/safetensors_export.hpp"
#include "trainer/config/trainer_config.hpp"
#include "trainer/distributed/dist_env.hpp"
#include "trainer/preemption.hpp"
#include "trainer/trainer.hpp"

namespace {

// Trains to the end (or to a signal-triggered checkpoint) and returns the exit code.
int train_and_report(const meshrun::trainer::TrainerConfig& config) {
  const auto summary = meshrun::trainer::train(config, meshrun::trainer::read_dist_env());
  if (summary.stopped_by_signal == 0) return 0;
  std::fprintf(stderr, "meshrun-trainer: checkpointed on signal, exiting with %d\n",
               meshrun::trainer::kCheckpointedOnSignal);
  return meshrun::trainer::kCheckpointedOnSignal;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"meshrun-trainer: FSDP language-model training (LibTorch), launched by meshrun"};
  app.set_version_flag("--version", std::string("meshrun-trainer ") + meshrun::kVersion);
  std::string config_path;
  std::vector<std::string> overrides;
  bool help_config = false;
  std::string resume;
  app.option_defaults()->group("The run's configuration (--help-config lists every key)");
  app.add_option("--config", config_path, "JSON config (configs/NAME.json)");
  app.add_option("--set", overrides, "override a config key: --set train.lr=1e-3 (repeatable)");
  app.add_option("--resume", resume,
                 "auto (newest complete checkpoint in checkpoint.dir) or a step_<N> folder; "
                 "same as --set checkpoint.resume=...");
  app.add_flag("--help-config", help_config, "list every config key with its default and meaning");
  app.option_defaults()->group("Options");
  auto* export_cmd = app.add_subcommand(
      "export", "write a checkpoint's weights as safetensors (Hugging Face Llama names) + config.json");
  std::string export_checkpoint;
  std::string export_out;
  export_cmd
      ->add_option("--checkpoint", export_checkpoint, "a step_<N> folder, or a checkpoint.dir (its newest checkpoint)")
      ->required();
  export_cmd->add_option("--out", export_out, "output .safetensors file; config.json goes next to it")->required();
  std::string export_dtype = "fp32";
  export_cmd->add_option("--dtype", export_dtype, "fp32 or bf16 (rounded to nearest even)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return meshrun::run_main("meshrun-trainer", [&] {
    try {
      if (*export_cmd) {
        meshrun::trainer::export_safetensors(export_checkpoint, export_out,
                                             meshrun::trainer::parse_dtype("export --dtype", export_dtype));
        return 0;
      }
      if (help_config) {
        for (const auto& [key, doc] : meshrun::trainer::config_key_docs())
          std::printf("%-28s %s\n", key.c_str(), doc.c_str());
        return 0;
      }
      if (!resume.empty()) overrides.push_back("checkpoint.resume=" + resume);
      if (config_path.empty())
        throw meshrun::UsageError("--config is required (e.g. --config configs/quickstart.json)");
      return train_and_report(meshrun::trainer::load_config(config_path, overrides));
    } catch (const c10::Error& e) {
      // LibTorch's own message carries a C++ backtrace that means nothing to a user.
      throw meshrun::Error(std::string("torch error: ") + e.what_without_backtrace());
    }
  });
}
