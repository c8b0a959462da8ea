// Data: byte-level text, memory-mapped token files, batches independent of the world size.
// LibTorch first: c10's logging header defines a glog-style CHECK that aborts instead of reporting, and
// would replace Catch's if it came second (the tests below would then count nothing). Drop it, then Catch.
#include "trainer/fsdp/adamw.hpp"
#include "trainer/model/model.hpp"
#undef CHECK

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/error.hpp"
#include "tests/support/subprocess.hpp"
#include "trainer/data/dataset.hpp"

using namespace meshrun::trainer;

namespace {

// One folder per test process, removed with its files at exit.
const meshrun::testing::TempDir& temp_folder() {
  static const meshrun::testing::TempDir dir;
  return dir;
}

std::string write_temp(const std::string& name, const std::string& bytes) {
  const std::string path = temp_folder().path() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

}  // namespace

TEST_CASE("data: text is read as bytes and the tail is held out", "[trainer][data]") {
  DataConfig c;
  c.path = write_temp("a.txt", "hello world. this is text");
  c.val_fraction = 0.2;
  TokenDataset d(c);
  CHECK(d.size() == 25);
  CHECK(d.split_size(Split::kVal) == 5);
  CHECK(d.token(Split::kTrain, 0) == 'h');
  CHECK(d.token(Split::kVal, 1) == 't');  // "text" starts at byte 21
  CHECK(decode_bytes(encode_bytes("héllo")) == "héllo");
}

TEST_CASE("data: uint16 and uint32 token files are memory-mapped", "[trainer][data]") {
  std::string bytes16;
  for (uint16_t v : {1, 2, 300, 65535}) bytes16.append(reinterpret_cast<const char*>(&v), 2);
  DataConfig c;
  c.format = "bin_u16";
  c.val_fraction = 0;
  c.path = write_temp("t16.bin", bytes16);
  TokenDataset d16(c);
  CHECK(d16.size() == 4);
  CHECK(d16.token(Split::kTrain, 2) == 300);
  CHECK(d16.token(Split::kTrain, 3) == 65535);
  c.format = "bin_u32";
  std::string bytes32;
  for (uint32_t v : {7u, 100000u}) bytes32.append(reinterpret_cast<const char*>(&v), 4);
  c.path = write_temp("t32.bin", bytes32);
  TokenDataset d32(c);
  CHECK(d32.token(Split::kTrain, 1) == 100000u);
  c.path = write_temp("odd.bin", "abc");
  CHECK_THROWS_WITH(TokenDataset(c), Catch::Contains("not a multiple of 4"));
}

namespace {

// An llm.c token shard (header of 256 int32: magic, version, token count; then the tokens), written
// here byte for byte as llm.c's dev/data/data_common.py writes it.
std::string llmc_shard(const std::vector<uint32_t>& tokens, int32_t version = 1, int64_t claimed = -1) {
  std::vector<int32_t> header(kLlmcHeaderInts, 0);
  header[0] = kLlmcMagic;
  header[1] = version;
  header[2] = static_cast<int32_t>(claimed < 0 ? static_cast<int64_t>(tokens.size()) : claimed);
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  for (uint32_t t : tokens) {
    if (version == 1) {
      const auto v = static_cast<uint16_t>(t);
      bytes.append(reinterpret_cast<const char*>(&v), 2);
    } else {
      bytes.append(reinterpret_cast<const char*>(&t), 4);
    }
  }
  return bytes;
}

std::vector<uint32_t> range_tokens(uint32_t from, uint32_t count) {
  std::vector<uint32_t> t(count);
  for (uint32_t i = 0; i < count; ++i) t[i] = from + i;
  return t;
}

std::vector<uint32_t> read_all(const TokenDataset& d, Split split) {
  std::vector<uint32_t> out;
  for (int64_t i = 0; i < d.split_size(split); ++i) out.push_back(d.token(split, i));
  return out;
}

}  // namespace

TEST_CASE("data: llm.c shards by glob in name order, a validation shard of their own", "[trainer][data][llmc]") {
  const std::string dir = temp_folder().path() + "/llmc";
  std::filesystem::create_directories(dir);
  // Written out of order: the name order (000, 001, 002) is the token order.
  write_temp("llmc/shard_train_001.bin", llmc_shard(range_tokens(100, 5)));
  write_temp("llmc/shard_train_000.bin", llmc_shard(range_tokens(50000, 3)));
  write_temp("llmc/shard_train_002.bin", llmc_shard(range_tokens(70000, 4), /*version=*/2));  // uint32 tokens
  write_temp("llmc/shard_val_000.bin", llmc_shard(range_tokens(7, 6)));
  DataConfig c;
  c.format = "llmc";
  c.path = dir + "/shard_train_*.bin";
  c.val_path = dir + "/shard_val_*.bin";
  const TokenDataset d(c);
  CHECK(d.files().size() == 3);
  std::vector<uint32_t> train = range_tokens(50000, 3);
  for (uint32_t t : range_tokens(100, 5)) train.push_back(t);
  for (uint32_t t : range_tokens(70000, 4)) train.push_back(t);
  CHECK(read_all(d, Split::kTrain) == train);             // every training token, the shard boundaries included
  CHECK(read_all(d, Split::kVal) == range_tokens(7, 6));  // and the validation shard alone
  // data.format=bin recognises the header by itself; a flat nanoGPT file next to it stays flat uint16.
  c.format = "bin";
  CHECK(read_all(TokenDataset(c), Split::kTrain) == train);
  std::string flat;
  for (uint16_t v : {11, 12, 13}) flat.append(reinterpret_cast<const char*>(&v), 2);
  c.path = write_temp("nanogpt_train.bin", flat);
  c.val_path.clear();
  c.val_fraction = 0;
  CHECK(read_all(TokenDataset(c), Split::kTrain) == (std::vector<uint32_t>{11, 12, 13}));
}

TEST_CASE("data: a wrong llm.c header or length is refused naming the file and the numbers", "[trainer][data][llmc]") {
  DataConfig c;
  c.format = "llmc";
  c.path = write_temp("short.bin", llmc_shard(range_tokens(1, 10), 1, /*claimed=*/12));
  CHECK_THROWS_WITH(TokenDataset(c), Catch::Contains("short.bin") && Catch::Contains("says 12 tokens of 2 bytes") &&
                                         Catch::Contains("the file has 1044 bytes"));
  c.path = write_temp("version.bin", llmc_shard(range_tokens(1, 4), /*version=*/7));
  CHECK_THROWS_WITH(TokenDataset(c), Catch::Contains("version.bin") && Catch::Contains("header version 7"));
  std::string flat;
  for (uint16_t v : {1, 2, 3, 4}) flat.append(reinterpret_cast<const char*>(&v), 2);
  c.path = write_temp("flat.bin", flat);
  CHECK_THROWS_WITH(TokenDataset(c), Catch::Contains("flat.bin") && Catch::Contains("less than the 1024-byte"));
  c.path = write_temp("flat_long.bin", std::string(2048, '\x01'));
  CHECK_THROWS_WITH(TokenDataset(c), Catch::Contains("is not an llm.c token shard: its magic is 16843009"));
}

TEST_CASE("data: the validation files never overlap the training files", "[trainer][data][llmc]") {
  const std::string dir = temp_folder().path() + "/overlap";
  std::filesystem::create_directories(dir);
  write_temp("overlap/a_000.bin", llmc_shard(range_tokens(1, 8)));
  write_temp("overlap/a_001.bin", llmc_shard(range_tokens(9, 8)));
  DataConfig c;
  c.format = "bin";
  c.path = dir;                     // both files
  c.val_path = dir + "/a_001.bin";  // one of them again
  CHECK_THROWS_WITH(TokenDataset(c), Catch::Contains("a_001.bin' is in both data.path and data.val_path"));
  c.path = dir + "/nothing_*.bin";
  CHECK_THROWS_WITH(TokenDataset(c), Catch::Contains("data.path '" + dir + "/nothing_*.bin' matches no file"));
  // The fraction split: the tail of the last shard is validation; training windows never reach it.
  c.path = dir;
  c.val_path.clear();
  c.val_fraction = 0.25;
  const TokenDataset d(c);
  CHECK(d.split_size(Split::kTrain) == 12);
  CHECK(read_all(d, Split::kVal) == range_tokens(13, 4));
  const auto mb = sample_micro_batch(d, Split::kTrain, 1, 0, 0, 64, 11, 0, 1);  // windows of 11 + 1 tokens
  CHECK(*std::max_element(mb.targets.begin(), mb.targets.end()) <= 12);         // token 12 is the last training one
}

TEST_CASE("data: a split of exactly seq_len+1 tokens has one window", "[trainer][data]") {
  DataConfig c;
  c.format = "bin_u16";
  c.val_fraction = 0;
  std::string five;
  for (uint16_t v : {1, 2, 3, 4, 5}) five.append(reinterpret_cast<const char*>(&v), 2);
  c.path = write_temp("five.bin", five);
  const TokenDataset d(c);
  const auto mb = sample_micro_batch(d, Split::kTrain, 1, 0, 0, 2, 4, 0, 1);
  CHECK(mb.inputs == (std::vector<int64_t>{1, 2, 3, 4, 1, 2, 3, 4}));
  CHECK(mb.targets == (std::vector<int64_t>{2, 3, 4, 5, 2, 3, 4, 5}));
  CHECK_THROWS_WITH(sample_micro_batch(d, Split::kTrain, 1, 0, 0, 2, 5, 0, 1),
                    Catch::Contains("has 5 tokens, fewer than train.seq_len+1 (6)"));
}

TEST_CASE("data: the global batch is the same for any world size and ranks get disjoint slices", "[trainer][data]") {
  std::string text;
  for (int i = 0; i < 5000; ++i) text.push_back(static_cast<char>('a' + (i * 7 + i / 13) % 26));
  DataConfig c;
  c.path = write_temp("b.txt", text);
  TokenDataset d(c);
  const auto whole = sample_micro_batch(d, Split::kTrain, 42, 3, 0, 8, 16, 0, 1);
  for (int world : {2, 4, 8}) {
    std::vector<int64_t> joined;
    for (int r = 0; r < world; ++r) {
      const auto part = sample_micro_batch(d, Split::kTrain, 42, 3, 0, 8, 16, r, world);
      CHECK(part.batch == 8 / world);
      joined.insert(joined.end(), part.inputs.begin(), part.inputs.end());
    }
    CHECK(joined == whole.inputs);
  }
  // Targets are inputs shifted by one; another step or seed gives another batch.
  CHECK(whole.targets[0] == whole.inputs[1]);
  CHECK(sample_micro_batch(d, Split::kTrain, 42, 4, 0, 8, 16, 0, 1).inputs != whole.inputs);
  CHECK(sample_micro_batch(d, Split::kTrain, 43, 3, 0, 8, 16, 0, 1).inputs != whole.inputs);
  // Micro-batch m of size B is sequences [m*B, (m+1)*B) of the step: accumulation sees the big batch.
  const auto big = sample_micro_batch(d, Split::kTrain, 42, 3, 0, 16, 16, 0, 1);
  const auto second = sample_micro_batch(d, Split::kTrain, 42, 3, 8, 8, 16, 0, 1);
  CHECK(std::vector<int64_t>(big.inputs.begin() + 8 * 16, big.inputs.end()) == second.inputs);
  CHECK_THROWS_WITH(sample_micro_batch(d, Split::kTrain, 42, 3, 0, 6, 16, 0, 4), Catch::Contains("divisible"));
}

TEST_CASE("model: configs have the advertised sizes", "[trainer][model]") {
  auto size_of = [](int64_t vocab, int64_t dim, int64_t layers, int64_t heads, int64_t kv, int64_t ffn, bool tied) {
    ModelConfig m;
    m.vocab_size = vocab;
    m.dim = dim;
    m.n_layers = layers;
    m.n_heads = heads;
    m.n_kv_heads = kv;
    m.ffn_hidden = ffn;
    m.tie_embeddings = tied;
    return static_cast<double>(count_params(m));
  };
  CHECK(size_of(256, 128, 4, 4, 0, 0, true) == Approx(0.84e6).epsilon(0.05));             // tiny
  CHECK(size_of(256, 512, 8, 8, 0, 0, true) == Approx(25.4e6).epsilon(0.05));             // small
  CHECK(size_of(50304, 768, 16, 12, 0, 0, true) == Approx(152e6).epsilon(0.05));          // 150m
  CHECK(size_of(128256, 2048, 16, 32, 8, 8192, true) == Approx(1.24e9).epsilon(0.05));    // 1b (Llama 3.2 1B)
  CHECK(size_of(128256, 4096, 32, 32, 8, 14336, false) == Approx(8.03e9).epsilon(0.05));  // 8b (Llama 3 8B)
}

TEST_CASE("schedule: linear warm-up then cosine to min_lr", "[trainer][schedule]") {
  TrainConfig t;
  t.lr = 1.0;
  t.min_lr = 0.1;
  t.warmup_steps = 10;
  t.steps = 110;
  CHECK(learning_rate(t, 5) == Approx(0.5));
  CHECK(learning_rate(t, 10) == Approx(1.0));
  CHECK(learning_rate(t, 60) == Approx(0.55));
  CHECK(learning_rate(t, 110) == Approx(0.1));
}
