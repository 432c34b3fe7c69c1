#include "model/random_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include <unistd.h>
#include <xxhash.h>

#include "core/error.h"
#include "format/gguf.h"
#include "kernels/cpu/ops.h"
#include "kv/kv_cache.h"
#include "model/llama.h"
#include "test_util.h"

namespace pagellm {
namespace {

namespace fs = std::filesystem;

const GgmlType kDtypes[] = {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0};

std::string spm_vocab() { return test::testdata("vocab/ggml-vocab-llama-spm.gguf"); }

class RandomModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pagellm_random_model_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& shape, GgmlType dtype, uint64_t seed, const std::string& file) {
    RandomModelSpec spec;
    spec.shape = shape;
    spec.dtype = dtype;
    spec.seed = seed;
    spec.vocab_path = spm_vocab();
    std::string path = (dir_ / file).string();
    write_random_model(spec, path);
    return path;
  }

  fs::path dir_;
};

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool same_value(const GgufValue& a, const GgufValue& b);
bool same_array(const GgufArray& a, const GgufArray& b) {
  if (a.elem_type != b.elem_type || a.items.size() != b.items.size()) return false;
  for (size_t i = 0; i < a.items.size(); ++i) {
    if (!same_value(a.items[i], b.items[i])) return false;
  }
  return true;
}
bool same_value(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type || a.v.index() != b.v.index()) return false;
  switch (a.v.index()) {
    case 0: return std::get<0>(a.v) == std::get<0>(b.v);
    case 1: return std::get<1>(a.v) == std::get<1>(b.v);
    case 2: return std::get<2>(a.v) == std::get<2>(b.v);
    case 3: return std::get<3>(a.v) == std::get<3>(b.v);
    case 4: return std::get<4>(a.v) == std::get<4>(b.v);
    case 5: return same_array(std::get<5>(a.v), std::get<5>(b.v));
  }
  return false;
}

// Checks the whole file against the shape: metadata, every tensor's shape and type, the copied
// tokenizer keys, and the parameter count.
void expect_model_file(const std::string& path, const std::string& shape_name, GgmlType dtype, uint64_t seed) {
  SCOPED_TRACE(path);
  const ModelShape s = *model_shape(shape_name);
  auto f = GgufFile::open(path);
  auto vocab = GgufFile::open(spm_vocab());
  const int64_t vocab_size = static_cast<int64_t>(vocab->get_string_array("tokenizer.ggml.tokens").size());
  ASSERT_EQ(vocab_size, 32000);

  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_string("general.name"), shape_name + " random (seed " + std::to_string(seed) + ")");
  EXPECT_EQ(f->get_u64("llama.embedding_length"), static_cast<uint64_t>(s.hidden_size));
  EXPECT_EQ(f->get_u64("llama.feed_forward_length"), static_cast<uint64_t>(s.intermediate_size));
  EXPECT_EQ(f->get_u64("llama.block_count"), static_cast<uint64_t>(s.num_layers));
  EXPECT_EQ(f->get_u64("llama.attention.head_count"), static_cast<uint64_t>(s.num_heads));
  EXPECT_EQ(f->get_u64("llama.attention.head_count_kv"), static_cast<uint64_t>(s.num_kv_heads));
  EXPECT_EQ(f->get_u64("llama.context_length"), static_cast<uint64_t>(s.context_length));
  EXPECT_EQ(f->get_u64("llama.rope.dimension_count"), static_cast<uint64_t>(s.head_dim()));
  EXPECT_EQ(f->get_u64("llama.vocab_size"), static_cast<uint64_t>(vocab_size));
  EXPECT_FLOAT_EQ(f->get_f32("llama.rope.freq_base"), s.rope_theta);
  EXPECT_FLOAT_EQ(f->get_f32("llama.attention.layer_norm_rms_epsilon"), s.rms_norm_eps);
  const uint64_t ftype = f->get_u64("general.file_type");
  EXPECT_EQ(ftype, dtype == GgmlType::F32    ? 0u
                   : dtype == GgmlType::F16  ? 1u
                   : dtype == GgmlType::Q4_0 ? 2u
                   : dtype == GgmlType::Q8_0 ? 7u
                                             : 32u);

  // tokenizer.* keys: the vocab file's, verbatim and in its order.
  std::vector<const std::pair<std::string, GgufValue>*> expect_tok, got_tok;
  for (const auto& kv : vocab->metadata()) {
    if (kv.first.rfind("tokenizer.", 0) == 0) expect_tok.push_back(&kv);
  }
  for (const auto& kv : f->metadata()) {
    if (kv.first.rfind("tokenizer.", 0) == 0) got_tok.push_back(&kv);
  }
  ASSERT_EQ(got_tok.size(), expect_tok.size());
  ASSERT_FALSE(got_tok.empty());
  for (size_t i = 0; i < got_tok.size(); ++i) {
    EXPECT_EQ(got_tok[i]->first, expect_tok[i]->first);
    EXPECT_TRUE(same_value(got_tok[i]->second, expect_tok[i]->second)) << got_tok[i]->first;
  }

  const int64_t h = s.hidden_size, q = s.num_heads * s.head_dim(), kv = s.num_kv_heads * s.head_dim();
  const int64_t ffn = s.intermediate_size;
  auto expect_tensor = [&](const std::string& name, std::vector<int64_t> ne, bool is_norm) {
    const GgufTensorInfo* t = f->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->ne, ne) << name;
    GgmlType want = is_norm ? GgmlType::F32 : dtype;
    if (!is_norm && ne[0] % type_traits(dtype).block_size != 0) want = GgmlType::F16;
    EXPECT_EQ(t->type, want) << name;
  };
  expect_tensor("token_embd.weight", {h, vocab_size}, false);
  expect_tensor("output_norm.weight", {h}, true);
  if (s.tie_word_embeddings) {
    EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  } else {
    expect_tensor("output.weight", {h, vocab_size}, false);
  }
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    expect_tensor(p + "attn_norm.weight", {h}, true);
    expect_tensor(p + "attn_q.weight", {h, q}, false);
    expect_tensor(p + "attn_k.weight", {h, kv}, false);
    expect_tensor(p + "attn_v.weight", {h, kv}, false);
    expect_tensor(p + "attn_output.weight", {q, h}, false);
    expect_tensor(p + "ffn_norm.weight", {h}, true);
    expect_tensor(p + "ffn_gate.weight", {h, ffn}, false);
    expect_tensor(p + "ffn_up.weight", {h, ffn}, false);
    expect_tensor(p + "ffn_down.weight", {ffn, h}, false);
  }
  int64_t params = 0;
  for (const GgufTensorInfo& t : f->tensors()) params += t.num_elements();
  EXPECT_EQ(params, count_parameters(s, vocab_size));
  EXPECT_EQ(static_cast<int64_t>(f->tensors().size()), 2 + 9 * s.num_layers + (s.tie_word_embeddings ? 0 : 1));
}

// Dequantized values of a matrix lie in [-a, a), a = sqrt(3 / cols), and are spread over it.
void expect_uniform_matrix(const GgufFile& f, const std::string& name, float scale) {
  const GgufTensorInfo& t = f.tensor(name);
  const int64_t cols = t.ne[0], rows = t.ne[1];
  const float a = scale * std::sqrt(3.0f / static_cast<float>(cols));
  const int64_t row_bytes = row_size_bytes(t.type, cols);
  std::vector<float> x(static_cast<size_t>(cols));
  double sum_abs = 0;
  float max_abs = 0;
  for (int64_t r = 0; r < rows; ++r) {
    kernels::dequantize_row(t.type, t.data + r * row_bytes, cols, x.data());
    for (float v : x) {
      ASSERT_TRUE(std::isfinite(v)) << name;
      sum_abs += std::fabs(v);
      max_abs = std::max(max_abs, std::fabs(v));
    }
  }
  EXPECT_LE(max_abs, a * 1.01f) << name;  // f16 / q8_0 rounding may step slightly past a
  EXPECT_GE(max_abs, a * 0.8f) << name;
  EXPECT_NEAR(sum_abs / static_cast<double>(rows * cols), a / 2, a * 0.1) << name;  // E|U(-a,a)| = a/2
}

TEST(RandomModelShapes, KnownShapes) {
  const std::vector<std::string> names = known_model_shapes();
  for (const char* n : {"stories15M", "tinyllama-1.1b", "llama-3.2-1b", "tiny-gqa"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
  for (const std::string& n : names) {
    const ModelShape s = *model_shape(n);
    EXPECT_EQ(s.hidden_size % s.num_heads, 0) << n;
    EXPECT_EQ(s.num_heads % s.num_kv_heads, 0) << n;
  }
  EXPECT_FALSE(model_shape("gpt-5").has_value());

  const ModelShape tl = *model_shape("tinyllama-1.1b");
  EXPECT_EQ(tl.hidden_size, 2048);
  EXPECT_EQ(tl.intermediate_size, 5632);
  EXPECT_EQ(tl.num_layers, 22);
  EXPECT_EQ(tl.num_heads, 32);
  EXPECT_EQ(tl.num_kv_heads, 4);
  EXPECT_EQ(tl.context_length, 2048);
  EXPECT_FALSE(tl.tie_word_embeddings);
  const ModelShape l3 = *model_shape("llama-3.2-1b");
  EXPECT_EQ(l3.context_length, 8192);
  EXPECT_FLOAT_EQ(l3.rope_theta, 500000.0f);
  EXPECT_TRUE(l3.tie_word_embeddings);
}

TEST(RandomModelShapes, CountParameters) {
  // perf_anchors.json (llama.cpp's llama-bench): n_params 1100048384 for TinyLlama with 32000 tokens.
  EXPECT_EQ(count_parameters(*model_shape("tinyllama-1.1b"), 32000), 1'100'048'384);
  // llama2.c's stories15M (tied embeddings): 15,191,712.
  EXPECT_EQ(count_parameters(*model_shape("stories15M"), 32000), 15'191'712);
  // Llama-3.2-1B with its real 128256-token vocab: 1,235,814,400 (Meta's "1.23B").
  EXPECT_EQ(count_parameters(*model_shape("llama-3.2-1b"), 128256), 1'235'814'400);
}

TEST_F(RandomModelTest, TinyGqaEveryDtype) {
  for (GgmlType dt : kDtypes) {
    const std::string path = write("tiny-gqa", dt, 7, "tiny-" + type_name(dt) + ".gguf");
    expect_model_file(path, "tiny-gqa", dt, 7);
    auto f = GgufFile::open(path);
    const ModelShape s = *model_shape("tiny-gqa");
    const float residual = 1.0f / std::sqrt(2.0f * static_cast<float>(s.num_layers));
    expect_uniform_matrix(*f, "blk.0.attn_q.weight", 1.0f);
    expect_uniform_matrix(*f, "blk.1.ffn_down.weight", residual);
    expect_uniform_matrix(*f, "output.weight", 1.0f);
    for (const GgufTensorInfo& t : f->tensors()) {
      if (t.ne.size() != 1) continue;
      const auto* w = reinterpret_cast<const float*>(t.data);
      for (int64_t i = 0; i < t.ne[0]; ++i) {
        EXPECT_GE(w[i], 0.9f) << t.name;
        EXPECT_LE(w[i], 1.1f) << t.name;
      }
    }
  }
}

TEST_F(RandomModelTest, Stories15MEveryDtype) {
  for (GgmlType dt : kDtypes) {
    const std::string path = write("stories15M", dt, 1, "s15-" + type_name(dt) + ".gguf");
    expect_model_file(path, "stories15M", dt, 1);
    auto f = GgufFile::open(path);
    expect_uniform_matrix(*f, "token_embd.weight", 1.0f);
    fs::remove(path);
  }
}

TEST_F(RandomModelTest, QuantizedFallsBackToF16ForOddRows) {
  for (GgmlType dt : {GgmlType::Q8_0, GgmlType::Q4_0}) {
    const std::string path = write("tiny-odd", dt, 3, "odd.gguf");
    expect_model_file(path, "tiny-odd", dt, 3);
    auto f = GgufFile::open(path);
    EXPECT_EQ(f->tensor("blk.0.ffn_down.weight").type, GgmlType::F16);  // 80 % 32 != 0
    EXPECT_EQ(f->tensor("blk.0.ffn_up.weight").type, dt);
  }
}

TEST_F(RandomModelTest, DeterministicBySeed) {
  const auto a = read_bytes(write("tiny-gqa", GgmlType::Q4_0, 42, "a.gguf"));
  const auto b = read_bytes(write("tiny-gqa", GgmlType::Q4_0, 42, "b.gguf"));
  const auto c = read_bytes(write("tiny-gqa", GgmlType::Q4_0, 43, "c.gguf"));
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b);
  ASSERT_EQ(a.size(), c.size());
  EXPECT_FALSE(a == c);
  EXPECT_FALSE(fs::exists(dir_ / "a.gguf.tmp"));
}

// The bytes of make-model's files are pinned: these XXH3-64 digests are of files written by the
// binary before make-model moved onto the streaming GgufWriter (its own serializer then), with
// `pagellm make-model --shape S --dtype D --seed N --vocab ggml-vocab-llama-spm.gguf`. A change of
// writer, generator or quantizer that alters one byte of a file shows here.
uint64_t file_xxh3(const std::string& path) {
  const std::vector<char> bytes = read_bytes(path);
  return XXH3_64bits(bytes.data(), bytes.size());
}

TEST_F(RandomModelTest, BytesEqualThoseOfTheFormerSerializer) {
  struct Case {
    const char* shape;
    GgmlType dtype;
    uint64_t seed;
    uint64_t xxh3;
  };
  const Case cases[] = {
      {"tiny-gqa", GgmlType::F32, 7, 0xd0c2669d49733e4bull},  {"tiny-gqa", GgmlType::F16, 7, 0xa7e49f4d5b47b484ull},
      {"tiny-gqa", GgmlType::BF16, 7, 0x0b964af0c27b128aull}, {"tiny-gqa", GgmlType::Q8_0, 7, 0x5f5abeeefa8b0428ull},
      {"tiny-gqa", GgmlType::Q4_0, 7, 0xefe2d30c45472756ull}, {"tiny-odd", GgmlType::Q4_0, 3, 0x308a9e439193b725ull},
  };
  for (const Case& c : cases) {
    const std::string name = std::string(c.shape) + "-" + type_name(c.dtype) + ".gguf";
    EXPECT_EQ(file_xxh3(write(c.shape, c.dtype, c.seed, name)), c.xxh3) << name;
  }
}

TEST_F(RandomModelTest, LayerOverrideKeepsSharedTensors) {
  RandomModelSpec spec{.shape = "tiny-gqa",
                       .dtype = GgmlType::F32,
                       .seed = 5,
                       .vocab_path = spm_vocab(),
                       .num_layers = 1,
                       .context_length = 100};
  const std::string one = (dir_ / "one.gguf").string();
  write_random_model(spec, one);
  const std::string two = write("tiny-gqa", GgmlType::F32, 5, "two.gguf");
  auto f1 = GgufFile::open(one);
  auto f2 = GgufFile::open(two);
  EXPECT_EQ(f1->get_u64("llama.block_count"), 1u);
  EXPECT_EQ(f1->get_u64("llama.context_length"), 100u);
  EXPECT_EQ(f1->find_tensor("blk.1.attn_q.weight"), nullptr);
  for (const char* name : {"token_embd.weight", "blk.0.attn_k.weight", "output_norm.weight"}) {
    const GgufTensorInfo& t1 = f1->tensor(name);
    const GgufTensorInfo& t2 = f2->tensor(name);
    ASSERT_EQ(t1.size_bytes, t2.size_bytes);
    EXPECT_EQ(std::memcmp(t1.data, t2.data, t1.size_bytes), 0) << name;
  }
}

TEST_F(RandomModelTest, Errors) {
  RandomModelSpec spec{.shape = "llama-9b", .dtype = GgmlType::F16, .seed = 0, .vocab_path = spm_vocab()};
  const std::string path = (dir_ / "x.gguf").string();
  try {
    write_random_model(spec, path);
    FAIL() << "expected pagellm::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("llama-9b"), std::string::npos) << msg;
    for (const std::string& n : known_model_shapes()) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  }
  spec.shape = "tiny-gqa";
  spec.dtype = GgmlType::Q4_K;
  EXPECT_THROW(write_random_model(spec, path), Error);
  spec.dtype = GgmlType::F16;
  spec.vocab_path = (dir_ / "missing.gguf").string();
  EXPECT_THROW(write_random_model(spec, path), Error);
  spec.vocab_path = spm_vocab();
  EXPECT_THROW(write_random_model(spec, (dir_ / "no_such_dir" / "x.gguf").string()), Error);
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(RandomModelTest, LoadsIntoLlamaModel) {
  for (GgmlType dt : kDtypes) {
    auto f = GgufFile::open(write("tiny-gqa", dt, 9, "load-" + type_name(dt) + ".gguf"));
    ThreadPool pool(1);
    LlamaModel model(*f, &pool);
    EXPECT_EQ(model.config().num_hidden_layers, 2);
    EXPECT_EQ(model.config().num_key_value_heads, 2);
    EXPECT_EQ(model.config().vocab_size, 32000);
    EXPECT_FALSE(model.config().tie_word_embeddings);
  }
  auto f = GgufFile::open(write("stories15M", GgmlType::Q8_0, 9, "load-s15.gguf"));
  ThreadPool pool(1);
  LlamaModel model(*f, &pool);
  EXPECT_TRUE(model.config().tie_word_embeddings);
  EXPECT_EQ(model.config().max_position_embeddings, 256);
}

// Activations stay O(1): a prefill and greedy decode steps give finite logits of moderate spread.
TEST_F(RandomModelTest, GreedyDecodeStaysFinite) {
  for (const char* shape : {"tiny-gqa", "stories15M"}) {
    SCOPED_TRACE(shape);
    auto f = GgufFile::open(write(shape, GgmlType::F16, 11, "fwd.gguf"));
    ThreadPool pool(2);
    LlamaModel model(*f, &pool);
    constexpr int32_t kBlockSize = 16;
    KvCache kv(model.kv_shape(GgmlType::F32), 2, kBlockSize);
    std::vector<int32_t> tokens = {1, 450, 4996, 17354, 1701, 29916, 432, 17204};
    const int64_t vocab = model.config().vocab_size;
    std::vector<float> logits;
    kernels::Workspace ws;
    for (int step = 0; step < 8; ++step) {
      const int64_t start = step == 0 ? 0 : static_cast<int64_t>(tokens.size()) - 1;
      ForwardBatch fb;
      fb.kv_groups.resize(1);
      for (int64_t p = start; p < static_cast<int64_t>(tokens.size()); ++p) {
        fb.token_ids.push_back(tokens[p]);
        fb.positions.push_back(p);
        fb.kv_groups[0].slot_mapping.push_back(p);  // blocks 0, 1 in order: slot = position
      }
      fb.query_start_loc = {0, fb.num_tokens()};
      fb.kv_groups[0].block_tables = {0, 1};
      fb.kv_groups[0].max_blocks_per_seq = 2;
      fb.logits_indices = {fb.num_tokens() - 1};
      model.forward(fb, kv, ws, logits);
      ASSERT_EQ(static_cast<int64_t>(logits.size()), vocab);
      double sum = 0, sum_sq = 0;
      for (float v : logits) {
        ASSERT_TRUE(std::isfinite(v));
        sum += v;
        sum_sq += static_cast<double>(v) * v;
      }
      const double mean = sum / vocab, sd = std::sqrt(sum_sq / vocab - mean * mean);
      EXPECT_GT(sd, 0.3) << "step " << step;
      EXPECT_LT(sd, 3.0) << "step " << step;
      tokens.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    }
  }
}

}  // namespace
}  // namespace pagellm
