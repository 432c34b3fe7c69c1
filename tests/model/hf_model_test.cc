// A Hugging Face directory runs as its GGUF conversion: TinyStories-656K's hf/ and its F32
// GGUF (an independent converter) give the same logits, bit for bit, over prompt and decode.
// The llama3 / qwen2 / qwen3 files of ../shared/testdata/archs, written back as Hugging Face
// directories (the inverse of convert_hf_to_gguf.py's mapping, in this test), must load as the
// same model: the mapping of each architecture, Llama's q/k permutation and Llama 3's rope_freqs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/hf_dir.h"
#include "model/llama.h"
#include "model_harness.h"
#include "test_util.h"

namespace pagellm {
namespace {

TEST(HfModel, LogitsEqualTheGgufConversion) {
  auto hf_file = open_model_file(test::testdata("tinystories-656k/hf"));
  auto gguf_file = GgufFile::open(test::testdata("tinystories-656k/TinyStories-656K-f32.gguf"));
  ThreadPool pool(2);
  LlamaModel hf(*hf_file, &pool), gguf(*gguf_file, &pool);
  EXPECT_EQ(hf.config().rope_type, gguf.config().rope_type);
  test::ModelHarness a(hf, 16, 16), b(gguf, 16, 16);
  std::vector<int32_t> prompt = {1, 300, 25, 700, 12, 99};
  auto la = a.step({{"s", prompt, true}}), lb = b.step({{"s", prompt, true}});
  ASSERT_EQ(la[0].size(), prompt.size() * 2048);
  EXPECT_EQ(la[0], lb[0]);
  int32_t next = test::argmax(la[0].data() + (prompt.size() - 1) * 2048, 2048);
  for (int step = 0; step < 40; ++step) {
    la = a.step({{"s", {next}}});
    lb = b.step({{"s", {next}}});
    ASSERT_EQ(la[0], lb[0]) << "decode step " << step;
    next = test::argmax(la[0].data(), 2048);
  }
}

namespace fs = std::filesystem;
using nlohmann::json;

// GGUF tensor name -> Hugging Face name ("" for rope_freqs, which config.json's rope_scaling
// stands for).
std::string hf_name(const std::string& gguf) {
  static const std::map<std::string, std::string> kLayer = {{"attn_norm.weight", "input_layernorm.weight"},
                                                            {"attn_q.weight", "self_attn.q_proj.weight"},
                                                            {"attn_k.weight", "self_attn.k_proj.weight"},
                                                            {"attn_v.weight", "self_attn.v_proj.weight"},
                                                            {"attn_output.weight", "self_attn.o_proj.weight"},
                                                            {"attn_q.bias", "self_attn.q_proj.bias"},
                                                            {"attn_k.bias", "self_attn.k_proj.bias"},
                                                            {"attn_v.bias", "self_attn.v_proj.bias"},
                                                            {"attn_q_norm.weight", "self_attn.q_norm.weight"},
                                                            {"attn_k_norm.weight", "self_attn.k_norm.weight"},
                                                            {"ffn_norm.weight", "post_attention_layernorm.weight"},
                                                            {"ffn_gate.weight", "mlp.gate_proj.weight"},
                                                            {"ffn_up.weight", "mlp.up_proj.weight"},
                                                            {"ffn_down.weight", "mlp.down_proj.weight"}};
  if (gguf == "token_embd.weight") return "model.embed_tokens.weight";
  if (gguf == "output_norm.weight") return "model.norm.weight";
  if (gguf == "output.weight") return "lm_head.weight";
  if (gguf == "rope_freqs.weight") return "";
  const size_t dot = gguf.find('.', 4);
  return "model.layers." + gguf.substr(4, dot - 4) + "." + kLayer.at(gguf.substr(dot + 1));
}

// Writes `gguf` (F32 tensors) as a Hugging Face directory: config.json, model.safetensors, and an
// SPM-style tokenizer.json of its vocabulary. Llama's q/k rows go back to rotate-half order.
void write_hf_dir(const GgufFile& gguf, const fs::path& dir, const json& extra_config) {
  const std::string arch = gguf.get_string("general.architecture");
  auto u = [&](const std::string& k) { return static_cast<int64_t>(gguf.get_u64(arch + "." + k)); };
  const int64_t heads = u("attention.head_count"), kv_heads = u("attention.head_count_kv");
  const bool tied = gguf.find_tensor("output.weight") == nullptr;
  json config = {{"architectures",
                  {arch == "llama"   ? "LlamaForCausalLM"
                   : arch == "qwen2" ? "Qwen2ForCausalLM"
                                     : "Qwen3ForCausalLM"}},
                 {"hidden_size", u("embedding_length")},
                 {"intermediate_size", u("feed_forward_length")},
                 {"num_hidden_layers", u("block_count")},
                 {"num_attention_heads", heads},
                 {"num_key_value_heads", kv_heads},
                 {"max_position_embeddings", u("context_length")},
                 {"rms_norm_eps", gguf.get_f32(arch + ".attention.layer_norm_rms_epsilon")},
                 {"rope_theta", gguf.get_f32(arch + ".rope.freq_base")},
                 {"vocab_size", gguf.get_string_array("tokenizer.ggml.tokens").size()},
                 {"tie_word_embeddings", tied},
                 {"hidden_act", "silu"}};
  if (gguf.find(arch + ".attention.key_length")) config["head_dim"] = u("attention.key_length");
  config.update(extra_config);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump();

  json header = json::object();
  std::vector<uint8_t> data;
  for (const GgufTensorInfo& t : gguf.tensors()) {
    const std::string name = hf_name(t.name);
    if (name.empty()) continue;
    EXPECT_EQ(t.type, GgmlType::F32) << t.name;
    std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
    const size_t begin = data.size();
    data.resize(begin + t.size_bytes);
    const bool is_q = t.name.ends_with("attn_q.weight"), is_k = t.name.ends_with("attn_k.weight");
    if (arch == "llama" && (is_q || is_k)) {
      // GGUF row (h, i, j) of [heads, half, 2] is Hugging Face row (h, j, i) of [heads, 2, half].
      const int64_t n_head = is_q ? heads : kv_heads, rows = shape[0], half = rows / n_head / 2;
      const size_t row_bytes = static_cast<size_t>(shape[1]) * sizeof(float);
      for (int64_t h = 0; h < n_head; ++h)
        for (int64_t i = 0; i < half; ++i)
          for (int64_t j = 0; j < 2; ++j)
            std::memcpy(&data[begin + static_cast<size_t>((h * 2 + j) * half + i) * row_bytes],
                        t.data + static_cast<size_t>((h * half + i) * 2 + j) * row_bytes, row_bytes);
    } else {
      std::memcpy(&data[begin], t.data, t.size_bytes);
    }
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {begin, data.size()}}};
  }
  const std::string text = header.dump();
  std::ofstream st(dir / "model.safetensors", std::ios::binary);
  const uint64_t n = text.size();
  st.write(reinterpret_cast<const char*>(&n), 8);
  st << text;
  st.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));

  const std::vector<std::string> tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  json vocab = json::object(), added = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    vocab[tokens[i]] = i;
    if (i >= 1 && i <= 2) added.push_back({{"id", i}, {"content", tokens[i]}, {"special", true}});
  }
  const json tokenizer = {{"added_tokens", added},
                          {"normalizer",
                           {{"type", "Sequence"},
                            {"normalizers",
                             {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
                          {"pre_tokenizer", nullptr},
                          {"model",
                           {{"type", "BPE"},
                            {"vocab", vocab},
                            {"merges", json::array()},
                            {"byte_fallback", true},
                            {"unk_token", "<unk>"}}}};
  std::ofstream(dir / "tokenizer.json") << tokenizer.dump();
}

struct ArchDir {
  const char* file;   // under archs/
  const char* extra;  // config.json fields the GGUF does not carry
};

class HfArchs : public ::testing::TestWithParam<ArchDir> {};

TEST_P(HfArchs, WrittenBackAsAHuggingFaceDirectoryGivesTheSameModel) {
  auto gguf = GgufFile::open(test::testdata(std::string("archs/") + GetParam().file));
  const fs::path dir = fs::temp_directory_path() / ("pagellm-hfarch-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  write_hf_dir(*gguf, dir, json::parse(GetParam().extra));
  auto hf_file = open_model_file(dir.string());
  for (const GgufTensorInfo& g : gguf->tensors()) {
    const GgufTensorInfo* h = hf_file->find_tensor(g.name);
    ASSERT_NE(h, nullptr) << g.name;
    EXPECT_EQ(h->ne, g.ne) << g.name;
    ASSERT_EQ(h->size_bytes, g.size_bytes) << g.name;
    if (g.name == "rope_freqs.weight") {
      // Ours is computed from rope_scaling in double, the file's in torch float32: within 4 ulps
      // (they differ by 2 in the smooth-band entry; see below).
      for (size_t i = 0; i < g.size_bytes / 4; ++i) {
        float a, b;
        std::memcpy(&a, h->data + 4 * i, 4);
        std::memcpy(&b, g.data + 4 * i, 4);
        EXPECT_FLOAT_EQ(a, b) << "rope_freqs[" << i << "]";
      }
    } else {
      EXPECT_EQ(std::memcmp(h->data, g.data, g.size_bytes), 0) << g.name;
    }
  }
  // Every tensor but rope_freqs is bit-identical, so the logits must be too. rope_freqs is
  // computed here in double from rope_scaling (HF's _compute_llama3_parameters); the file's was
  // computed in torch float32 and differs in one entry (the smooth band) by 2 ulps, which moves
  // the logits by ~1e-6 once positions grow: there a tolerance of 1e-4 and equal argmaxes.
  const bool exact = gguf->find_tensor("rope_freqs.weight") == nullptr;
  auto expect_same = [&](const std::vector<float>& x, const std::vector<float>& y, const std::string& where) {
    ASSERT_EQ(x.size(), y.size()) << where;
    if (exact) {
      EXPECT_EQ(x, y) << where;
      return;
    }
    float worst = 0;
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
    EXPECT_LE(worst, 1e-4f) << where;
  };
  ThreadPool pool(2);
  LlamaModel a_model(*hf_file, &pool), b_model(*gguf, &pool);
  EXPECT_EQ(a_model.config().architecture, b_model.config().architecture);
  EXPECT_EQ(a_model.config().rope_type, b_model.config().rope_type);
  const int32_t vocab = 512;
  test::ModelHarness a(a_model, 16, 16), b(b_model, 16, 16);
  const std::vector<int32_t> prompt = {1, 300, 25, 400, 12, 99, 7};
  auto la = a.step({{"s", prompt, true}}), lb = b.step({{"s", prompt, true}});
  ASSERT_EQ(la[0].size(), prompt.size() * vocab);
  expect_same(la[0], lb[0], "prompt");
  int32_t next = test::argmax(la[0].data() + (prompt.size() - 1) * vocab, vocab);
  for (int step = 0; step < 24; ++step) {
    la = a.step({{"s", {next}}});
    lb = b.step({{"s", {next}}});
    expect_same(la[0], lb[0], "decode step " + std::to_string(step));
    next = test::argmax(la[0].data(), vocab);
    ASSERT_EQ(next, test::argmax(lb[0].data(), vocab)) << "decode step " << step;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Archs, HfArchs,
    ::testing::Values(ArchDir{"llama3-s11-f32.gguf",
                              R"({"rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})"},
                      ArchDir{"qwen2-s12-f32.gguf", "{}"}, ArchDir{"qwen3-s13-f32.gguf", "{}"}),
    [](const auto& info) { return std::string(info.param.file).substr(0, 5); });

}  // namespace
}  // namespace pagellm
