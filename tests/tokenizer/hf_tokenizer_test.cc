// tokenizer.json (Hugging Face BPE with byte fallback, ranked merges) against the GGUF
// vocabulary of the same model (SentencePiece merging over scores = -id): two algorithms that
// must give the same ids on real text (../shared/testdata/tinystories-656k/README.md).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "format/hf_dir.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagellm {
namespace {

TEST(HfTokenizer, TokenizesTheValidationSampleAsTheGgufVocabulary) {
  auto hf_file = open_model_file(test::testdata("tinystories-656k/hf"));
  auto gguf_file = GgufFile::open(test::testdata("tinystories-656k/TinyStories-656K-f32.gguf"));
  auto hf = Tokenizer::from_gguf(*hf_file);
  auto gguf = Tokenizer::from_gguf(*gguf_file);
  std::ifstream in(test::testdata("tinystories/valid-sample.txt"));
  ASSERT_TRUE(in);
  std::stringstream all;
  all << in.rdbuf();
  std::istringstream lines(all.str());
  std::string line;
  int n = 0;
  size_t tokens = 0;
  while (std::getline(lines, line)) {
    const auto a = hf->encode(line, true, true), b = gguf->encode(line, true, true);
    ASSERT_EQ(a, b) << "line " << n << ": " << line;
    EXPECT_EQ(hf->decode(a, true), gguf->decode(b, true));
    tokens += a.size();
    ++n;
  }
  EXPECT_GT(n, 100);
  EXPECT_GT(tokens, 5000u);
  EXPECT_EQ(hf->encode(all.str(), true, true), gguf->encode(all.str(), true, true));
}

}  // namespace
}  // namespace pagellm
