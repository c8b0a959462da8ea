// Hugging Face interop without torch: config.json -> model keys (both transformers spellings), the config
// loader's model.init_from rules, and the safetensors reader on files written byte by byte here.
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "support/subprocess.hpp"
#include "trainer/checkpoint/hf_weights.hpp"
#include "trainer/checkpoint/safetensors_file.hpp"
#include "trainer/config/trainer_config.hpp"
#include "trainer/model/hf_llama.hpp"
#include "trainer/model/model.hpp"

using meshrun::Error;
using meshrun::UsageError;
using meshrun::testing::TempDir;
using namespace meshrun::trainer;
using nlohmann::json;

namespace {

// What transformers 5 writes for a small GQA model.
json hf5_config() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", 384},
          {"hidden_size", 64},
          {"intermediate_size", 176},
          {"num_hidden_layers", 3},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 16},
          {"max_position_embeddings", 128},
          {"rms_norm_eps", 1e-6},
          {"rope_parameters", {{"rope_theta", 50000.0}, {"rope_type", "default"}}},
          {"tie_word_embeddings", false},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false}};
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A safetensors file from a header and raw data, exactly as the format lays it out.
void write_safetensors(const std::filesystem::path& path, const nlohmann::ordered_json& header,
                       const std::string& data) {
  write_text(path, safetensors_preamble(header) + data);
}

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

json with_init_from(const std::string& folder) {
  return {{"data", {{"path", "/tmp"}}}, {"model", {{"init_from", folder}}}};
}

}  // namespace

TEST_CASE("hf config: transformers 5 rope_parameters and 4's rope_theta give the same model keys", "[trainer][hf]") {
  const json keys = model_keys_from_hf_config(hf5_config(), "c.json");
  CHECK(keys["vocab_size"] == 384);
  CHECK(keys["dim"] == 64);
  CHECK(keys["n_layers"] == 3);
  CHECK(keys["n_heads"] == 4);
  CHECK(keys["n_kv_heads"] == 2);
  CHECK(keys["ffn_hidden"] == 176);
  CHECK(keys["max_seq_len"] == 128);
  CHECK(keys["norm_eps"].get<double>() == 1e-6);
  CHECK(keys["rope_theta"].get<double>() == 50000.0);
  CHECK(keys["rope_scaling"] == "none");
  CHECK(keys["tie_embeddings"] == false);

  json v4 = hf5_config();
  v4.erase("rope_parameters");
  v4["rope_theta"] = 50000.0;
  v4["rope_scaling"] = nullptr;
  CHECK(model_keys_from_hf_config(v4, "c.json") == keys);

  // Absent optional keys take LlamaConfig's defaults: KV heads = heads, untied, theta 10000, eps 1e-6.
  json sparse = {{"vocab_size", 10},
                 {"hidden_size", 8},
                 {"intermediate_size", 16},
                 {"num_hidden_layers", 1},
                 {"num_attention_heads", 2}};
  const json defaults = model_keys_from_hf_config(sparse, "c.json");
  CHECK(defaults["n_kv_heads"] == 2);
  CHECK(defaults["tie_embeddings"] == false);
  CHECK(defaults["rope_theta"].get<double>() == 10000.0);
  CHECK(defaults["norm_eps"].get<double>() == 1e-6);
  CHECK(defaults["max_seq_len"] == 2048);
}

TEST_CASE("hf config: llama3 rope scaling is read from either spelling", "[trainer][hf]") {
  const json scaling = {{"rope_type", "llama3"},
                        {"factor", 32.0},
                        {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 8192}};
  json v5 = hf5_config();
  v5["rope_parameters"] = scaling;
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  const json keys = model_keys_from_hf_config(v5, "c.json");
  CHECK(keys["rope_scaling"] == "llama3");
  CHECK(keys["rope_scaling_factor"].get<double>() == 32.0);
  CHECK(keys["rope_original_max_seq_len"] == 8192);
  CHECK(keys["rope_theta"].get<double>() == 500000.0);

  json v4 = hf5_config();  // transformers 4.4x: "type" rather than "rope_type", theta at the top
  v4.erase("rope_parameters");
  v4["rope_theta"] = 500000.0;
  v4["rope_scaling"] = scaling;
  v4["rope_scaling"].erase("rope_type");
  v4["rope_scaling"]["type"] = "llama3";
  CHECK(model_keys_from_hf_config(v4, "c.json") == keys);

  // Our own export writes what we read.
  ModelConfig m;
  m.vocab_size = 384;
  m.dim = 64;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.ffn_hidden = 176;
  m.rope_theta = 500000.0;
  m.rope_scaling = RopeScaling::kLlama3;
  m.rope_scaling_factor = 32.0;
  m.rope_original_max_seq_len = 8192;
  const json again = model_keys_from_hf_config(hf_llama_config(m, "bfloat16"), "c.json");
  CHECK(again["rope_scaling"] == "llama3");
  CHECK(again["rope_scaling_factor"].get<double>() == 32.0);
  CHECK(again["n_kv_heads"] == 2);
  CHECK(again["ffn_hidden"] == 176);
}

TEST_CASE("hf config: what this model cannot represent is refused by name", "[trainer][hf]") {
  const auto refused = [](const std::function<void(json&)>& edit, const std::string& needle) {
    json c = hf5_config();
    edit(c);
    CHECK_THROWS_WITH(model_keys_from_hf_config(c, "x/config.json"),
                      Catch::Contains("x/config.json") && Catch::Contains(needle));
  };
  refused([](json& c) { c["model_type"] = "qwen2"; }, "model_type is 'qwen2'");
  refused([](json& c) { c["attention_bias"] = true; }, "attention_bias");
  refused([](json& c) { c["mlp_bias"] = true; }, "mlp_bias");
  refused([](json& c) { c["hidden_act"] = "gelu"; }, "hidden_act");
  refused([](json& c) { c["head_dim"] = 32; }, "head_dim 32");
  refused([](json& c) { c["rope_parameters"]["rope_type"] = "yarn"; }, "rope type 'yarn'");
  refused([](json& c) { c.erase("hidden_size"); }, "no 'hidden_size'");
  refused([](json& c) { c["num_hidden_layers"] = "3"; }, "'num_hidden_layers' has the wrong type");
  refused([](json& c) { c["rope_parameters"] = {{"rope_type", "llama3"}, {"factor", 8.0}}; }, "low_freq_factor");
}

TEST_CASE("config: model.init_from takes the model's shape from config.json", "[trainer][hf][config]") {
  TempDir dir;
  write_text(std::filesystem::path(dir.path()) / "config.json", hf5_config().dump());
  const TrainerConfig c = make_config(with_init_from(dir.path() + "/"), {"train.seq_len=64"}, "t.json");
  CHECK(c.model.dim == 64);
  CHECK(c.model.n_kv_heads == 2);
  CHECK(c.model.ffn_dim() == 176);
  CHECK(c.model.rope_theta == 50000.0);
  CHECK(c.model.norm_eps == 1e-6);
  CHECK_FALSE(c.model.tie_embeddings);
  CHECK(c.model.max_seq_len == 128);
  CHECK(c.model.name == std::filesystem::path(dir.path()).filename().string());
  CHECK(c.merged["model"]["dim"] == 64);  // what ranks compare and checkpoints record

  // Keys the user set must agree, all named at once with where they were set and the fix; max_seq_len,
  // init_std and name are the user's.
  json conflicting = with_init_from(dir.path());
  conflicting["model"]["n_layers"] = 8;
  conflicting["model"]["ffn_hidden"] = 0;  // the 8/3 rule gives 192, not 176
  CHECK_THROWS_WITH(
      make_config(conflicting, {"model.rope_theta=10000"}, "t.json"),
      Catch::Contains("model.n_layers=8 (t.json; config.json: 3)") &&
          Catch::Contains("model.ffn_hidden=0 (t.json; config.json: 176)") &&
          Catch::Contains("model.rope_theta=10000 (--set; config.json: 50000.0)") &&
          Catch::Contains("--set model.ffn_hidden=176 --set model.n_layers=3 --set model.rope_theta=50000.0"));
  json agreeing = with_init_from(dir.path());
  agreeing["model"]["n_heads"] = 4;
  agreeing["model"]["init_std"] = 0.5;
  CHECK_NOTHROW(make_config(agreeing, {}, "t.json"));
  json automatic = with_init_from(dir.path());  // 0 = n_heads, which config.json's kv heads equal here
  automatic["model"]["n_kv_heads"] = 0;
  json mha = hf5_config();
  mha["num_key_value_heads"] = 4;
  write_text(std::filesystem::path(dir.path()) / "config.json", mha.dump());
  CHECK(make_config(automatic, {}, "t.json").model.kv_heads() == 4);
  write_text(std::filesystem::path(dir.path()) / "config.json", hf5_config().dump());
  // A file that disagrees can be brought in line from the command line (--set wins over the file).
  CHECK(make_config(conflicting, {"model.n_layers=3", "model.ffn_hidden=176"}, "t.json").model.n_layers == 3);
  const TrainerConfig shorter =
      make_config(with_init_from(dir.path()), {"model.max_seq_len=64", "model.name=ft", "train.seq_len=32"}, "t");
  CHECK(shorter.model.max_seq_len == 64);
  CHECK(shorter.model.name == "ft");

  CHECK_THROWS_AS(make_config(with_init_from(dir.path() + "/nowhere"), {}, "t.json"), UsageError);
  CHECK_THROWS_WITH(make_config(with_init_from(dir.path() + "/nowhere"), {}, "t.json"),
                    Catch::Contains("nowhere/config.json") && Catch::Contains("Hugging Face model folder"));
}

TEST_CASE("config: a Hugging Face cache snapshot is named after its repository", "[trainer][hf][config]") {
  TempDir dir;
  const auto snapshot =
      std::filesystem::path(dir.path()) / "models--meta-llama--Llama-3.2-1B" / "snapshots" / "4e20de3";
  std::filesystem::create_directories(snapshot);
  write_text(snapshot / "config.json", hf5_config().dump());
  CHECK(make_config(with_init_from(snapshot.string()), {"train.seq_len=64"}, "t").model.name ==
        "meta-llama/Llama-3.2-1B");
}

TEST_CASE("config: train.steps=0 is accepted, a negative count is not", "[trainer][config]") {
  const json user = {{"data", {{"path", "/tmp"}}}};
  CHECK(make_config(user, {"train.steps=0"}, "t").train.steps == 0);
  CHECK_THROWS_WITH(make_config(user, {"train.steps=-1"}, "t"), Catch::Contains("train.steps must be >= 0"));
}

TEST_CASE("config: a min_lr above lr is refused (the decay would raise the rate)", "[trainer][config]") {
  const json user = {{"data", {{"path", "/tmp"}}}};
  CHECK_THROWS_WITH(make_config(user, {"train.lr=2e-5", "train.min_lr=3e-5"}, "t"),
                    Catch::Contains("train.min_lr (3e-05) must not exceed train.lr (2e-05)"));
  CHECK(make_config(user, {"train.lr=2e-5", "train.min_lr=2e-5"}, "t").train.min_lr == 2e-5);
}

TEST_CASE("rope: llama3 scaling gives transformers' frequencies in all three bands", "[trainer][hf]") {
  ModelConfig m;
  m.dim = 64;
  m.n_heads = 4;  // head_dim 16: 8 frequencies
  m.rope_theta = 50000.0;
  m.rope_scaling = RopeScaling::kLlama3;
  m.rope_scaling_factor = 8.0;
  m.rope_original_max_seq_len = 64;  // wavelengths: 6.3 (kept), 24.3 (blended), >= 94 (stretched)
  // transformers 5.23, ROPE_INIT_FUNCTIONS["llama3"] for this config (it computes in fp32).
  const double expected[] = {1.000000000e+00, 1.555754989e-01, 8.359254338e-03, 2.161704237e-03,
                             5.590170040e-04, 1.445618691e-04, 3.738372106e-05, 9.667434824e-06};
  const Rope rope = make_rope(m, 2, at::kDouble, at::Device(at::kCPU));
  for (int i = 0; i < 8; ++i) {
    // Position 1's angle is the frequency itself; the sin table's second half carries +sin.
    const double angle = std::atan2(rope.sin[1][8 + i].item<double>(), rope.cos[1][i].item<double>());
    CHECK(angle == Approx(expected[i]).epsilon(1e-6));
  }
}

TEST_CASE("safetensors: element ranges of F32, BF16 and F16 tensors read as fp32", "[trainer][hf]") {
  TempDir dir;
  const auto path = std::filesystem::path(dir.path()) / "m.safetensors";
  const std::vector<float> f32 = {1.5f, -2.25f, 3.0f, 1e-3f, 7.0f, -0.0f};
  std::vector<uint16_t> bf16;
  for (float v : f32) bf16.push_back(bf16_from_f32(v));
  // fp16 bit patterns: 1.0, -2.0, 65504 (max), 2^-24 (smallest subnormal), +inf, 0.5
  const std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00, 0x3800};
  nlohmann::ordered_json header = {{"__metadata__", {{"format", "pt"}}}};
  header["a"] = {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}};
  header["b"] = {{"dtype", "BF16"}, {"shape", {6}}, {"data_offsets", {24, 36}}};
  header["c"] = {{"dtype", "F16"}, {"shape", {3, 2}}, {"data_offsets", {36, 48}}};
  header["i"] = {{"dtype", "I64"}, {"shape", {1}}, {"data_offsets", {48, 56}}};
  write_safetensors(path, header, bytes_of(f32) + bytes_of(bf16) + bytes_of(f16) + std::string(8, '\0'));

  SafetensorsFile file(path.string());
  REQUIRE(file.tensors().size() == 4);
  CHECK(file.find("a")->shape == std::vector<int64_t>{2, 3});
  CHECK(file.find("b")->dtype == TensorDType::kBF16);
  CHECK(file.find("zzz") == nullptr);
  std::vector<float> out(4);
  file.read_f32("a", 2, 3, out.data());
  CHECK(out[0] == 3.0f);
  CHECK(out[1] == 1e-3f);
  CHECK(out[2] == 7.0f);
  file.read_f32("b", 0, 2, out.data());
  CHECK(out[0] == 1.5f);  // exactly representable in bf16
  CHECK(out[1] == -2.25f);
  file.read_f32("c", 0, 4, out.data());
  CHECK(out[0] == 1.0f);
  CHECK(out[1] == -2.0f);
  CHECK(out[2] == 65504.0f);
  CHECK(out[3] == std::ldexp(1.0f, -24));
  file.read_f32("c", 4, 2, out.data());
  CHECK(std::isinf(out[0]));
  CHECK(out[1] == 0.5f);
  CHECK(file.bytes_read() == 3 * 4 + 2 * 2 + 4 * 2 + 2 * 2);  // only the requested ranges
  CHECK_THROWS_WITH(file.read_f32("i", 0, 1, out.data()), Catch::Contains("'i' is I64"));
  CHECK_THROWS_WITH(file.read_f32("a", 5, 2, out.data()), Catch::Contains("elements [5, 7)"));
}

TEST_CASE("safetensors: bf16 rounding is to nearest even, as torch rounds", "[trainer][hf]") {
  CHECK(bf16_from_f32(1.0f) == 0x3F80);
  // 1 + 2^-8 lies halfway between bf16 1.0 and 1.0078125: ties go to the even mantissa (1.0).
  CHECK(bf16_from_f32(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);
  // 1 + 3 * 2^-8 lies halfway between 1.0078125 (odd) and 1.015625 (even): up.
  CHECK(bf16_from_f32(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);
  CHECK(bf16_from_f32(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3F81);  // above half: up
  CHECK(std::isnan(f32_from_bf16(bf16_from_f32(std::nanf("")))));
  CHECK(f32_from_bf16(bf16_from_f32(-3.5f)) == -3.5f);
}

TEST_CASE("safetensors: damaged files are refused naming the file and the problem", "[trainer][hf]") {
  TempDir dir;
  const auto path = std::filesystem::path(dir.path()) / "bad.safetensors";
  const auto refused = [&](const std::string& contents, const std::string& needle) {
    write_text(path, contents);
    CHECK_THROWS_WITH(SafetensorsFile(path.string()), Catch::Contains(path.string()) && Catch::Contains(needle));
  };
  refused("abc", "3 bytes");
  refused(std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) + "{}", "header length field");
  nlohmann::ordered_json header;
  header["w"] = {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}};
  refused(safetensors_preamble(header) + std::string(8, '\0'),
          "points at data bytes 0..16, but the file has 8");  // data cut short
  header["w"]["shape"] = {5};
  refused(safetensors_preamble(header) + std::string(16, '\0'), "needs 20");
  header["w"] = {{"dtype", "F32"}, {"shape", {4}}};
  refused(safetensors_preamble(header) + std::string(16, '\0'), "lacks dtype, shape or data_offsets");
  // Offsets that wrap around 2^64 when added to the data start, and shapes whose product does.
  header["w"] = {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {UINT64_MAX - 3, 12}}};
  refused(safetensors_preamble(header) + std::string(16, '\0'), "points at data bytes");
  header["w"] = {{"dtype", "F32"}, {"shape", {1ULL << 32, 1ULL << 32}}, {"data_offsets", {0, 0}}};
  refused(safetensors_preamble(header) + std::string(16, '\0'), "representable size");
  // The tensors must tile the data: no overlap, no gap, nothing after the last.
  nlohmann::ordered_json two;
  two["a"] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}};
  two["b"] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {4, 12}}};
  refused(safetensors_preamble(two) + std::string(12, '\0'), "'b' starts at data byte 4, but 'a' ends at 8");
  two["b"]["data_offsets"] = {12, 20};
  refused(safetensors_preamble(two) + std::string(20, '\0'), "'b' starts at data byte 12, but 'a' ends at 8");
  two["b"]["data_offsets"] = {8, 16};
  refused(safetensors_preamble(two) + std::string(24, '\0'), "8 bytes follow the last tensor");
  write_text(path, safetensors_preamble(two) + std::string(16, '\0'));
  CHECK(SafetensorsFile(path.string()).tensors().size() == 2);
  refused(std::string("\x04\0\0\0\0\0\0\0", 8) + "[1] ", "not a JSON object");
}

TEST_CASE("hf weights: a sharded folder resolves every tensor to its file, a bad index is named", "[trainer][hf]") {
  TempDir dir;
  const std::filesystem::path root(dir.path());
  const std::vector<float> a = {1, 2}, b = {3, 4, 5};
  nlohmann::ordered_json h1, h2;
  h1["a"] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}};
  h2["b"] = {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 12}}};
  write_safetensors(root / "model-1.safetensors", h1, bytes_of(a));
  write_safetensors(root / "model-2.safetensors", h2, bytes_of(b));
  write_text(root / "model.safetensors.index.json",
             json{{"weight_map", {{"a", "model-1.safetensors"}, {"b", "model-2.safetensors"}}}}.dump());
  HfWeights weights(root.string());
  CHECK(weights.names() == std::vector<std::string>{"a", "b"});
  std::vector<float> out(2);
  weights.read_f32("b", 1, 2, out.data());
  CHECK(out == std::vector<float>{4, 5});
  CHECK(weights.bytes_read() == 8);
  CHECK(weights.file_of("a") == (root / "model-1.safetensors").string());

  write_text(root / "model.safetensors.index.json", json{{"weight_map", {{"a", "../elsewhere.safetensors"}}}}.dump());
  CHECK_THROWS_WITH(HfWeights(root.string()), Catch::Contains("expected a file name in the same folder"));
  write_text(root / "model.safetensors.index.json", json{{"weight_map", {{"a", "model-2.safetensors"}}}}.dump());
  HfWeights misplaced(root.string());
  CHECK_THROWS_WITH(misplaced.find("a"), Catch::Contains("places a in model-2.safetensors"));

  TempDir empty;
  CHECK_THROWS_AS(HfWeights(empty.path()), UsageError);
}
