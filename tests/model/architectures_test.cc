// Per-architecture metadata and tensors (src/model/architectures.h): what each architecture's
// file reads from the archs/ golden files, and the load errors, each naming the key or tensor, of
// copies of those files with a key or tensor removed or changed.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/llama.h"
#include "test_util.h"

namespace pagellm {
namespace {

std::unique_ptr<GgufFile> open_arch(const std::string& file) { return GgufFile::open(test::testdata("archs/" + file)); }

// A copy of `src` in memory without metadata key / tensor `drop` and with `set` applied.
struct Edited {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
};
Edited edit(const GgufFile& src, const std::string& drop, std::optional<std::pair<std::string, GgufValue>> set = {}) {
  GgufWriter w;
  for (const auto& [key, value] : src.metadata()) {
    if (key != drop && key != "general.alignment") w.set(key, value);
  }
  if (set) w.set(set->first, set->second);
  for (const GgufTensorInfo& t : src.tensors()) {
    if (t.name != drop) w.add_tensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.size_bytes));
  }
  Edited e;
  e.bytes = w.to_bytes();
  e.file = GgufFile::parse(e.bytes, "edited.gguf");
  return e;
}

// Loading `f` throws a pagellm::Error whose message contains `needle`.
void expect_load_error(const GgufFile& f, const std::string& needle) {
  ThreadPool pool(1);
  try {
    LlamaModel model(f, &pool);
    ADD_FAILURE() << "expected an error naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Architectures, ConfigOfEachGoldenFile) {
  const LlamaConfig llama3 = LlamaConfig::from_gguf(*open_arch("llama3-s11-f32.gguf"));
  EXPECT_EQ(llama3.rope_type, RopeType::kNorm);
  EXPECT_TRUE(llama3.rope_freqs);
  EXPECT_TRUE(llama3.tie_word_embeddings);
  EXPECT_EQ(llama3.rope_theta, 500000.0f);

  const LlamaConfig qwen2 = LlamaConfig::from_gguf(*open_arch("qwen2-s12-f32.gguf"));
  EXPECT_EQ(qwen2.rope_type, RopeType::kNeox);
  EXPECT_TRUE(qwen2.attention_bias);
  EXPECT_FALSE(qwen2.qk_norm);

  const LlamaConfig qwen3 = LlamaConfig::from_gguf(*open_arch("qwen3-s13-f32.gguf"));
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_EQ(qwen3.head_dim, 64);  // attention.key_length, != 256 / 8
  EXPECT_EQ(qwen3.num_key_value_heads, 2);

  const LlamaConfig gemma3 = LlamaConfig::from_gguf(*open_arch("gemma3-s14-f32.gguf"));
  EXPECT_TRUE(gemma3.post_norms);
  EXPECT_EQ(gemma3.hidden_act, HiddenAct::kGeluTanh);
  EXPECT_EQ(gemma3.embedding_scale, 16.0f);
  EXPECT_TRUE(gemma3.scale_q);
  EXPECT_EQ(gemma3.sliding_window, 16);
  EXPECT_TRUE(gemma3.is_sliding(0));
  EXPECT_FALSE(gemma3.is_sliding(1));
  EXPECT_EQ(gemma3.rope_theta_swa, 10000.0f);
  EXPECT_EQ(gemma3.rope_theta, 1e6f);

  const LlamaConfig phi3 = LlamaConfig::from_gguf(*open_arch("phi3-s15-f32.gguf"));
  EXPECT_TRUE(phi3.fused_qkv);
  EXPECT_TRUE(phi3.fused_gate_up);
  EXPECT_FALSE(phi3.tie_word_embeddings);
  EXPECT_EQ(phi3.rope_dim, 32);
  EXPECT_FALSE(phi3.is_sliding(0));
}

// Real Gemma 3 files carry no sliding_window_pattern: 6 (5 local layers, then a global one).
TEST(Architectures, Gemma3PatternDefaultsToSix) {
  const auto f = open_arch("gemma3-s14-f32.gguf");
  const Edited e = edit(*f, "gemma3.attention.sliding_window_pattern");
  const LlamaConfig c = LlamaConfig::from_gguf(*e.file);
  EXPECT_EQ(c.sliding_window_pattern, 6);
  for (int il = 0; il < 12; ++il) EXPECT_EQ(c.is_sliding(il), il % 6 != 5) << il;
}

TEST(Architectures, MissingKeyOrTensorIsNamed) {
  struct Case {
    const char* file;
    const char* drop;
  };
  for (const Case c :
       {Case{"gemma3-s14-f32.gguf", "gemma3.attention.sliding_window"},
        Case{"qwen3-s13-f32.gguf", "qwen3.embedding_length"}, Case{"phi3-s15-f32.gguf", "phi3.attention.head_count"},
        Case{"qwen2-s12-f32.gguf", "blk.1.attn_v.bias"}, Case{"qwen3-s13-f32.gguf", "blk.0.attn_k_norm.weight"},
        Case{"gemma3-s14-f32.gguf", "blk.1.post_ffw_norm.weight"},
        Case{"gemma3-s14-f32.gguf", "blk.0.post_attention_norm.weight"},
        Case{"phi3-s15-f32.gguf", "blk.0.attn_qkv.weight"},
        Case{"qwen3-s13-f32.gguf", "qwen3.attention.layer_norm_rms_epsilon"},
        Case{"gemma3-s14-f32.gguf", "gemma3.attention.layer_norm_rms_epsilon"}}) {
    SCOPED_TRACE(std::string(c.file) + " without " + c.drop);
    const auto f = open_arch(c.file);
    expect_load_error(*edit(*f, c.drop).file, c.drop);
  }
}

TEST(Architectures, InvalidOrUnsupportedValuesAreNamed) {
  const auto gemma3 = open_arch("gemma3-s14-f32.gguf");
  expect_load_error(*edit(*gemma3, "", {{"gemma3.attention.sliding_window_pattern", GgufValue::u32(0)}}).file,
                    "gemma3.attention.sliding_window_pattern");
  expect_load_error(*edit(*gemma3, "", {{"gemma3.final_logit_softcapping", GgufValue::f32(30.0f)}}).file,
                    "gemma3.final_logit_softcapping");
  expect_load_error(*edit(*gemma3, "", {{"gemma3.rope.freq_base_swa", GgufValue::f32(-1.0f)}}).file,
                    "gemma3.rope.freq_base_swa");
  // An architecture we do not run: the message lists the ones we do.
  expect_load_error(*edit(*gemma3, "", {{"general.architecture", GgufValue::str("mamba")}}).file,
                    "supported: llama, qwen2, qwen3, gemma3, phi3");
  // rope_freqs only where the architecture's file reads it (llama).
  const auto llama3 = open_arch("llama3-s11-f32.gguf");
  GgufWriter w;  // llama3-s11 with its llama.* keys renamed qwen2.*
  for (const auto& [key, value] : llama3->metadata()) {
    w.set(key.starts_with("llama.") ? "qwen2." + key.substr(6) : key, value);
  }
  w.set("general.architecture", GgufValue::str("qwen2"));
  for (const GgufTensorInfo& t : llama3->tensors()) {
    w.add_tensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.size_bytes));
  }
  const std::vector<uint8_t> bytes = w.to_bytes();
  expect_load_error(*GgufFile::parse(bytes, "as-qwen2.gguf"),
                    "rope_freqs.weight is not supported for architecture qwen2");
  // A head size that value_length does not match names the key the head size came from.
  expect_load_error(*edit(*gemma3, "", {{"gemma3.attention.key_length", GgufValue::u32(63)}}).file,
                    "differs from the head size 63 (gemma3.attention.key_length)");
  const auto qwen3 = open_arch("qwen3-s13-f32.gguf");
  expect_load_error(*edit(*qwen3, "qwen3.attention.key_length").file, "qwen3.attention.key_length being absent");
  // Layers the file holds beyond block_count would be silently dropped.
  expect_load_error(*edit(*qwen3, "", {{"qwen3.block_count", GgufValue::u32(1)}}).file,
                    "is of layer 1, but qwen3.block_count = 1");
  const auto phi3 = open_arch("phi3-s15-f32.gguf");
  expect_load_error(*edit(*phi3, "", {{"phi3.rope.scaling.attn_factor", GgufValue::f32(1.2f)}}).file,
                    "phi3.rope.scaling.attn_factor");
}

// rope_freqs.weight must be [rope_dim / 2] f32.
TEST(Architectures, RopeFreqsShapeIsChecked) {
  const auto f = open_arch("llama3-s11-f32.gguf");
  GgufWriter w;
  for (const auto& [key, value] : f->metadata()) w.set(key, value);
  for (const GgufTensorInfo& t : f->tensors()) {
    const int64_t n = t.name == "rope_freqs.weight" ? 8 : t.ne[0];
    std::vector<int64_t> ne = t.ne;
    ne[0] = n;
    const uint64_t bytes = t.name == "rope_freqs.weight" ? 32 : t.size_bytes;
    w.add_tensor(t.name, t.type, ne, std::vector<uint8_t>(t.data, t.data + bytes));
  }
  const std::vector<uint8_t> bytes = w.to_bytes();
  const auto bad = GgufFile::parse(bytes, "edited.gguf");
  expect_load_error(*bad, "rope_freqs.weight");
}

// rope_freqs.weight values divide RoPE angles: zero, negative, NaN and inf factors are refused at
// load (they gave NaN logits only at the first token), and so are tiny ones that make an angle
// overflow before the last position (1e-38: NaN logits after some tokens; a denormal: at once).
TEST(Architectures, RopeFreqsValuesAreChecked) {
  const auto f = open_arch("llama3-s11-f32.gguf");
  for (const float bad : {0.0f, -2.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          1e-38f, std::numeric_limits<float>::denorm_min()}) {
    SCOPED_TRACE(bad);
    GgufWriter w;
    for (const auto& [key, value] : f->metadata()) w.set(key, value);
    for (const GgufTensorInfo& t : f->tensors()) {
      std::vector<uint8_t> data(t.data, t.data + t.size_bytes);
      if (t.name == "rope_freqs.weight") std::memcpy(data.data() + 4 * 3, &bad, 4);
      w.add_tensor(t.name, t.type, t.ne, data);
    }
    const std::vector<uint8_t> bytes = w.to_bytes();
    expect_load_error(*GgufFile::parse(bytes, "edited.gguf"), "rope_freqs.weight[3] is ");
  }
  // The file as written loads.
  ThreadPool pool(1);
  EXPECT_NO_THROW(LlamaModel(*f, &pool));
}

}  // namespace
}  // namespace pagellm
