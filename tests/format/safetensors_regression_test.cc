// Replays the safetensors fuzzing inputs kept in the source tree through SafetensorsFile::parse:
//   tests/fuzz/regressions/safetensors/  hand-made hostile inputs (bad-*, good-*) and inputs
//                                        saved from fuzzer crashes (fuzz-<sha1>)
//   tests/fuzz/corpus/safetensors/       the fuzzer's seed corpus (seed-*)
// written by tests/fuzz/make_safetensors_inputs.py. The only acceptable outcomes are a parse or a
// pagellm::Error naming the file; bad-* must be rejected, good-* and seed-* must parse. Headers
// nested a million levels deep, too big to keep in the tree, are built here.
#include <gtest/gtest.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/safetensors.h"
#include "test_util.h"

namespace pagellm {
namespace {

namespace fs = std::filesystem;

using test::files_in;
using test::read_bytes;

enum class Outcome { kParsed, kError, kOther };

// Parses `bytes` as `name`; on success checks every tensor lies inside the buffer.
Outcome replay(const std::vector<uint8_t>& bytes, const std::string& name, std::string* detail) {
  try {
    auto f = SafetensorsFile::parse(std::span<const uint8_t>(bytes.data(), bytes.size()), name);
    for (const SafetensorsTensor& t : f->tensors()) {
      EXPECT_LE(t.begin, t.end) << t.name;
      EXPECT_EQ(t.end - t.begin,
                static_cast<uint64_t>(t.num_elements()) * static_cast<uint64_t>(SafetensorsFile::dtype_bytes(t.dtype)))
          << t.name;
      EXPECT_GE(t.data, bytes.data()) << t.name;
      EXPECT_LE(t.data + (t.end - t.begin), bytes.data() + bytes.size()) << t.name;
      EXPECT_EQ(f->find(t.name), &t) << t.name;
    }
    return Outcome::kParsed;
  } catch (const Error& e) {
    *detail = e.what();
    return Outcome::kError;
  } catch (const std::exception& e) {
    *detail = std::string("parse threw a non-pagellm::Error exception: ") + e.what();
  } catch (...) {
    *detail = "parse threw a non-std::exception";
  }
  return Outcome::kOther;
}

// Why each hand-made bad-* input must be refused: a part of the message that names its defect.
// An input refused for another reason (an earlier check catching it by accident) fails, and so
// does a bad-* file without an entry here.
const std::map<std::string, std::string>& bad_reasons() {
  static const std::map<std::string, std::string> reasons = {
      {"bad-empty-file", "too small"},
      {"bad-seven-bytes", "too small"},
      {"bad-header-length-past-end", "runs past the end of the file"},
      {"bad-header-length-u64-max", "exceeds the 100 MiB limit"},
      {"bad-header-length-over-100mib", "exceeds the 100 MiB limit"},
      {"bad-header-not-json", "not valid JSON"},
      {"bad-header-invalid-utf8", "not valid JSON"},
      {"bad-header-is-array", "not a JSON object"},
      {"bad-header-is-string", "not a JSON object"},
      {"bad-header-zero-length", "not valid JSON"},
      {"bad-entry-not-object", "tensor 'w': entry is not an object"},
      {"bad-dtype-missing", "'dtype' is missing"},
      {"bad-dtype-unknown", "\"Q4_K\" is not a safetensors dtype"},
      {"bad-dtype-lowercase", "\"f32\" is not a safetensors dtype"},
      {"bad-dtype-number", "'dtype' is missing or not a string"},
      {"bad-shape-missing", "'shape' is missing"},
      {"bad-shape-negative", "'shape' entry -2 is not an integer"},
      {"bad-shape-float", "'shape' entry 2.0 is not an integer"},
      {"bad-shape-string", "'shape' entry \"2\" is not an integer"},
      {"bad-shape-nine-dims", "'shape' has 9 dimensions"},
      {"bad-shape-dim-2pow41", "'shape' entry 2199023255552 is not an integer in [0, 2^40]"},
      {"bad-shape-dim-u64-max", "'shape' entry 18446744073709551615 is not an integer"},
      {"bad-shape-product-overflow", "more than 2^50 elements"},
      {"bad-shape-nested-deep", "'shape' entry an array is not an integer"},
      {"bad-offsets-missing", "'data_offsets' is missing"},
      {"bad-offsets-one-number", "not two non-negative integers"},
      {"bad-offsets-negative", "not two non-negative integers"},
      {"bad-offsets-reversed", "'data_offsets' [8, 0] is outside the data section"},
      {"bad-offsets-past-end", "'data_offsets' [4, 12] is outside the data section"},
      {"bad-offsets-u64-max", "is outside the data section"},
      {"bad-offsets-span-too-short", "span 4 bytes, but shape [2] x F32 needs 8"},
      {"bad-offsets-span-too-long", "span 8 bytes, but shape [1] x F32 needs 4"},
      {"bad-offsets-overlap", "overlap"},
      {"bad-offsets-same-range", "overlap"},
      {"bad-metadata-not-object", "__metadata__ is not an object"},
      {"bad-metadata-value-not-string", "__metadata__.format is not a string"},
      {"bad-metadata-value-nested-deep", "__metadata__.k is not a string"},
  };
  return reasons;
}

void replay_dir(const std::string& rel, size_t min_files) {
  const std::vector<fs::path> files = files_in(rel);
  ASSERT_GE(files.size(), min_files) << "missing inputs in " << rel;
  for (const fs::path& p : files) {
    SCOPED_TRACE(p.string());
    const std::string name = p.filename().string();
    std::string detail;
    const Outcome o = replay(read_bytes(p), name, &detail);
    ASSERT_NE(o, Outcome::kOther) << detail;
    if (name.rfind("bad-", 0) == 0) {
      EXPECT_EQ(o, Outcome::kError) << "accepted a malformed file";
      auto reason = bad_reasons().find(name);
      if (reason == bad_reasons().end()) {
        ADD_FAILURE() << "no expected reason for " << name << " in bad_reasons()";
      } else {
        EXPECT_NE(detail.find(reason->second), std::string::npos) << "refused for another reason: " << detail;
      }
    }
    if (name.rfind("good-", 0) == 0 || name.rfind("seed-", 0) == 0) {
      EXPECT_EQ(o, Outcome::kParsed) << "rejected a valid file: " << detail;
    }
    if (o == Outcome::kError) {
      EXPECT_NE(detail.find(name), std::string::npos) << detail;
    }
  }
}

std::vector<uint8_t> with_header(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(header.begin(), header.end(), out.begin() + 8);
  return out;
}

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

TEST(SafetensorsRegression, HostileInputsParseOrThrowError) { replay_dir("tests/fuzz/regressions/safetensors", 30); }

TEST(SafetensorsRegression, SeedCorpusParses) { replay_dir("tests/fuzz/corpus/safetensors", 5); }

// A million levels of nesting in a checked field, in an ignored field and in the metadata: an
// error message that printed the value, or a recursive walk, would overflow the stack.
TEST(SafetensorsRegression, MillionDeepNestingIsRejectedOrIgnoredWithoutRecursion) {
  const size_t depth = 1000000;
  const std::string deep_array = repeat("[", depth) + repeat("]", depth);
  const std::string deep_object = repeat("{\"a\":", depth) + "1" + repeat("}", depth);
  struct Case {
    std::string header;
    Outcome want;
  };
  const Case cases[] = {
      {R"({"w":{"dtype":"F32","shape":)" + deep_array + R"(,"data_offsets":[0,8]}})", Outcome::kError},
      {R"({"w":{"dtype":"F32","shape":[)" + deep_object + R"(],"data_offsets":[0,8]}})", Outcome::kError},
      {R"({"w":{"dtype":)" + deep_array + R"(,"shape":[2],"data_offsets":[0,8]}})", Outcome::kError},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":)" + deep_array + "}}", Outcome::kError},
      {R"({"__metadata__":{"k":)" + deep_object + R"(},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       Outcome::kError},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":)" + deep_array + "}}", Outcome::kParsed},
  };
  for (const Case& c : cases) {
    std::string detail;
    const Outcome o = replay(with_header(c.header, 8), "deep.safetensors", &detail);
    EXPECT_EQ(o, c.want) << detail.substr(0, 200);
    if (o == Outcome::kError) {
      EXPECT_NE(detail.find("deep.safetensors"), std::string::npos) << detail.substr(0, 200);
      EXPECT_LT(detail.size(), 400u) << "the message should not carry the hostile value";
    }
  }
}

}  // namespace
}  // namespace pagellm
