// Config: defaults, overrides, and errors that name the culprit.
#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "trainer/config/trainer_config.hpp"

using meshrun::UsageError;
using namespace meshrun::trainer;
using nlohmann::json;

namespace {
json minimal() { return {{"data", {{"path", "/tmp"}}}}; }
}  // namespace

TEST_CASE("config: defaults and file values and --set overrides with dotted keys", "[trainer][config]") {
  json user = minimal();
  user["train"] = {{"lr", 0.01}, {"steps", 7}};
  const auto c = make_config(
      user, {"train.steps=9", "fsdp.strategy=NO_SHARD", "fsdp.param_dtype=bf16", "data.exclude=[\"*.dat\"]"}, "test");
  CHECK(c.train.lr == Approx(0.01));
  CHECK(c.train.steps == 9);
  CHECK(c.fsdp.strategy == ShardingStrategy::kNoShard);
  CHECK(c.fsdp.param_dtype == DType::kBFloat16);
  CHECK(c.data.exclude == std::vector<std::string>{"*.dat"});
  CHECK(c.model.dim == 128);
}

TEST_CASE("config: every key has documentation", "[trainer][config]") {
  const auto docs = config_key_docs();
  CHECK(docs.size() == config_defaults().flatten().size());
  for (const auto& [key, doc] : docs) CHECK_FALSE(doc.empty());
}

TEST_CASE("config: the defaults are the structs' own, read back unchanged through the key table", "[trainer][config]") {
  const json defaults = config_defaults();
  CHECK(defaults.at("model").at("name") == "custom");  // the documented label
  CHECK(TrainerConfig{}.model.name == "custom");
  // Every key of a config made from nothing but the required data.path holds its default.
  const auto made = make_config(minimal(), {}, "test");
  const json flat = made.merged.flatten();
  const json flat_defaults = defaults.flatten();
  for (const auto& [key, value] : flat_defaults.items()) {
    if (key == "/data/path") continue;
    INFO(key);
    CHECK(flat.at(key) == value);
  }
}

TEST_CASE("config: unknown keys are rejected by name", "[trainer][config]") {
  json user = minimal();
  user["train"] = {{"learning_rate", 0.1}};
  CHECK_THROWS_WITH(make_config(user, {}, "f.json"), Catch::Contains("unknown config key 'train.learning_rate'"));
  CHECK_THROWS_WITH(make_config(minimal(), {"model.dimm=3"}, "f.json"), Catch::Contains("'model.dimm'"));
  json bogus_section = minimal();
  bogus_section["optim"] = json::object();
  CHECK_THROWS_WITH(make_config(bogus_section, {}, "f.json"), Catch::Contains("'optim'"));
}

TEST_CASE("config: bad values name the key", "[trainer][config]") {
  CHECK_THROWS_WITH(make_config(minimal(), {"train.steps=\"ten\""}, "t"), Catch::Contains("train.steps"));
  CHECK_THROWS_WITH(make_config(minimal(), {"fsdp.strategy=HYBRID"}, "t"), Catch::Contains("fsdp.strategy"));
  CHECK_THROWS_WITH(make_config(minimal(), {"fsdp.reduce_dtype=fp8"}, "t"), Catch::Contains("fsdp.reduce_dtype"));
  CHECK_THROWS_WITH(make_config(minimal(), {"model.n_heads=3"}, "t"), Catch::Contains("model.n_heads"));
  CHECK_THROWS_WITH(make_config(minimal(), {"train.seq_len=4096"}, "t"), Catch::Contains("train.seq_len"));
  CHECK_THROWS_WITH(make_config(minimal(), {"train.lr"}, "t"), Catch::Contains("KEY=VALUE"));
  CHECK_THROWS_AS(make_config(json::object(), {}, "t"), UsageError);  // data.path is required
  CHECK_THROWS_WITH(load_config("/nonexistent/x.json", {}), Catch::Contains("/nonexistent/x.json"));
  CHECK_THROWS_WITH(make_config(minimal(), {"checkpoint.format=zip"}, "t"), Catch::Contains("checkpoint.format"));
  CHECK_THROWS_WITH(make_config(minimal(), {"checkpoint.resume=auto"}, "t"), Catch::Contains("checkpoint.dir"));
  CHECK_THROWS_WITH(make_config(minimal(), {"checkpoint.async=true", "checkpoint.format=full"}, "t"),
                    Catch::Contains("checkpoint.async needs checkpoint.format=sharded"));
  CHECK_THROWS_WITH(make_config(minimal(), {"fsdp.limit_all_gathers=0"}, "t"),
                    Catch::Contains("fsdp.limit_all_gathers"));
  CHECK_THROWS_WITH(make_config(minimal(), {"fsdp.activation_checkpointing=-1"}, "t"),
                    Catch::Contains("fsdp.activation_checkpointing"));
}

TEST_CASE("config: hybrid strategies and checkpoint keys parse", "[trainer][config]") {
  const auto c = make_config(minimal(),
                             {"fsdp.strategy=HYBRID_SHARD_ZERO2", "fsdp.shard_group_size=2", "checkpoint.dir=/tmp/ck",
                              "checkpoint.resume=auto", "checkpoint.keep_last=3"},
                             "t");
  CHECK(c.fsdp.strategy == ShardingStrategy::kHybridShardZero2);
  CHECK(c.fsdp.hybrid());
  CHECK(!c.fsdp.reshard_after_forward());
  CHECK(c.fsdp.shard_group_size == 2);
  CHECK(c.checkpoint.keep_last == 3);
  CHECK(c.checkpoint.resume == "auto");
  CHECK(to_string(c.fsdp.strategy) == "HYBRID_SHARD_ZERO2");
}

TEST_CASE("config: hash and diff identify what differs between ranks", "[trainer][config]") {
  const auto a = make_config(minimal(), {}, "a");
  const auto b = make_config(minimal(), {"train.lr=0.5"}, "b");
  CHECK(config_hash(a) == config_hash(make_config(minimal(), {}, "a2")));
  CHECK(config_hash(a) != config_hash(b));
  CHECK_THAT(config_diff(a.merged, b.merged), Catch::Contains("train.lr"));
  CHECK(config_diff(a.merged, a.merged).empty());
}
