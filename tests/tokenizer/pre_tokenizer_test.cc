// Llama 3 and Qwen2 pre-tokenizer splits (no vocab file of theirs is available). Expected
// pieces are derived by hand from the regexes (pre_tokenizer.cc):
//  llama3: (?:'s|'t|'re|'ve|'m|'ll|'d, any case) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,3}
//          |  ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
//  qwen2:  the same with \p{N} (one digit per piece).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/pre_tokenizer.h"

namespace pagellm {
namespace {

using Pieces = std::vector<std::string>;

Pieces split_with(const std::string& pre, const std::string& text) {
  PreTokenizerSpec spec;
  EXPECT_TRUE(find_pre_tokenizer_spec(pre, &spec)) << pre;
  PreTokenizer p(spec.regexes);
  return p.split(text);
}

TEST(PreTokenizerLlama3, Contractions) {
  EXPECT_EQ(split_with("llama-bpe", "I'm don't WE'LL it's"),
            (Pieces{"I", "'m", " don", "'t", " WE", "'LL", " it", "'s"}));
}

TEST(PreTokenizerLlama3, DigitsInGroupsOfThree) {
  EXPECT_EQ(split_with("llama-bpe", "1234567 abc"), (Pieces{"123", "456", "7", " abc"}));
  EXPECT_EQ(split_with("llama-bpe", "x12"), (Pieces{"x", "12"}));
}

TEST(PreTokenizerLlama3, Whitespace) {
  EXPECT_EQ(split_with("llama-bpe", "a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(split_with("llama-bpe", "a   "), (Pieces{"a", "   "}));
  EXPECT_EQ(split_with("llama-bpe", "\tb"), (Pieces{"\tb"}));  // [^\r\n\p{L}\p{N}]? takes the tab
}

TEST(PreTokenizerLlama3, Newlines) {
  EXPECT_EQ(split_with("llama-bpe", "x\n\ny"), (Pieces{"x", "\n\n", "y"}));
  EXPECT_EQ(split_with("llama-bpe", "  \n  x"), (Pieces{"  \n", " ", " x"}));
  EXPECT_EQ(split_with("llama-bpe", "abc.def\r\n"), (Pieces{"abc", ".def", "\r\n"}));
}

TEST(PreTokenizerLlama3, Punctuation) {
  EXPECT_EQ(split_with("llama-bpe", "hello!!! world"), (Pieces{"hello", "!!!", " world"}));
  EXPECT_EQ(split_with("llama-bpe", "? ;;\n\nx"), (Pieces{"?", " ;;\n\n", "x"}));
}

TEST(PreTokenizerLlama3, NonLatinLetters) {
  EXPECT_EQ(split_with("llama-bpe", "(\xD0\xBF\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82)"),  // "(привет)"
            (Pieces{"(\xD0\xBF\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82", ")"}));
  // "我想在apple工作1314151天": CJK and Latin letters form one \p{L}+ run.
  const std::string cjk =
      "\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8"
      "apple"
      "\xE5\xB7\xA5\xE4\xBD\x9C";
  const std::string day = "\xE5\xA4\xA9";
  EXPECT_EQ(split_with("llama-bpe", cjk + "1314151" + day), (Pieces{cjk, "131", "415", "1", day}));
  EXPECT_EQ(split_with("qwen2", cjk + "1314151" + day), (Pieces{cjk, "1", "3", "1", "4", "1", "5", "1", day}));
}

TEST(PreTokenizerQwen2, SingleDigitsAndContractions) {
  EXPECT_EQ(split_with("qwen2", "I'VE 42 apples\n"), (Pieces{"I", "'VE", " ", "4", "2", " apples", "\n"}));
}

TEST(PreTokenizer, InvalidUtf8BecomesReplacementChar) {
  // U+FFFD is a symbol (So): it is the optional non-letter prefix of "b".
  EXPECT_EQ(split_with("llama-bpe",
                       "a\xFF"
                       "b"),
            (Pieces{"a",
                    "\xEF\xBF\xBD"
                    "b"}));
}

TEST(PreTokenizer, ConcatenationIsTheInput) {
  const std::string text = "  Hello, y'all! How are you \xF0\x9F\x98\x81 ?\n\n\t 3333 \xC2\xA0x";
  for (const char* pre : {"default", "gpt-2", "llama-bpe", "qwen2", "deepseek-coder", "falcon", "starcoder"}) {
    std::string joined;
    for (const auto& piece : split_with(pre, text)) {
      EXPECT_FALSE(piece.empty()) << pre;
      joined += piece;
    }
    EXPECT_EQ(joined, text) << pre;
  }
}

TEST(PreTokenizer, AliasesAsLlamaCpp) {
  PreTokenizerSpec spec;
  for (const char* name : {"llama3", "llama-v3", "llama-bpe"}) {
    ASSERT_TRUE(find_pre_tokenizer_spec(name, &spec)) << name;
    EXPECT_EQ(spec.name, "llama-bpe");
    EXPECT_TRUE(spec.ignore_merges);
    EXPECT_TRUE(spec.add_bos);
  }
  ASSERT_TRUE(find_pre_tokenizer_spec("smaug-bpe", &spec));
  PreTokenizerSpec llama3;
  ASSERT_TRUE(find_pre_tokenizer_spec("llama3", &llama3));
  EXPECT_EQ(spec.regexes, llama3.regexes);
  ASSERT_TRUE(find_pre_tokenizer_spec("qwen2", &spec));
  EXPECT_FALSE(spec.clean_spaces);
  EXPECT_FALSE(find_pre_tokenizer_spec("no-such-pre", &spec));
}

TEST(PreTokenizer, BadRegexThrows) { EXPECT_THROW(PreTokenizer({"(unclosed"}), Error); }

}  // namespace
}  // namespace pagellm
