// The Hugging Face directory of TinyStories-656K against its GGUF conversion (made by an
// independent converter, ../shared/testdata/tinystories-656k/README.md), and hostile files.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/hf_dir.h"
#include "format/safetensors.h"
#include "test_util.h"

namespace pagellm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string hf_dir() { return test::testdata("tinystories-656k/hf"); }

// Expects `fn` to throw a pagellm::Error whose message holds every one of `parts`.
template <typename Fn>
void expect_error(Fn fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(HfDir, TensorsEqualTheGgufConversionBitForBit) {
  auto hf = open_model_file(hf_dir());
  auto gguf = GgufFile::open(test::testdata("tinystories-656k/TinyStories-656K-f32.gguf"));
  ASSERT_EQ(hf->tensors().size(), gguf->tensors().size());
  for (const GgufTensorInfo& g : gguf->tensors()) {
    const GgufTensorInfo* h = hf->find_tensor(g.name);
    ASSERT_NE(h, nullptr) << g.name;
    EXPECT_EQ(h->ne, g.ne) << g.name;
    ASSERT_EQ(h->type, g.type) << g.name;
    ASSERT_EQ(h->size_bytes, g.size_bytes) << g.name;
    // attn_q / attn_k: the rotate-half -> interleaved permutation must reproduce the converter's.
    EXPECT_EQ(std::memcmp(h->data, g.data, g.size_bytes), 0) << g.name;
  }
}

TEST(HfDir, MetadataMatchesTheGgufConversion) {
  auto hf = open_model_file(hf_dir());
  auto gguf = GgufFile::open(test::testdata("tinystories-656k/TinyStories-656K-f32.gguf"));
  for (const char* k :
       {"llama.context_length", "llama.embedding_length", "llama.feed_forward_length", "llama.block_count",
        "llama.attention.head_count", "llama.attention.head_count_kv", "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id"}) {
    EXPECT_EQ(hf->get_u64(k), gguf->get_u64(k)) << k;
  }
  for (const char* k : {"llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base"}) {
    EXPECT_EQ(hf->get_f32(k), gguf->get_f32(k)) << k;
  }
  EXPECT_EQ(hf->get_string_array("tokenizer.ggml.tokens"), gguf->get_string_array("tokenizer.ggml.tokens"));
  EXPECT_EQ(hf->get_int_array("tokenizer.ggml.token_type"), gguf->get_int_array("tokenizer.ggml.token_type"));
  EXPECT_EQ(hf->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(hf->get_string_array("tokenizer.ggml.merges").size(), 1967u);
  EXPECT_TRUE(hf->get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_FALSE(hf->get_bool("tokenizer.ggml.add_eos_token"));
}

// ---- hostile safetensors headers --------------------------------------------------------

std::vector<uint8_t> st_bytes(const std::string& header, size_t data_bytes, uint64_t claimed_len = 0) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  const uint64_t n = claimed_len ? claimed_len : header.size();
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

void expect_bad(const std::string& header, size_t data, std::initializer_list<std::string> parts,
                uint64_t claimed_len = 0) {
  const auto b = st_bytes(header, data, claimed_len);
  expect_error([&] { SafetensorsFile::parse(b, "x.safetensors"); }, parts);
}

TEST(Safetensors, ParsesAWellFormedHeader) {
  const auto b = st_bytes(
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},"e":{"dtype":"F16","shape":[0],"data_offsets":[32,32]}})",
      32);
  auto f = SafetensorsFile::parse(b, "x.safetensors");
  ASSERT_EQ(f->tensors().size(), 3u);
  const SafetensorsTensor* a = f->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f->find("b")->data, a->data + 24);
  EXPECT_EQ(f->metadata().at("format"), "pt");
}

TEST(Safetensors, EveryLieIsNamed) {
  expect_bad(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4,
             {"x.safetensors", "'a'", "data_offsets", "outside the data section"});
  expect_bad(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, {"'a'", "needs 12"});
  expect_bad(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      12, {"overlap"});
  expect_bad(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8, {"'a'", "dtype", "F33"});
  expect_bad(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, {"'a'", "shape"});
  expect_bad(R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}})", 8, {"'a'", "2^50"});
  expect_bad(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8, {"'a'", "data_offsets"});
  expect_bad(R"({"a":{"dtype":"F32","shape":[2]}})", 8, {"'a'", "data_offsets"});
  expect_bad(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 8, {"not valid JSON"});
  expect_bad(R"([1,2])", 0, {"not a JSON object"});
  // A header length reaching into zero bytes of data, and NUL padding (the format pads with spaces).
  const std::string one = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  expect_bad(one, 16, {"x.safetensors", "NUL byte at header offset " + std::to_string(one.size()), "length"},
             one.size() + 8);
  expect_bad(one + std::string(8, '\0'), 8, {"NUL byte at header offset " + std::to_string(one.size())});
  EXPECT_NO_THROW(SafetensorsFile::parse(st_bytes(one + std::string(8, ' '), 8), "x.safetensors"));
  expect_bad(R"({})", 0, {"runs past the end"}, 1000);
  expect_bad(R"({})", 0, {"100 MiB"}, uint64_t{1} << 40);
  expect_error([] { SafetensorsFile::parse(std::vector<uint8_t>(5), "x.safetensors"); }, {"too small"});
}

// The model's errors about a directory's GGUF view, in Hugging Face terms: whole keys only
// (head_count is a prefix of head_count_kv), layer tensors by their layer, nothing for names the
// conversion does not make.
TEST(HfDir, ModelErrorsAreTranslatedToConfigFieldsAndTensorNames) {
  EXPECT_EQ(hf_names_in("model 'd': tensor 'blk.1.attn_norm.weight' is of layer 1, but llama.block_count = 1"),
            " (in Hugging Face terms: llama.block_count is config.json's \"num_hidden_layers\"; "
            "'blk.1.attn_norm.weight' is the safetensors tensor 'model.layers.1.input_layernorm.weight')");
  EXPECT_EQ(hf_names_in("qwen3.attention.head_count_kv = 3"),
            " (in Hugging Face terms: qwen3.attention.head_count_kv is config.json's \"num_key_value_heads\")");
  EXPECT_EQ(hf_names_in("tensor 'token_embd.weight' must be [256, vocab]"),
            " (in Hugging Face terms: 'token_embd.weight' is the safetensors tensor 'model.embed_tokens.weight')");
  EXPECT_EQ(hf_names_in("required tensor 'blk.12.ffn_up.weight' is missing"),
            " (in Hugging Face terms: 'blk.12.ffn_up.weight' is the safetensors tensor "
            "'model.layers.12.mlp.up_proj.weight')");
  EXPECT_EQ(hf_names_in("tensor 'blk.0.ffn_up_exps.weight' and 'rope_freqs.weight', gemma3.block_count"), "");
  EXPECT_EQ(hf_names_in("unterminated 'blk.0.attn_q.weight"), "");
}

// ---- hostile directories ----------------------------------------------------------------

class HfDirEdit : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pagellm-hf-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const auto& e : fs::directory_iterator(hf_dir())) fs::copy_file(e.path(), dir_ / e.path().filename());
    for (const auto& e : fs::directory_iterator(dir_))
      fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  }
  void TearDown() override { fs::remove_all(dir_); }

  json read(const std::string& name) {
    std::ifstream in(dir_ / name);
    return json::parse(in);
  }
  void write(const std::string& name, const json& j) { std::ofstream(dir_ / name) << j.dump(); }
  std::string dir() const { return dir_.string(); }

  fs::path dir_;
};

TEST_F(HfDirEdit, MissingConfigFieldIsNamed) {
  json c = read("config.json");
  c.erase("hidden_size");
  write("config.json", c);
  expect_error([&] { open_model_file(dir()); }, {"config.json", "hidden_size", "missing"});
}

TEST_F(HfDirEdit, WrongConfigTypesAndValuesAreNamed) {
  json c = read("config.json");
  c["num_attention_heads"] = "eight";
  write("config.json", c);
  expect_error([&] { open_model_file(dir()); }, {"config.json", "num_attention_heads", "integer"});
  c = read("config.json");
  c["num_attention_heads"] = 8;
  c["architectures"] = {"GPT2LMHeadModel"};
  write("config.json", c);
  expect_error([&] { open_model_file(dir()); }, {"config.json", "architectures", "GPT2LMHeadModel"});
  c["architectures"] = {"LlamaForCausalLM"};
  c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}};
  write("config.json", c);
  expect_error([&] { open_model_file(dir()); }, {"config.json", "rope_scaling.rope_type", "yarn"});
  c["rope_scaling"] = nullptr;
  c["vocab_size"] = 100;  // fewer than the embedding's rows
  write("config.json", c);
  expect_error([&] { open_model_file(dir()); }, {"config.json", "vocab_size", "'token_embd.weight' has 2048 rows"});
  c["vocab_size"] = 1 << 24;  // the largest accepted: refused before a token table is built
  write("config.json", c);
  expect_error([&] { open_model_file(dir()); }, {"config.json", "vocab_size' = 16777216", "2048 rows"});
  c["vocab_size"] = 2048;
  write("config.json", c);
  json t = read("tokenizer.json");
  t["added_tokens"].push_back({{"id", 5000}, {"content", "<extra>"}, {"special", true}});
  write("tokenizer.json", t);  // an id past vocab_size
  expect_error([&] { open_model_file(dir()); }, {"tokenizer.json", "5000", "vocab_size 2048"});
  std::ofstream(dir_ / "config.json") << "{\"architectures\": [";
  expect_error([&] { open_model_file(dir()); }, {"config.json", "not valid JSON"});
  fs::remove(dir_ / "config.json");
  expect_error([&] { open_model_file(dir()); }, {"has no config.json"});
}

// Nesting: nlohmann's copy constructor and dump() recurse once per level, so a file nested a
// million levels deep is refused at parse time, naming the file; a value nested 20 deep is named
// in the error without being printed.
TEST_F(HfDirEdit, DeeplyNestedJsonIsRefusedNamingTheFile) {
  json c = read("config.json");
  c.erase("hidden_size");
  const std::string base = c.dump();
  auto with_hidden_size = [&](size_t depth) {
    std::string text = base;
    text.insert(1, "\"hidden_size\": " + std::string(depth, '[') + std::string(depth, ']') + ", ");
    std::ofstream(dir_ / "config.json") << text;
  };
  with_hidden_size(1000000);
  expect_error([&] { open_model_file(dir()); }, {"config.json", "nests deeper than 64 levels"});
  with_hidden_size(20);
  expect_error([&] { open_model_file(dir()); }, {"config.json", "hidden_size", "an array nested more than 8 deep"});
  c["hidden_size"] = 128;  // valid again
  write("config.json", c);
  // A million-deep value inside tokenizer.json's normalizer (copied by the loader).
  json t = read("tokenizer.json");
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  std::string text = t.dump();
  text.insert(1, "\"extra\": " + deep + ", ");
  std::ofstream(dir_ / "tokenizer.json") << text;
  expect_error([&] { open_model_file(dir()); }, {"tokenizer.json", "nests deeper than 64 levels"});
}

// A tokenizer.json that the tokenizers library refuses to load is refused too, naming the field:
// a merge whose parts or result are not tokens of model.vocab (in either form of a merge), and
// two texts with one id. (They used to load, and tokenize every word to <unk>.)
TEST_F(HfDirEdit, TokenizerMergesAndIdsMustMatchTheVocab) {
  const json original = read("tokenizer.json");
  json t = original;
  json& merges = t["model"]["merges"];
  ASSERT_TRUE(merges.size() > 10 && merges[0].is_string());
  merges[3] = "qqq zzz";  // neither part is a token
  write("tokenizer.json", t);
  expect_error([&] { open_model_file(dir()); }, {"tokenizer.json", "model.merges", "entry 3", "qqq zzz"});
  // The parts are tokens but their join is not.
  t = original;
  const std::string first = t["model"]["merges"][0];
  const std::string a = first.substr(0, first.find(' ')), b = first.substr(first.find(' ') + 1);
  t["model"]["vocab"].erase(a + b);
  write("tokenizer.json", t);
  expect_error([&] { open_model_file(dir()); }, {"tokenizer.json", "model.merges", "entry 0"});
  // The list form, tokenizers >= 0.20: the same merges load; an unknown part is named.
  t = original;
  for (json& m : t["model"]["merges"]) {
    const std::string s = m;
    m = json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  write("tokenizer.json", t);
  EXPECT_NO_THROW(open_model_file(dir()));
  t["model"]["merges"][5][1] = "not-a-token";
  write("tokenizer.json", t);
  expect_error([&] { open_model_file(dir()); }, {"tokenizer.json", "model.merges", "entry 5", "not-a-token"});
  // A vocab cut to its first 10 ids: the merges name tokens it no longer has.
  t = original;
  json small = json::object();
  for (const auto& [text, id] : original["model"]["vocab"].items()) {
    if (id.get<int64_t>() < 10) small[text] = id;
  }
  t["model"]["vocab"] = small;
  write("tokenizer.json", t);
  expect_error([&] { open_model_file(dir()); }, {"tokenizer.json", "model.merges", "entry 0"});
  // Two texts with id 5.
  t = original;
  t["model"]["vocab"]["<a-second-5>"] = 5;
  write("tokenizer.json", t);
  expect_error([&] { open_model_file(dir()); }, {"tokenizer.json", "model.vocab", "id 5", "<a-second-5>"});
}

// Values of the wrong type read with a default, and numbers too big for an integer, are errors
// naming the directory or file, never another exception or undefined behaviour.
TEST_F(HfDirEdit, MistypedTokenizerFieldsAndHugeNumbersAreErrors) {
  json c = read("config.json");
  c["hidden_size"] = 1e300;
  write("config.json", c);
  expect_error([&] { open_model_file(dir()); }, {"config.json", "hidden_size", "out of range"});
  c["hidden_size"] = 128.0;  // an integral float is the integer
  write("config.json", c);
  EXPECT_NO_THROW(open_model_file(dir()));
  json t = read("tokenizer.json");
  ASSERT_FALSE(t["added_tokens"].empty());
  t["added_tokens"][0]["special"] = "yes";
  write("tokenizer.json", t);
  expect_error([&] { open_model_file(dir()); }, {"Hugging Face directory", "wrong type"});
}

TEST_F(HfDirEdit, SafetensorsHeaderThatLiesAboutOffsetsIsNamed) {
  std::fstream f(dir_ / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  // The last tensor's end offset 2624000 -> 9624000 (same length: the header stays in place).
  const size_t at = header.find("2624000]");
  ASSERT_NE(at, std::string::npos);
  header[at] = '9';
  f.seekp(8);
  f.write(header.data(), static_cast<std::streamsize>(n));
  f.close();
  expect_error([&] { open_model_file(dir()); }, {"model.safetensors", "model.norm.weight", "data_offsets"});
}

TEST_F(HfDirEdit, TruncatedSafetensorsIsNamed) {
  fs::resize_file(dir_ / "model.safetensors", 1000);
  expect_error([&] { open_model_file(dir()); }, {"model.safetensors", "runs past the end"});
}

TEST_F(HfDirEdit, ShardedWeightsLoadAsOne) {
  // Split model.safetensors into two shards (layer 0 + embeddings, the rest) with an index.
  auto whole = SafetensorsFile::open(dir() + "/model.safetensors");
  json index = {{"metadata", {{"total_size", 2624000}}}, {"weight_map", json::object()}};
  for (int shard = 0; shard < 2; ++shard) {
    const std::string name = "model-0000" + std::to_string(shard + 1) + "-of-00002.safetensors";
    json header = json::object();
    std::string data;
    for (const SafetensorsTensor& t : whole->tensors()) {
      const bool first = t.name.find("layers.0.") != std::string::npos || t.name == "lm_head.weight";
      if (first != (shard == 0)) continue;
      header[t.name] = {
          {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + (t.end - t.begin)}}};
      data.append(reinterpret_cast<const char*>(t.data), t.end - t.begin);
      index["weight_map"][t.name] = name;
    }
    if (shard == 0) header["__metadata__"] = {{"model.embed_tokens.weight", "lm_head.weight"}};
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' ');
    const uint64_t n = h.size();
    std::ofstream out(dir_ / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << h << data;
  }
  fs::remove(dir_ / "model.safetensors");
  write("model.safetensors.index.json", index);
  auto sharded = open_model_file(dir());
  auto single = open_model_file(hf_dir());
  ASSERT_EQ(sharded->tensors().size(), single->tensors().size());
  for (const GgufTensorInfo& t : single->tensors()) {
    const GgufTensorInfo* s = sharded->find_tensor(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    ASSERT_EQ(s->size_bytes, t.size_bytes);
    EXPECT_EQ(std::memcmp(s->data, t.data, t.size_bytes), 0) << t.name;
  }
  index["weight_map"]["model.norm.weight"] = "../model.safetensors";
  write("model.safetensors.index.json", index);
  expect_error([&] { open_model_file(dir()); }, {"model.safetensors.index.json", "weight_map.model.norm.weight"});
}

// tie_word_embeddings decides when config.json sets it; only its absence lets a missing
// lm_head.weight mean tied. The fixture stores the matrix once, as lm_head.weight.
TEST_F(HfDirEdit, TieWordEmbeddingsFalseWithoutLmHeadIsRefused) {
  // Rewrite model.safetensors with lm_head.weight renamed model.embed_tokens.weight.
  auto whole = SafetensorsFile::open(dir() + "/model.safetensors");
  json header = json::object();
  std::string data;
  for (const SafetensorsTensor& t : whole->tensors()) {
    const std::string name = t.name == "lm_head.weight" ? "model.embed_tokens.weight" : t.name;
    header[name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + (t.end - t.begin)}}};
    data.append(reinterpret_cast<const char*>(t.data), t.end - t.begin);
  }
  ASSERT_TRUE(header.contains("model.embed_tokens.weight"));
  whole.reset();
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  const uint64_t n = h.size();
  {
    std::ofstream out(dir_ / "model.safetensors", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << h << data;
  }
  json c = read("config.json");
  c["tie_word_embeddings"] = false;
  write("config.json", c);
  expect_error([&] { open_model_file(dir()); }, {"config.json", "tie_word_embeddings", "no 'lm_head.weight'"});
  for (const bool absent : {true, false}) {
    if (absent) {
      c.erase("tie_word_embeddings");
    } else {
      c["tie_word_embeddings"] = true;
    }
    write("config.json", c);
    auto f = open_model_file(dir());
    EXPECT_EQ(f->find_tensor("output.weight"), nullptr) << absent;
    ASSERT_NE(f->find_tensor("token_embd.weight"), nullptr) << absent;
  }
}

// An explicit false with lm_head.weight stored gets its own output matrix.
TEST_F(HfDirEdit, TieWordEmbeddingsFalseBindsLmHead) {
  json c = read("config.json");
  c["tie_word_embeddings"] = false;
  write("config.json", c);
  auto f = open_model_file(dir());
  const GgufTensorInfo* out = f->find_tensor("output.weight");
  const GgufTensorInfo* embd = f->find_tensor("token_embd.weight");
  ASSERT_NE(out, nullptr);
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(out->ne, embd->ne);
  EXPECT_EQ(std::memcmp(out->data, embd->data, out->size_bytes), 0);  // the same stored bytes
}

TEST_F(HfDirEdit, UnsupportedTokenizerIsNamed) {
  json t = read("tokenizer.json");
  t["model"]["type"] = "Unigram";
  write("tokenizer.json", t);
  expect_error([&] { open_model_file(dir()); }, {"tokenizer.json", "model.type", "Unigram"});
  t["model"]["type"] = "BPE";
  t["normalizer"] = nullptr;
  t["pre_tokenizer"] = {{"type", "Whitespace"}};
  write("tokenizer.json", t);
  expect_error([&] { open_model_file(dir()); }, {"tokenizer.json", "pre_tokenizer"});
  // A normalizer of a type never heard of is named as the normalizer, not passed over.
  t = read("tokenizer.json");
  t["normalizer"] = {{"type", "FooNorm"}};
  write("tokenizer.json", t);
  expect_error([&] { open_model_file(dir()); }, {"tokenizer.json", "'normalizer'", "FooNorm"});
}

TEST_F(HfDirEdit, Llama3RopeScalingBecomesRopeFreqs) {
  json c = read("config.json");
  c["rope_theta"] = 500000.0;
  c["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 32.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  write("config.json", c);
  auto f = open_model_file(dir());
  const GgufTensorInfo& t = f->tensor("rope_freqs.weight");
  ASSERT_EQ(t.ne, std::vector<int64_t>{8});  // head_dim 16 / 2
  const auto* r = reinterpret_cast<const float*>(t.data);
  // Wavelength 2 pi theta^(2i/16): pair 0 (6.28 positions) is below 8192/4 and unscaled; pair 7
  // (2 pi 500000^(14/16) ~ 6.7e5 positions) is beyond 8192 and divided by the full factor; pair
  // 4 (2 pi 500000^(1/2) ~ 4443) lies between and is smoothed.
  EXPECT_EQ(r[0], 1.0f);
  EXPECT_EQ(r[7], 32.0f);
  const double wavelen = 2 * M_PI * std::sqrt(500000.0), smooth = (8192 / wavelen - 1) / 3;
  EXPECT_NEAR(r[4], 1 / ((1 - smooth) / 32 + smooth), 1e-5);
}

}  // namespace
}  // namespace pagellm
