// Writes the small, valid GGUF seed files in tests/fuzz/corpus/gguf/ with GgufWriter.
// Not part of the CMake build; see tests/fuzz/README.md for the one-line compile command.
//   make_gguf_seeds <output-dir>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"

using namespace pagellm;

namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

void save(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    throw Error("cannot write " + path);
  }
  std::fclose(f);
  // Every seed must parse; a seed that does not is a generator bug.
  GgufFile::parse(std::span<const uint8_t>(bytes.data(), bytes.size()), path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output-dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];

  {  // Smallest valid file: header only.
    GgufWriter w;
    save(dir, "seed-empty.gguf", w.to_bytes());
  }
  {  // One of every scalar type, arrays of each, nested arrays, non-default alignment.
    GgufWriter w(64);
    w.set("general.architecture", GgufValue::str("llama"));
    w.set("u8", {GgufValueType::UINT8, uint64_t{200}});
    w.set("i8", {GgufValueType::INT8, int64_t{-100}});
    w.set("u16", {GgufValueType::UINT16, uint64_t{60000}});
    w.set("i16", {GgufValueType::INT16, int64_t{-30000}});
    w.set("u32", GgufValue::u32(4000000000u));
    w.set("i32", GgufValue::i32(-2000000000));
    w.set("u64", GgufValue::u64(std::numeric_limits<uint64_t>::max()));
    w.set("i64", {GgufValueType::INT64, std::numeric_limits<int64_t>::min()});
    w.set("f32", GgufValue::f32(-0.0f));
    w.set("f32.nan", GgufValue::f32(std::numeric_limits<float>::quiet_NaN()));
    w.set("f64", {GgufValueType::FLOAT64, 1e300});
    w.set("bool", GgufValue::boolean(true));
    w.set("str.empty", GgufValue::str(""));
    w.set("str.utf8", GgufValue::str("h\xc3\xa9llo \xe2\x96\x81world"));
    w.set("arr.u8", GgufValue::array(GgufValueType::UINT8,
                                     {{GgufValueType::UINT8, uint64_t{1}}, {GgufValueType::UINT8, uint64_t{255}}}));
    w.set("arr.i64", GgufValue::array(GgufValueType::INT64, {{GgufValueType::INT64, int64_t{-1}}}));
    w.set("arr.f64", GgufValue::array(GgufValueType::FLOAT64, {{GgufValueType::FLOAT64, 0.5}}));
    w.set("arr.bool", GgufValue::array(GgufValueType::BOOL, {GgufValue::boolean(false), GgufValue::boolean(true)}));
    w.set("arr.empty", GgufValue::array(GgufValueType::STRING, {}));
    w.set("arr.nested",
          GgufValue::array(GgufValueType::ARRAY,
                           {GgufValue::array(GgufValueType::UINT32, {GgufValue::u32(1), GgufValue::u32(2)}),
                            GgufValue::array(GgufValueType::UINT32, {}),
                            GgufValue::array(GgufValueType::UINT32, {GgufValue::u32(3)})}));
    w.set("arr.nested3",
          GgufValue::array(GgufValueType::ARRAY,
                           {GgufValue::array(GgufValueType::ARRAY,
                                             {GgufValue::array(GgufValueType::STRING, {GgufValue::str("x")})})}));
    w.add_tensor("t.f32", GgmlType::F32, {3}, pattern(12, 1));
    save(dir, "seed-all-types.gguf", w.to_bytes());
  }
  {  // A miniature llama: tokenizer arrays, hyperparameters and one tensor of each common type.
    GgufWriter w;
    w.set("general.architecture", GgufValue::str("llama"));
    w.set("general.name", GgufValue::str("tiny"));
    w.set("llama.block_count", GgufValue::u32(1));
    w.set("llama.context_length", GgufValue::u32(64));
    w.set("llama.embedding_length", GgufValue::u32(32));
    w.set("llama.attention.head_count", GgufValue::u32(2));
    w.set("llama.attention.head_count_kv", GgufValue::u32(1));
    w.set("llama.attention.layer_norm_rms_epsilon", GgufValue::f32(1e-5f));
    w.set("tokenizer.ggml.model", GgufValue::str("llama"));
    std::vector<GgufValue> tokens, scores, types;
    const char* toks[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b", "<0x0A>", "\xe2\x96\x81the"};
    for (int i = 0; i < 8; ++i) {
      tokens.push_back(GgufValue::str(toks[i]));
      scores.push_back(GgufValue::f32(-static_cast<float>(i)));
      types.push_back(GgufValue::i32(i < 3 ? 3 : (i == 6 ? 6 : 1)));
    }
    w.set("tokenizer.ggml.tokens", GgufValue::array(GgufValueType::STRING, tokens));
    w.set("tokenizer.ggml.scores", GgufValue::array(GgufValueType::FLOAT32, scores));
    w.set("tokenizer.ggml.token_type", GgufValue::array(GgufValueType::INT32, types));
    w.set("tokenizer.ggml.merges", GgufValue::array(GgufValueType::STRING, {GgufValue::str("a b")}));
    w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(1));
    w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
    w.add_tensor("token_embd.weight", GgmlType::F16, {32, 8}, pattern(32 * 8 * 2, 3));
    w.add_tensor("blk.0.attn_norm.weight", GgmlType::F32, {32}, pattern(32 * 4, 5));
    w.add_tensor("blk.0.attn_q.weight", GgmlType::Q4_0, {32, 32}, pattern(32 * 18, 9));
    w.add_tensor("blk.0.attn_k.weight", GgmlType::Q8_0, {32, 16}, pattern(16 * 34, 11));
    w.add_tensor("blk.0.ffn_down.weight", GgmlType::BF16, {4, 2, 2, 2}, pattern(32 * 2, 13));
    w.add_tensor("output.weight", GgmlType::Q4_K, {256, 1}, pattern(144, 17));
    save(dir, "seed-tiny-llama.gguf", w.to_bytes());
  }
  {  // Alignment 1: tensors packed back to back; and a version-2 header.
    GgufWriter w(1);
    w.set("general.architecture", GgufValue::str("gpt2"));
    w.add_tensor("a", GgmlType::I8, {3}, pattern(3, 1));
    w.add_tensor("b", GgmlType::I16, {1, 1, 1}, pattern(2, 2));
    w.add_tensor("c", GgmlType::F64, {1}, pattern(8, 3));
    save(dir, "seed-align1.gguf", w.to_bytes());
    std::vector<uint8_t> v2 = w.to_bytes();
    v2[4] = 2;  // the v2 and v3 layouts are identical for little-endian files
    save(dir, "seed-align1-v2.gguf", v2);
  }
  return 0;
}
