// Replays the GGUF fuzzing inputs kept in the source tree through GgufFile::parse:
//   tests/fuzz/regressions/gguf/  hand-made hostile inputs and inputs saved from fuzzer crashes (fuzz-<sha1>)
//   tests/fuzz/corpus/gguf/       the fuzzer's seed corpus
// The only acceptable outcomes are a successful parse or a pagellm::Error. Files named bad-*
// must be rejected, files named good-* and seed-* must parse (see
// tests/fuzz/make_regression_inputs.py and tests/fuzz/make_gguf_seeds.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <variant>
#include <vector>

#include "core/error.h"
#include "format/gguf.h"
#include "test_util.h"

namespace pagellm {
namespace {

namespace fs = std::filesystem;

using test::files_in;
using test::read_bytes;

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// The accessors on a parsed file may also only throw pagellm::Error.
void exercise(const GgufFile& f) {
  std::vector<std::string> keys = {"general.architecture",
                                   "general.alignment",
                                   "llama.block_count",
                                   "tokenizer.ggml.tokens",
                                   "tokenizer.ggml.scores",
                                   "tokenizer.ggml.token_type",
                                   "llama.attention.layer_norm_rms_epsilon"};
  for (const auto& kv : f.metadata()) keys.push_back(kv.first);
  for (const std::string& k : keys) {
    try {
      (void)f.get_string_opt(k);
    } catch (const Error&) {
    }
    try {
      (void)f.get_u64_opt(k);
    } catch (const Error&) {
    }
    try {
      (void)f.get_i64(k);
    } catch (const Error&) {
    }
    try {
      (void)f.get_f32(k, 0.0f);
    } catch (const Error&) {
    }
    try {
      (void)f.get_bool(k, false);
    } catch (const Error&) {
    }
    try {
      (void)f.get_string_array(k);
    } catch (const Error&) {
    }
    try {
      (void)f.get_f32_array(k);
    } catch (const Error&) {
    }
    try {
      (void)f.get_int_array(k);
    } catch (const Error&) {
    }
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    EXPECT_LE(f.data_offset() + t.offset + t.size_bytes, f.file_size()) << t.name;
    EXPECT_GT(t.size_bytes, 0u) << t.name;
    EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
  }
}

enum class Outcome { kParsed, kError, kOther };

Outcome replay(const fs::path& p, std::string* detail) {
  const std::vector<uint8_t> bytes = read_bytes(p);
  const auto start = std::chrono::steady_clock::now();
  Outcome out = Outcome::kOther;
  try {
    auto f = GgufFile::parse(std::span<const uint8_t>(bytes.data(), bytes.size()), p.filename().string());
    try {
      exercise(*f);
      out = Outcome::kParsed;
    } catch (const std::exception& e) {
      *detail = std::string("accessor threw a non-pagellm::Error exception: ") + e.what();
    }
  } catch (const Error& e) {
    *detail = e.what();
    out = Outcome::kError;
  } catch (const std::exception& e) {
    *detail = std::string("parse threw a non-pagellm::Error exception: ") + e.what();
  } catch (...) {
    *detail = "parse threw a non-std::exception";
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(secs, 5.0) << p << " took " << secs << " s";
  return out;
}

void replay_dir(const std::string& rel, size_t min_files) {
  const std::vector<fs::path> files = files_in(rel);
  ASSERT_GE(files.size(), min_files) << "missing inputs in " << rel;
  for (const fs::path& p : files) {
    SCOPED_TRACE(p.string());
    const std::string name = p.filename().string();
    std::string detail;
    const Outcome o = replay(p, &detail);
    ASSERT_NE(o, Outcome::kOther) << detail;
    if (starts_with(name, "bad-")) {
      EXPECT_EQ(o, Outcome::kError) << "accepted a malformed file";
    }
    if (starts_with(name, "good-") || starts_with(name, "seed-")) {
      EXPECT_EQ(o, Outcome::kParsed) << "rejected a valid file: " << detail;
    }
    if (o == Outcome::kError) {
      // Messages name the input so users can tell which file is broken.
      EXPECT_NE(detail.find(name), std::string::npos) << detail;
    }
  }
}

TEST(GgufRegression, FuzzRegressionInputsParseOrThrowError) { replay_dir("tests/fuzz/regressions/gguf", 20); }

TEST(GgufRegression, SeedCorpusParsesOrThrowsError) { replay_dir("tests/fuzz/corpus/gguf", 5); }

// Every proper prefix of a valid file is either valid itself or rejected cleanly.
TEST(GgufRegression, EveryTruncationOfTheTinyLlamaSeed) {
  const fs::path p = fs::path(PAGELLM_SOURCE_DIR) / "tests/fuzz/corpus/gguf/seed-tiny-llama.gguf";
  const std::vector<uint8_t> bytes = read_bytes(p);
  ASSERT_FALSE(bytes.empty());
  for (size_t n = 0; n < bytes.size(); ++n) {
    // A heap copy of exactly n bytes, so ASan sees any read past the end.
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    try {
      auto f = GgufFile::parse(std::span<const uint8_t>(prefix.data(), prefix.size()), "prefix");
      exercise(*f);
    } catch (const Error&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "prefix of " << n << " bytes: unexpected exception " << e.what();
    }
  }
}

// A hostile file with one long key holding many strings: the parser used to rebuild an error
// context containing the key for every element (quadratic; 74 s for this 1.8 MB input).
TEST(GgufRegression, LongKeyWithManyStringsParsesInLinearTime) {
  std::vector<uint8_t> b;
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  const std::string key(1 << 20, 'k');
  const uint64_t n = 100000;
  b.insert(b.end(), {'G', 'G', 'U', 'F'});
  put(3, 4);  // version
  put(0, 8);  // tensors
  put(1, 8);  // kv
  put(key.size(), 8);
  b.insert(b.end(), key.begin(), key.end());
  put(static_cast<uint64_t>(GgufValueType::ARRAY), 4);
  put(static_cast<uint64_t>(GgufValueType::STRING), 4);
  put(n, 8);
  for (uint64_t i = 0; i < n; ++i) put(0, 8);  // empty strings
  const auto start = std::chrono::steady_clock::now();
  auto f = GgufFile::parse(std::span<const uint8_t>(b.data(), b.size()), "long-key");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(std::get<GgufArray>(f->find(key)->v).items.size(), n);
  EXPECT_LT(secs, 5.0);
}

}  // namespace
}  // namespace pagellm
