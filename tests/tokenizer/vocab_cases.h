// llama.cpp's tokenizer test vectors (tests/test-tokenizer-0.cpp's files, ../shared/testdata/vocab):
// X.gguf.inp holds the inputs, each followed by "\n__ggml_vocab_test__\n"; line i of X.gguf.out
// the ids of input i (no BOS, no special-token parsing).
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace pagellm::test {

struct VocabCase {
  std::string input;
  std::vector<int32_t> expected;
};

// The cases of `base` (a path without ".inp" / ".out"), split as test-tokenizer-0 splits them.
inline std::vector<VocabCase> read_vocab_cases(const std::string& base) {
  const std::string raw = read_text(base + ".inp");
  EXPECT_FALSE(raw.empty()) << base << ".inp";
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream out(read_text(base + ".out"));
  std::vector<VocabCase> cases;
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    VocabCase c;
    if (i < inputs.size()) c.input = inputs[i];
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.expected.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(inputs.size(), cases.size()) << base;
  return cases;
}

}  // namespace pagellm::test
