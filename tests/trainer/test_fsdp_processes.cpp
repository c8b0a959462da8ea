// FSDP with real worker processes over Gloo, bootstrapped through the real meshrun-rendezvous:
// parity with a single process, mixed precision, gradient accumulation, memory, rank mismatches.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/trainer/process_runner.hpp"

using namespace meshrun::testing;

namespace {

const std::vector<std::string> kParityRun = {"train.steps=20", "train.seq_len=32", "train.global_batch_size=8",
                                             "train.log_interval=100", "output.dump_params=true"};

struct Reference {
  std::vector<double> losses;
  std::vector<float> params;
};

// The single-process run (no RANK: no store, no process group) every distributed run must match.
const Reference& fp32_reference() {
  static const Reference ref = [] {
    const auto run = run_workers(0, kParityRun);
    if (!run.ok()) FAIL(run.describe());
    return Reference{read_losses(run.dir), read_params(run.dir)};
  }();
  return ref;
}

double max_rel_loss_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(b[i]));
  return worst;
}

double max_abs_param_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

nlohmann::json rank_report(const RunResult& run, int rank) {
  return nlohmann::json::parse(read_file(run.dir + "/rank" + std::to_string(rank) + ".json"));
}

}  // namespace

TEST_CASE("parity: fp32 losses and final parameters match one process for every world size and strategy",
          "[trainer][fsdp][parity]") {
  const auto& ref = fp32_reference();
  REQUIRE(ref.losses.size() == 20);
  REQUIRE(ref.params.size() > 800000);
  const std::string strategy = GENERATE("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD");
  const int world = GENERATE(1, 2, 4);
  const auto run = run_workers(world, with(kParityRun, {"fsdp.strategy=" + strategy}));
  INFO(strategy << " world " << world);
  REQUIRE(run.ok());
  INFO(run.describe());
  const auto losses = read_losses(run.dir);
  const auto params = read_params(run.dir);
  REQUIRE(losses.size() == ref.losses.size());
  REQUIRE(params.size() == ref.params.size());
  const double loss_diff = max_rel_loss_diff(losses, ref.losses);
  const double param_diff = max_abs_param_diff(params, ref.params);
  WARN(strategy << " world " << world << ": max relative loss diff " << loss_diff << ", max |param diff| "
                << param_diff);
  CHECK(loss_diff < 1e-5);
  // Summation order differs with the world size (per-rank means, then a sum over ranks), so bit equality is
  // not expected; 1e-5 absolute is ~1/2000 of the init std (0.02).
  CHECK(param_diff < 1e-5);
  // Training worked at all: the loss fell from ~ln(256).
  CHECK(losses.back() < losses.front() - 1.0);
}

TEST_CASE("parity: bf16 compute stays within bf16 rounding of the fp32 run", "[trainer][fsdp][bf16]") {
  const auto& ref = fp32_reference();
  const auto run = run_workers(2, with(kParityRun, {"fsdp.param_dtype=bf16"}));
  REQUIRE(run.ok());
  const auto losses = read_losses(run.dir);
  REQUIRE(losses.size() == ref.losses.size());
  const double diff = max_rel_loss_diff(losses, ref.losses);
  WARN("bf16 (world 2, fp32 reduce) vs fp32 single process: max relative loss diff " << diff);
  // bf16 keeps 8 significant bits: one rounding of a value is up to 2^-9 = 0.2% relative. Matmuls accumulate
  // in fp32 and the loss is computed in fp32, so the per-step loss moves by a fraction of that (measured:
  // 3.4e-4 over 20 steps). 5e-3 is 2.5 rounding units: a bf16 path that drops or double-counts a gradient
  // moves the loss by far more (steps change it by ~3% each).
  CHECK(diff < 5e-3);
  CHECK(losses.back() < losses.front() - 1.0);
  // Same bf16 run on one rank agrees with the two-rank run as well.
  const auto single = run_workers(1, with(kParityRun, {"fsdp.param_dtype=bf16"}));
  REQUIRE(single.ok());
  CHECK(max_rel_loss_diff(read_losses(single.dir), losses) < 5e-3);
}

TEST_CASE("grad accumulation: 4 micro-batches of B equal one batch of 4B", "[trainer][fsdp][accum]") {
  const std::vector<std::string> base = {"train.steps=10", "train.seq_len=32", "train.log_interval=100",
                                         "output.dump_params=true"};
  const auto big = run_workers(2, with(base, {"train.global_batch_size=16"}));
  const auto accum = run_workers(2, with(base, {"train.global_batch_size=4", "train.grad_accum_steps=4"}));
  REQUIRE(big.ok());
  REQUIRE(accum.ok());
  const double loss_diff = max_rel_loss_diff(read_losses(accum.dir), read_losses(big.dir));
  const double param_diff = max_abs_param_diff(read_params(accum.dir), read_params(big.dir));
  WARN("accumulation vs big batch: max relative loss diff " << loss_diff << ", max |param diff| " << param_diff);
  CHECK(read_losses(accum.dir).size() == 10);
  CHECK(loss_diff < 1e-5);
  CHECK(param_diff < 1e-5);
  // Without sync the unsharded gradient is kept locally: the report shows it was held.
  CHECK(rank_report(accum, 0)["grad_accum_peak_bytes"].get<int64_t>() > 0);
  CHECK(rank_report(big, 0)["grad_accum_peak_bytes"].get<int64_t>() == 0);
}

TEST_CASE("memory: bytes held per rank follow the strategy", "[trainer][fsdp][memory]") {
  const std::vector<std::string> base = {"train.steps=2", "train.seq_len=32", "train.log_interval=100"};
  const auto single = run_workers(0, base);
  REQUIRE(single.ok());
  const int64_t numel = rank_report(single, 0)["numel"].get<int64_t>();
  const int64_t total = numel * 4;  // fp32
  CHECK(rank_report(single, 0)["param_shard_bytes"].get<int64_t>() == total);

  const int world = 2;
  const int64_t units = 5;  // root + 4 blocks: padding is at most world-1 elements per unit
  for (const std::string strategy : {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"}) {
    const auto run = run_workers(world, with(base, {"fsdp.strategy=" + strategy}));
    REQUIRE(run.ok());
    for (int r = 0; r < world; ++r) {
      INFO(strategy << " rank " << r);
      const auto rep = rank_report(run, r);
      const int64_t params = rep["param_shard_bytes"].get<int64_t>();
      const int64_t grads = rep["grad_shard_bytes"].get<int64_t>();
      const int64_t optim = rep["optimizer_bytes"].get<int64_t>();
      const int64_t gathered = rep["gathered_param_peak_bytes"].get<int64_t>();
      if (strategy == "NO_SHARD") {
        CHECK(params == total);
        CHECK(grads == total);
        CHECK(optim == 2 * total);
        CHECK(gathered == 0);  // fp32 compute runs on the replicated master weights themselves
        continue;
      }
      const int64_t shard_max = (numel + units * (world - 1)) / world * 4;
      CHECK(params >= total / world);
      CHECK(params <= shard_max);
      CHECK(grads == params);
      CHECK(optim == 2 * params);
      const int64_t padded = rep["padded_numel"].get<int64_t>() * 4;
      if (strategy == "SHARD_GRAD_OP") {
        CHECK(gathered == padded);  // every unit stays gathered from its forward to its backward
      } else {
        CHECK(gathered < padded / 2);  // the root plus the unit computing plus the one prefetched
      }
    }
  }
}

TEST_CASE("start-up check: ranks with different configs are named and do not hang", "[trainer][fsdp][mismatch]") {
  const auto run = run_workers(2, {"train.steps=2"}, {RankRun{}, RankRun{{"train.lr=0.002"}, {}}});
  CHECK(run.exit_codes[0] != 0);
  CHECK(run.exit_codes[1] != 0);
  INFO(run.describe());
  CHECK_THAT(run.outputs[0], Catch::Contains("train.lr"));
  CHECK_THAT(run.outputs[1], Catch::Contains("train.lr"));
}

TEST_CASE("start-up check: ranks with different WORLD_SIZE are named and do not hang", "[trainer][fsdp][mismatch]") {
  const auto run = run_workers(2, {"train.steps=2"}, {RankRun{}, RankRun{{}, {{"WORLD_SIZE", "3"}}}});
  CHECK(run.exit_codes[0] != 0);
  CHECK(run.exit_codes[1] != 0);
  INFO(run.describe());
  CHECK_THAT(run.outputs[0], Catch::Contains("WORLD_SIZE"));
  CHECK_THAT(run.outputs[1], Catch::Contains("WORLD_SIZE=3"));
}

TEST_CASE("hybrid: 4 ranks as 2 nodes x 2 match one process and hold half the state", "[trainer][fsdp][hybrid]") {
  const auto& ref = fp32_reference();
  const int64_t total = static_cast<int64_t>(ref.params.size()) * 4;
  for (const std::string strategy : {"HYBRID_SHARD", "HYBRID_SHARD_ZERO2"}) {
    // The node boundary comes from LOCAL_WORLD_SIZE and GROUP_RANK, as meshrun --nnodes 2 --nproc-per-node 2
    // would set them: the shard groups are node-local (cross-memory attach), the replica groups are not.
    std::vector<RankRun> ranks(4);
    for (int r = 0; r < 4; ++r) {
      ranks[r].env = {
          {"LOCAL_WORLD_SIZE", "2"}, {"LOCAL_RANK", std::to_string(r % 2)}, {"GROUP_RANK", std::to_string(r / 2)}};
    }
    const auto run = run_workers(4, with(kParityRun, {"fsdp.strategy=" + strategy}), ranks);
    INFO(strategy << "\n" << run.describe());
    REQUIRE(run.ok());
    const double loss_diff = max_rel_loss_diff(read_losses(run.dir), ref.losses);
    const double param_diff = max_abs_param_diff(read_params(run.dir), ref.params);
    WARN(strategy << " 2x2 vs one process: max relative loss diff " << loss_diff << ", max |param diff| "
                  << param_diff);
    CHECK(read_losses(run.dir).size() == ref.losses.size());
    CHECK(loss_diff < 1e-5);
    CHECK(param_diff < 1e-5);
    for (int r = 0; r < 4; ++r) {
      const auto rep = rank_report(run, r);
      CHECK_THAT(rep["layout"].get<std::string>(), Catch::Contains("2 replicas x 2 shards"));
      CHECK(rep["intra_node_transport"] == "cross-memory attach");  // the shard group: one node
      // 1/2 of the parameters, gradients and AdamW state (plus at most one element of padding per unit).
      const int64_t params = rep["param_shard_bytes"].get<int64_t>();
      CHECK(params >= total / 2);
      CHECK(params <= total / 2 + 5 * 4);
      CHECK(rep["grad_shard_bytes"].get<int64_t>() == params);
      CHECK(rep["optimizer_bytes"].get<int64_t>() == 2 * params);
    }
  }
}

TEST_CASE("activation checkpointing: same losses and parameters, less activation memory", "[trainer][fsdp][ac]") {
  const std::vector<std::string> base = with(kParityRun, {"train.steps=6"});
  const auto plain = run_workers(2, base);
  REQUIRE(plain.ok());
  const int64_t plain_act = rank_report(plain, 0)["activation_peak_bytes"].get<int64_t>();
  for (const std::string every : {"1", "2"}) {
    // limit_all_gathers=2 rides along: deeper prefetch must not change the numbers either.
    const auto ac = run_workers(2, with(base, {"fsdp.activation_checkpointing=" + every, "fsdp.limit_all_gathers=2"}));
    INFO(ac.describe());
    REQUIRE(ac.ok());
    const double loss_diff = max_rel_loss_diff(read_losses(ac.dir), read_losses(plain.dir));
    const double param_diff = max_abs_param_diff(read_params(ac.dir), read_params(plain.dir));
    const int64_t ac_act = rank_report(ac, 0)["activation_peak_bytes"].get<int64_t>();
    WARN("activation checkpointing every " << every << " block(s): loss diff " << loss_diff << ", |param diff| "
                                           << param_diff << ", activations after forward " << ac_act << " vs "
                                           << plain_act << " bytes");
    // Recomputation runs the same kernels on the same inputs: the gradients are the same numbers.
    CHECK(loss_diff <= 1e-6);
    CHECK(param_diff <= 1e-6);
    CHECK(ac_act < plain_act);
  }
}

TEST_CASE("memory: FULL_SHARD's measured peak RSS per rank is below NO_SHARD's", "[trainer][fsdp][rss]") {
  // tiny widened to dim 768 (28.5M parameters, 114 MB in fp32), so that parameters, gradients and AdamW
  // state dominate the process: NO_SHARD holds 4 x 114 MB of them per rank, FULL_SHARD on 2 ranks half of
  // that plus the gathered units. What is compared is the process's own peak RSS (getrusage), not the
  // accounting: freed gathered buffers must really leave the process for FULL_SHARD to come out lower.
  const std::vector<std::string> base = {"train.steps=2",          "train.seq_len=32",      "train.global_batch_size=2",
                                         "train.log_interval=100", "train.sample_tokens=0", "model.dim=768",
                                         "model.n_heads=12"};
  const auto no_shard = run_workers(2, with(base, {"fsdp.strategy=NO_SHARD"}));
  const auto full = run_workers(2, with(base, {"fsdp.strategy=FULL_SHARD"}));
  REQUIRE(no_shard.ok());
  REQUIRE(full.ok());
  auto state = [](const nlohmann::json& r) {
    return r["param_shard_bytes"].get<int64_t>() + r["gathered_param_peak_bytes"].get<int64_t>() +
           r["grad_shard_bytes"].get<int64_t>() + r["optimizer_bytes"].get<int64_t>();
  };
  for (int r = 0; r < 2; ++r) {
    const auto a = rank_report(no_shard, r);
    const auto b = rank_report(full, r);
    const int64_t saved_state = state(a) - state(b);
    const int64_t rss_no_shard = a["peak_rss_bytes"].get<int64_t>();
    const int64_t rss_full = b["peak_rss_bytes"].get<int64_t>();
    WARN("rank " << r << ": peak RSS NO_SHARD " << rss_no_shard / (1 << 20) << " MiB, FULL_SHARD "
                 << rss_full / (1 << 20) << " MiB; accounted state saved " << saved_state / (1 << 20) << " MiB");
    REQUIRE(saved_state > 150 * (1 << 20));
    // At least half of the accounted saving shows in the process's peak (measured: about all of it).
    CHECK(rss_full < rss_no_shard - saved_state / 2);
  }
}

TEST_CASE("llm.c shards: two ranks train on a glob of shards and evaluate on a shard of its own",
          "[trainer][fsdp][llmc]") {
  // Three training shards and one validation shard in llm.c's format (256 x int32 header: magic 20240520,
  // version 1, token count; uint16 tokens), made here from the bundled corpus's bytes.
  const std::string dir = make_temp_dir();
  std::ifstream corpus("/usr/share/games/fortunes/fortunes", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(corpus)), std::istreambuf_iterator<char>());
  REQUIRE(text.size() > 20000);
  const auto shard = [&](const std::string& name, size_t from, size_t count) {
    std::vector<int32_t> header(256, 0);
    header[0] = 20240520;
    header[1] = 1;
    header[2] = static_cast<int32_t>(count);
    std::ofstream out(dir + "/" + name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    for (size_t i = from; i < from + count; ++i) {
      const auto token = static_cast<uint16_t>(static_cast<unsigned char>(text[i]));
      out.write(reinterpret_cast<const char*>(&token), 2);
    }
  };
  shard("corpus_train_000.bin", 0, 5000);
  shard("corpus_train_001.bin", 5000, 5000);
  shard("corpus_train_002.bin", 10000, 5000);
  shard("corpus_val_000.bin", 15000, 5000);
  const auto result = run_workers(2, {"data.format=\"llmc\"", "data.path=\"" + dir + "/corpus_train_*.bin\"",
                                      "data.val_path=\"" + dir + "/corpus_val_*.bin\"", "train.steps=6",
                                      "train.eval_interval=3", "train.eval_batches=1"});
  INFO(result.describe());
  REQUIRE(result.ok());
  CHECK_THAT(result.outputs[0], Catch::Contains("(15000 tokens, 3 file(s))"));
  CHECK_THAT(result.outputs[0], Catch::Contains("val loss"));
  const auto losses = read_losses(result.dir);
  REQUIRE(losses.size() >= 6);
  for (double l : losses) CHECK(std::isfinite(l));
}

TEST_CASE("intra-node: cross-memory attach and Gloo's sockets give the same bits", "[trainer][fsdp][cma]") {
  // Same-node ranks read each other's memory (system.intra_node=cma); the sum order of the reduce-scatter is
  // Gloo's point-to-point order, so losses and parameters must be identical, not merely close. World 3 takes
  // the path with more than one peer's chunk to add, and padded units.
  const std::vector<std::string> base = with(kParityRun, {"train.steps=6", "train.global_batch_size=6"});
  for (const int world : {2, 3}) {
    const auto cma = run_workers(world, with(base, {"system.intra_node=\"cma\""}));
    const auto gloo = run_workers(world, with(base, {"system.intra_node=\"gloo\""}));
    INFO("world " << world << "\n" << cma.describe() << "\n" << gloo.describe());
    REQUIRE(cma.ok());
    REQUIRE(gloo.ok());
    CHECK(rank_report(cma, 0)["intra_node_transport"] == "cross-memory attach");
    CHECK(rank_report(gloo, 0)["intra_node_transport"] == "sockets (system.intra_node=gloo)");
    CHECK_THAT(cma.outputs[0], Catch::Contains("intra-node all-gather/reduce-scatter: cross-memory attach"));
    CHECK(read_losses(cma.dir) == read_losses(gloo.dir));
    CHECK(read_params(cma.dir) == read_params(gloo.dir));
    CHECK(read_losses(cma.dir).size() == 6);
  }
}

TEST_CASE("intra-node: ranks of different launchers use sockets", "[trainer][fsdp][cma]") {
  // Two ranks that say they run under different launchers (GROUP_RANK 0 and 1), as two nodes would: even
  // system.intra_node=cma (which insists only where ranks share a node) leaves them on Gloo's sockets.
  std::vector<RankRun> ranks(2);
  ranks[1].env = {{"GROUP_RANK", "1"}};
  for (const std::string mode : {"auto", "cma"}) {
    const auto run = run_workers(2, {"train.steps=2", "system.intra_node=\"" + mode + "\""}, ranks);
    INFO(mode << "\n" << run.describe());
    REQUIRE(run.ok());
    CHECK(rank_report(run, 0)["intra_node_transport"] == "sockets (group ranks 0 and 1 run on different nodes)");
  }
  // A launcher that does not say which node it is (no GROUP_RANK): sockets, saying why.
  std::vector<RankRun> unknown(2);
  unknown[0].env = {{"GROUP_RANK", ""}};
  const auto run = run_workers(2, {"train.steps=2"}, unknown);
  INFO(run.describe());
  REQUIRE(run.ok());
  CHECK(rank_report(run, 0)["intra_node_transport"] == "sockets (rank 0's launcher did not set GROUP_RANK)");
}
