#include "model/random_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include "core/error.h"
#include "core/thread_pool.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "kernels/cpu/ops.h"

namespace pagellm {
namespace {

// ---- named shapes ----------------------------------------------------------------------------

const std::map<std::string, ModelShape>& shapes() {
  // hidden, ffn, layers, heads, kv_heads, context, rope_theta, rms_norm_eps, tied
  static const std::map<std::string, ModelShape> kShapes = {
      {"stories15M", {288, 768, 6, 6, 6, 256, 10000.0f, 1e-5f, true}},
      {"stories42M", {512, 1376, 8, 8, 8, 1024, 10000.0f, 1e-5f, true}},
      {"stories110M", {768, 2048, 12, 12, 12, 1024, 10000.0f, 1e-5f, true}},
      {"tinyllama-1.1b", {2048, 5632, 22, 32, 4, 2048, 10000.0f, 1e-5f, false}},
      {"llama-3.2-1b", {2048, 8192, 16, 32, 8, 8192, 500000.0f, 1e-5f, true}},
      {"llama-2-7b", {4096, 11008, 32, 32, 32, 4096, 10000.0f, 1e-5f, false}},
      {"tiny-gqa", {64, 96, 2, 4, 2, 512, 10000.0f, 1e-5f, false}},
      // >= 256 columns (rows of 10 and 17 blocks): awkward block counts for the repacked tiles.
      {"tiny-gqa-wide", {320, 544, 2, 4, 2, 512, 10000.0f, 1e-5f, false}},
      {"tiny-odd", {64, 80, 1, 4, 4, 512, 10000.0f, 1e-5f, false}},
  };
  return kShapes;
}

// ---- deterministic generator -----------------------------------------------------------------

// splitmix64 (Steele, Lea, Flood 2014): one 64-bit state, full period, good enough statistics.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The generator state of one row: a function of (seed, tensor name, row) only.
uint64_t row_state(uint64_t seed, uint64_t name_hash, int64_t row) {
  uint64_t s = seed;
  uint64_t a = splitmix64(s) ^ name_hash;
  uint64_t b = splitmix64(a) ^ static_cast<uint64_t>(row);
  return splitmix64(b);
}

// out[i] = center + uniform(-a, a), i in [0, n). 24 random bits per value.
void fill_uniform(uint64_t state, float center, float a, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float u = static_cast<float>(splitmix64(state) >> 40) * 0x1p-24f;  // [0, 1)
    out[i] = center + (2.0f * u - 1.0f) * a;
  }
}

// ---- tensor plan -----------------------------------------------------------------------------

struct TensorPlan {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;  // ggml order: ne[0] = cols
  float center;             // values are center + uniform(-a, a)
  float a;

  int64_t rows() const { return ne.size() > 1 ? ne[1] : 1; }
  int64_t row_bytes() const { return row_size_bytes(type, ne[0]); }
};

bool is_supported_dtype(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_0 || t == GgmlType::Q4_0;
}

// llama.cpp's `enum llama_ftype` value for a file whose matrices are mostly `t`.
uint32_t file_type_of(GgmlType t) {
  if (t == GgmlType::F32) return 0;
  if (t == GgmlType::F16) return 1;
  if (t == GgmlType::Q4_0) return 2;
  if (t == GgmlType::Q8_0) return 7;
  PAGELLM_CHECK(t == GgmlType::BF16, "file_type_of: " + type_name(t));
  return 32;
}

std::vector<TensorPlan> plan_tensors(const ModelShape& s, int64_t vocab_size, GgmlType dtype) {
  const int64_t h = s.hidden_size, q_dim = s.num_heads * s.head_dim(), kv_dim = s.num_kv_heads * s.head_dim();
  const float residual_scale = 1.0f / std::sqrt(2.0f * static_cast<float>(s.num_layers));
  std::vector<TensorPlan> out;
  auto matrix = [&](const std::string& name, int64_t cols, int64_t rows, float scale) {
    const int64_t block = type_traits(dtype).block_size;
    const GgmlType t = cols % block == 0 ? dtype : GgmlType::F16;  // llama-quantize's fallback
    out.push_back({name, t, {cols, rows}, 0.0f, scale * std::sqrt(3.0f / static_cast<float>(cols))});
  };
  auto norm = [&](const std::string& name) { out.push_back({name, GgmlType::F32, {h}, 1.0f, 0.1f}); };

  matrix("token_embd.weight", h, vocab_size, 1.0f);
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    norm(p + "attn_norm.weight");
    matrix(p + "attn_q.weight", h, q_dim, 1.0f);
    matrix(p + "attn_k.weight", h, kv_dim, 1.0f);
    matrix(p + "attn_v.weight", h, kv_dim, 1.0f);
    matrix(p + "attn_output.weight", q_dim, h, residual_scale);
    norm(p + "ffn_norm.weight");
    matrix(p + "ffn_gate.weight", h, s.intermediate_size, 1.0f);
    matrix(p + "ffn_up.weight", h, s.intermediate_size, 1.0f);
    matrix(p + "ffn_down.weight", s.intermediate_size, h, residual_scale);
  }
  norm("output_norm.weight");
  if (!s.tie_word_embeddings) matrix("output.weight", h, vocab_size, 1.0f);
  return out;
}

// ---- metadata --------------------------------------------------------------------------------

struct Vocab {
  std::vector<std::pair<std::string, GgufValue>> tokenizer_kv;  // file order
  int64_t num_tokens = 0;
};

Vocab read_vocab(const std::string& path) {
  std::unique_ptr<GgufFile> f;
  try {
    f = GgufFile::open(path);
  } catch (const Error& e) {
    throw Error(std::string("random model: cannot read vocab file: ") + e.what());
  }
  Vocab v;
  for (const auto& [key, value] : f->metadata()) {
    if (key.rfind("tokenizer.", 0) == 0) v.tokenizer_kv.emplace_back(key, value);
  }
  const GgufValue* tokens = f->find("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->type != GgufValueType::ARRAY) {
    throw Error("random model: vocab file '" + path + "' has no tokenizer.ggml.tokens array");
  }
  v.num_tokens = static_cast<int64_t>(std::get<GgufArray>(tokens->v).items.size());
  if (v.num_tokens == 0) throw Error("random model: vocab file '" + path + "' has no tokens");
  return v;
}

std::vector<std::pair<std::string, GgufValue>> model_metadata(const RandomModelSpec& spec, const ModelShape& s,
                                                              const Vocab& vocab) {
  auto u32 = [](int64_t x) { return GgufValue::u32(static_cast<uint32_t>(x)); };
  std::vector<std::pair<std::string, GgufValue>> kv = {
      {"general.architecture", GgufValue::str("llama")},
      {"general.name", GgufValue::str(spec.shape + " random (seed " + std::to_string(spec.seed) + ")")},
      {"general.file_type", GgufValue::u32(file_type_of(spec.dtype))},
      {"llama.vocab_size", u32(vocab.num_tokens)},
      {"llama.context_length", u32(s.context_length)},
      {"llama.embedding_length", u32(s.hidden_size)},
      {"llama.block_count", u32(s.num_layers)},
      {"llama.feed_forward_length", u32(s.intermediate_size)},
      {"llama.rope.dimension_count", u32(s.head_dim())},
      {"llama.attention.head_count", u32(s.num_heads)},
      {"llama.attention.head_count_kv", u32(s.num_kv_heads)},
      {"llama.attention.layer_norm_rms_epsilon", GgufValue::f32(s.rms_norm_eps)},
      {"llama.rope.freq_base", GgufValue::f32(s.rope_theta)},
  };
  kv.insert(kv.end(), vocab.tokenizer_kv.begin(), vocab.tokenizer_kv.end());
  return kv;
}

ModelShape resolve_shape(const RandomModelSpec& spec) {
  std::optional<ModelShape> s = model_shape(spec.shape);
  if (!s) {
    std::string known;
    for (const std::string& n : known_model_shapes()) known += (known.empty() ? "" : ", ") + n;
    throw Error("random model: unknown shape '" + spec.shape + "' (known: " + known + ")");
  }
  if (!is_supported_dtype(spec.dtype)) {
    throw Error("random model: dtype " + type_name(spec.dtype) + " is not supported (f32, f16, bf16, q8_0, q4_0)");
  }
  if (spec.num_layers < 0 || spec.num_layers > 1024) {
    throw Error("random model: num_layers = " + std::to_string(spec.num_layers) + " is out of range [0, 1024]");
  }
  if (spec.context_length < 0 || spec.context_length > (int64_t{1} << 24)) {
    throw Error("random model: context_length = " + std::to_string(spec.context_length) + " is out of range");
  }
  if (spec.num_layers > 0) s->num_layers = spec.num_layers;
  if (spec.context_length > 0) s->context_length = spec.context_length;
  return *s;
}

// ---- streaming tensor data -------------------------------------------------------------------

// Encodes one row of f32 values as `type`. out: row_size_bytes(type, n) bytes.
void encode_row(GgmlType type, const float* x, int64_t n, uint8_t* out) {
  if (type == GgmlType::F32) {
    std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float));
  } else if (type == GgmlType::F16 || type == GgmlType::BF16) {
    uint16_t (*convert)(float) = type == GgmlType::F16 ? &fp32_to_fp16 : &fp32_to_bf16;
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = convert(x[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
  } else if (type == GgmlType::Q8_0) {
    kernels::quantize_row_q8_0(x, n, out);
  } else {
    PAGELLM_CHECK(type == GgmlType::Q4_0, "encode_row: " + type_name(type));
    kernels::quantize_row_q4_0(x, n, out);
  }
}

constexpr int64_t kChunkBytes = int64_t{16} << 20;  // output bytes generated per write

// Generates `t` in chunks of rows (split across the pool's threads) and hands each chunk to `out`.
void stream_tensor(const TensorPlan& t, uint64_t seed, ThreadPool& pool, std::vector<uint8_t>& buf, GgufDataSink& out) {
  const uint64_t name_hash = fnv1a64(t.name);
  const int64_t cols = t.ne[0], row_bytes = t.row_bytes(), rows = t.rows();
  const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkBytes / row_bytes);
  for (int64_t r0 = 0; r0 < rows; r0 += rows_per_chunk) {
    const int64_t n = std::min(rows_per_chunk, rows - r0);
    buf.resize(static_cast<size_t>(n * row_bytes));
    pool.parallel_for(n, [&](int64_t begin, int64_t end) {
      std::vector<float> x(static_cast<size_t>(cols));
      for (int64_t r = begin; r < end; ++r) {
        fill_uniform(row_state(seed, name_hash, r0 + r), t.center, t.a, cols, x.data());
        encode_row(t.type, x.data(), cols, buf.data() + r * row_bytes);
      }
    });
    out.write(buf.data(), buf.size());
  }
}

}  // namespace

std::optional<ModelShape> model_shape(const std::string& name) {
  auto it = shapes().find(name);
  if (it == shapes().end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> known_model_shapes() {
  std::vector<std::string> names;
  for (const auto& [name, shape] : shapes()) names.push_back(name);
  return names;
}

int64_t count_parameters(const ModelShape& s, int64_t vocab_size) {
  const int64_t h = s.hidden_size, q_dim = s.num_heads * s.head_dim(), kv_dim = s.num_kv_heads * s.head_dim();
  const int64_t per_layer = 2 * h                           // attn_norm, ffn_norm
                            + 2 * h * q_dim                 // attn_q, attn_output
                            + 2 * h * kv_dim                // attn_k, attn_v
                            + 3 * h * s.intermediate_size;  // ffn_gate, ffn_up, ffn_down
  const int64_t embeddings = (s.tie_word_embeddings ? 1 : 2) * h * vocab_size;
  return embeddings + h + s.num_layers * per_layer;
}

void write_random_model(const RandomModelSpec& spec, const std::string& path) {
  const ModelShape shape = resolve_shape(spec);
  const Vocab vocab = read_vocab(spec.vocab_path);
  GgufWriter w;  // GGUF's default alignment (32): general.alignment is not written
  for (auto& [key, value] : model_metadata(spec, shape, vocab)) w.set(key, std::move(value));
  ThreadPool pool(ThreadPool::default_num_threads());
  std::vector<uint8_t> buf;  // one chunk of one tensor, reused
  for (const TensorPlan& t : plan_tensors(shape, vocab.num_tokens, spec.dtype)) {
    w.add_tensor(t.name, t.type, t.ne, [&, t](GgufDataSink& out) { stream_tensor(t, spec.seed, pool, buf, out); });
  }
  w.write(path);
}

}  // namespace pagellm
