// llama.cpp's tokenizer golden vectors (tests/test-tokenizer-0.cpp): every string of
// X.gguf.inp tokenized with add_special = false, parse_special = false must give the ids of
// the same line of X.gguf.out. Data: /work/shared/testdata/vocab (see its README).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "tokenizer/tokenizer.h"
#include "vocab_cases.h"

namespace pagellm {
namespace {

using test::read_vocab_cases;
using test::VocabCase;

std::string vocab_path(const std::string& name) {
  return std::string(PAGELLM_TESTDATA_DIR) + "/vocab/ggml-vocab-" + name + ".gguf";
}

// decode(encode(x)) == x unless llama.cpp's decoder itself changes x: gpt2 vocabularies with
// clean_up_tokenization_spaces drop the space in " ?", " !", " .", " ,", " '".
bool round_trip_expected(const Tokenizer& tok, const std::string& s) {
  if (tok.is_spm() || !tok.pre_tokenizer_spec().clean_spaces) return true;
  for (const char* p : {" ?", " !", " .", " ,", " '"}) {
    if (s.find(p) != std::string::npos) return false;
  }
  return true;
}

class VocabVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabVectors, MatchesLlamaCpp) {
  const std::string path = vocab_path(GetParam());
  auto gguf = GgufFile::open(path);
  auto tok = Tokenizer::from_gguf(*gguf);
  const auto cases = read_vocab_cases(path);
  ASSERT_EQ(cases.size(), 46u);
  int passed = 0;
  for (const VocabCase& c : cases) {
    const std::vector<int32_t> got = tok->encode(c.input, /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(got, c.expected) << GetParam() << " input '" << c.input << "'";
    passed += got == c.expected;
    if (round_trip_expected(*tok, c.input)) {
      EXPECT_EQ(tok->decode(got), c.input) << GetParam() << " round trip of '" << c.input << "'";
    }
  }
  std::printf("[ vocab    ] %s: %d/%zu vectors pass\n", GetParam().c_str(), passed, cases.size());
}

INSTANTIATE_TEST_SUITE_P(AllVocabs, VocabVectors,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "deepseek-coder", "falcon", "mpt", "refact",
                                           "starcoder"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

// Vocabularies without vectors still load (baichuan: SPM without `pre`; gpt-neox: gpt2
// without `pre` -> llama.cpp's "default" regexes) and round-trip plain text.
TEST(VocabLoad, FilesWithoutVectorsLoad) {
  for (const std::string name : {"baichuan", "gpt-neox"}) {
    auto gguf = GgufFile::open(vocab_path(name));
    auto tok = Tokenizer::from_gguf(*gguf);
    const std::string text = "Hello world, 1234567 times\n\tand again";
    EXPECT_EQ(tok->decode(tok->encode(text, false, false)), text) << name;
  }
}

}  // namespace
}  // namespace pagellm
