// libFuzzer target for the GGUF reader (src/format/gguf.cc).
//
// Contract under test: GgufFile::parse on arbitrary bytes either succeeds or throws
// pagellm::Error naming the file. Anything else -- a crash, an ASan/UBSan report, another exception type, a hang,
// an outsized allocation -- is a bug. On success the target also:
//   * walks every metadata value (nested arrays included) and calls every typed accessor on every
//     key plus a few well-known keys, accepting pagellm::Error from type mismatches;
//   * reads the first and last byte of every tensor's data, so ASan flags a data pointer or size
//     that reaches outside the input buffer, and requires that no two tensors share bytes;
//   * re-serialises metadata and tensors with GgufWriter, re-parses the result and requires it to
//     be equal to the first parse (a failure here traps).
//
// Build: see tests/fuzz/README.md (cmake -DPAGELLM_FUZZ=ON, target gguf_fuzzer).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"

namespace {

using pagellm::Error;
using pagellm::GgufArray;
using pagellm::GgufFile;
using pagellm::GgufValue;
using pagellm::GgufValueType;

volatile uint64_t g_sink = 0;

[[noreturn]] void bug(const std::string& what) {
  std::fprintf(stderr, "gguf_fuzzer: %s\n", what.c_str());
  std::fflush(stderr);
  __builtin_trap();
}

// Touches every byte of every value so that a dangling or short string is noticed by ASan.
void walk_value(const GgufValue& v, uint64_t depth) {
  if (depth > 16) bug("metadata nesting deeper than the parser allows");
  g_sink = g_sink + static_cast<uint64_t>(v.type);
  if (const auto* s = std::get_if<std::string>(&v.v)) {
    for (char c : *s) g_sink = g_sink + static_cast<uint8_t>(c);
  } else if (const auto* a = std::get_if<GgufArray>(&v.v)) {
    for (const GgufValue& item : a->items) {
      if (item.type != a->elem_type) bug("array element type differs from the array's element type");
      walk_value(item, depth + 1);
    }
  } else if (const auto* u = std::get_if<uint64_t>(&v.v)) {
    g_sink = g_sink + *u;
  } else if (const auto* i = std::get_if<int64_t>(&v.v)) {
    g_sink = g_sink + static_cast<uint64_t>(*i);
  } else if (const auto* b = std::get_if<bool>(&v.v)) {
    g_sink = g_sink + (*b ? 1 : 0);
  } else if (const auto* d = std::get_if<double>(&v.v)) {
    uint64_t bits;
    std::memcpy(&bits, d, sizeof bits);
    g_sink = g_sink + bits;
  }
}

// Calls one accessor; only pagellm::Error may escape it.
template <typename F>
void try_accessor(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}

void exercise_accessors(const GgufFile& f, const std::string& key) {
  try_accessor([&] { g_sink = g_sink + f.get_string_opt(key).value_or("").size(); });
  try_accessor([&] { g_sink = g_sink + f.get_string(key).size(); });
  try_accessor([&] { g_sink = g_sink + f.get_u64_opt(key).value_or(0); });
  try_accessor([&] { g_sink = g_sink + f.get_u64(key); });
  try_accessor([&] { g_sink = g_sink + static_cast<uint64_t>(f.get_i64(key)); });
  try_accessor([&] { g_sink = g_sink + (f.get_f32(key, 1.0f) > 0.0f ? 1 : 0); });
  try_accessor([&] { g_sink = g_sink + (f.get_bool(key, false) ? 1 : 0); });
  try_accessor([&] { g_sink = g_sink + f.get_string_array(key).size(); });
  try_accessor([&] { g_sink = g_sink + f.get_f32_array(key).size(); });
  try_accessor([&] { g_sink = g_sink + f.get_int_array(key).size(); });
}

bool same_value(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type || a.v.index() != b.v.index()) return false;
  if (const auto* x = std::get_if<double>(&a.v)) {
    // Bitwise, so NaNs (and their payloads) and signed zeros round-trip exactly.
    return std::memcmp(x, &std::get<double>(b.v), sizeof(double)) == 0;
  }
  if (const auto* x = std::get_if<GgufArray>(&a.v)) {
    const auto& y = std::get<GgufArray>(b.v);
    if (x->elem_type != y.elem_type || x->items.size() != y.items.size()) return false;
    for (size_t i = 0; i < x->items.size(); ++i) {
      if (!same_value(x->items[i], y.items[i])) return false;
    }
    return true;
  }
  if (const auto* x = std::get_if<std::string>(&a.v)) return *x == std::get<std::string>(b.v);
  if (const auto* x = std::get_if<uint64_t>(&a.v)) return *x == std::get<uint64_t>(b.v);
  if (const auto* x = std::get_if<int64_t>(&a.v)) return *x == std::get<int64_t>(b.v);
  return std::get<bool>(a.v) == std::get<bool>(b.v);
}

// general.alignment is special in the writer (it becomes the writer's alignment, is written as a
// uint32 first, and is omitted when it equals the default), so it is compared via alignment().
std::vector<const std::pair<std::string, GgufValue>*> kv_without_alignment(const GgufFile& f) {
  std::vector<const std::pair<std::string, GgufValue>*> out;
  for (const auto& kv : f.metadata()) {
    if (kv.first != "general.alignment") out.push_back(&kv);
  }
  return out;
}

void round_trip(const GgufFile& f) {
  pagellm::GgufWriter w(f.alignment());
  for (const auto& [key, value] : f.metadata()) {
    if (key != "general.alignment") w.set(key, value);
  }
  for (const pagellm::GgufTensorInfo& t : f.tensors()) {
    w.add_tensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.size_bytes));
  }
  const std::vector<uint8_t> bytes = w.to_bytes();
  std::unique_ptr<GgufFile> g;
  try {
    g = GgufFile::parse(std::span<const uint8_t>(bytes.data(), bytes.size()), "round-trip");
  } catch (const Error& e) {
    bug(std::string("re-parsing the writer's output failed: ") + e.what());
  }
  if (g->version() != 3) bug("writer did not produce version 3");
  if (g->alignment() != f.alignment()) bug("alignment changed in the round trip");
  const auto a = kv_without_alignment(f);
  const auto b = kv_without_alignment(*g);
  if (a.size() != b.size()) bug("metadata count changed in the round trip");
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i]->first != b[i]->first) bug("metadata key changed in the round trip: " + a[i]->first);
    if (!same_value(a[i]->second, b[i]->second)) bug("metadata value changed in the round trip: " + a[i]->first);
  }
  if (f.tensors().size() != g->tensors().size()) bug("tensor count changed in the round trip");
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& x = f.tensors()[i];
    const auto& y = g->tensors()[i];
    if (x.name != y.name || x.ne != y.ne || x.type != y.type || x.size_bytes != y.size_bytes) {
      bug("tensor info changed in the round trip: " + x.name);
    }
    if (y.offset % g->alignment() != 0) bug("writer produced a misaligned tensor offset");
    if (x.size_bytes != 0 && std::memcmp(x.data, y.data, x.size_bytes) != 0) {
      bug("tensor data changed in the round trip: " + x.name);
    }
  }
}

void check_file(const GgufFile& f, size_t size) {
  if (f.version() != 2 && f.version() != 3) bug("accepted an unsupported version");
  const uint64_t al = f.alignment();
  if (al == 0 || (al & (al - 1)) != 0) bug("accepted a non-power-of-two alignment");

  for (const auto& [key, value] : f.metadata()) {
    walk_value(value, 0);
    if (f.find(key) != &value) bug("find() does not return the stored value for key " + key);
    exercise_accessors(f, key);
  }
  static const char* const kWellKnown[] = {
      "general.architecture",
      "general.name",
      "general.alignment",
      "general.file_type",
      "llama.block_count",
      "llama.context_length",
      "llama.embedding_length",
      "llama.attention.head_count",
      "llama.attention.head_count_kv",
      "llama.attention.layer_norm_rms_epsilon",
      "llama.rope.freq_base",
      "tokenizer.ggml.model",
      "tokenizer.ggml.tokens",
      "tokenizer.ggml.scores",
      "tokenizer.ggml.token_type",
      "tokenizer.ggml.merges",
      "tokenizer.ggml.bos_token_id",
      "tokenizer.ggml.add_bos_token",
      "no.such.key",
  };
  for (const char* key : kWellKnown) exercise_accessors(f, key);

  for (const pagellm::GgufTensorInfo& t : f.tensors()) {
    if (t.ne.empty() || t.ne.size() > 4) bug("accepted a tensor with bad rank: " + t.name);
    for (int64_t d : t.ne) {
      if (d <= 0) bug("accepted a non-positive dimension: " + t.name);
    }
    g_sink = g_sink + static_cast<uint64_t>(t.num_elements());
    if (t.offset % al != 0) bug("accepted a misaligned tensor offset: " + t.name);
    if (f.data_offset() + t.offset + t.size_bytes > size) bug("tensor extends past the input: " + t.name);
    if (t.size_bytes > 0) {
      g_sink = g_sink + t.data[0];
      g_sink = g_sink + t.data[t.size_bytes - 1];
    }
    if (f.find_tensor(t.name) != &t) bug("find_tensor() does not return the stored tensor " + t.name);
    try_accessor([&] { g_sink = g_sink + f.tensor(t.name).size_bytes; });
  }
  try_accessor([&] { g_sink = g_sink + f.tensor("no.such.tensor").size_bytes; });
  std::vector<const pagellm::GgufTensorInfo*> by_offset;
  for (const pagellm::GgufTensorInfo& t : f.tensors()) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const pagellm::GgufTensorInfo* a, const pagellm::GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->offset < by_offset[i - 1]->offset + by_offset[i - 1]->size_bytes) {
      bug("accepted overlapping tensors: " + by_offset[i - 1]->name + ", " + by_offset[i]->name);
    }
  }

  round_trip(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<GgufFile> f;
  try {
    f = GgufFile::parse(std::span<const uint8_t>(data, size), "fuzz-input");
  } catch (const Error& e) {
    // Malformed input rejected cleanly: the expected outcome. The documented contract (gguf.h) is
    // that the message names the file, so users can tell which model is broken.
    if (std::strstr(e.what(), "fuzz-input") == nullptr)
      bug(std::string("error message does not name the file: ") + e.what());
    return 0;
  }
  if (!f) bug("parse returned null");
  check_file(*f, size);
  return 0;
}
