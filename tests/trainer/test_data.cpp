// Data: byte-level text, memory-mapped token files, batches independent of the world size.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>

#include "common/error.hpp"
#include "tests/support/subprocess.hpp"
#include "trainer/data/dataset.hpp"
#include "trainer/fsdp/adamw.hpp"
#include "trainer/model/model.hpp"

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
  CHECK(d.split_size(Split::Val) == 5);
  CHECK(d.token(Split::Train, 0) == 'h');
  CHECK(d.token(Split::Val, 1) == 't');  // "text" starts at byte 21
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
  CHECK(d16.token(Split::Train, 2) == 300);
  CHECK(d16.token(Split::Train, 3) == 65535);
  c.format = "bin_u32";
  std::string bytes32;
  for (uint32_t v : {7u, 100000u}) bytes32.append(reinterpret_cast<const char*>(&v), 4);
  c.path = write_temp("t32.bin", bytes32);
  TokenDataset d32(c);
  CHECK(d32.token(Split::Train, 1) == 100000u);
  c.path = write_temp("odd.bin", "abc");
  CHECK_THROWS_WITH(TokenDataset(c), Catch::Contains("not a multiple of 4"));
}

TEST_CASE("data: the global batch is the same for any world size and ranks get disjoint slices", "[trainer][data]") {
  std::string text;
  for (int i = 0; i < 5000; ++i) text.push_back(static_cast<char>('a' + (i * 7 + i / 13) % 26));
  DataConfig c;
  c.path = write_temp("b.txt", text);
  TokenDataset d(c);
  const auto whole = sample_micro_batch(d, Split::Train, 42, 3, 0, 8, 16, 0, 1);
  for (int world : {2, 4, 8}) {
    std::vector<int64_t> joined;
    for (int r = 0; r < world; ++r) {
      const auto part = sample_micro_batch(d, Split::Train, 42, 3, 0, 8, 16, r, world);
      CHECK(part.batch == 8 / world);
      joined.insert(joined.end(), part.inputs.begin(), part.inputs.end());
    }
    CHECK(joined == whole.inputs);
  }
  // Targets are inputs shifted by one; another step or seed gives another batch.
  CHECK(whole.targets[0] == whole.inputs[1]);
  CHECK(sample_micro_batch(d, Split::Train, 42, 4, 0, 8, 16, 0, 1).inputs != whole.inputs);
  CHECK(sample_micro_batch(d, Split::Train, 43, 3, 0, 8, 16, 0, 1).inputs != whole.inputs);
  // Micro-batch m of size B is sequences [m*B, (m+1)*B) of the step: accumulation sees the big batch.
  const auto big = sample_micro_batch(d, Split::Train, 42, 3, 0, 16, 16, 0, 1);
  const auto second = sample_micro_batch(d, Split::Train, 42, 3, 8, 8, 16, 0, 1);
  CHECK(std::vector<int64_t>(big.inputs.begin() + 8 * 16, big.inputs.end()) == second.inputs);
  CHECK_THROWS_WITH(sample_micro_batch(d, Split::Train, 42, 3, 0, 6, 16, 0, 4), Catch::Contains("divisible"));
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
