// BpeTokenizer on hand-made vocabularies: merge ranks and the "left right" split of merges whose
// tokens hold spaces.
#include "tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace pagellm {
namespace {

std::vector<int32_t> encode(const BpeTokenizer& bpe, std::string_view word) {
  std::vector<int32_t> out;
  bpe.encode_word(word, &out);
  return out;
}

// tokenizer.json's [["a ", "b"], ["a b", "c"]] reach the GGUF key as "a  b" and "a b c". The
// first-space split ("a" + " b", "a" + "b c") names no merge; the later space does.
TEST(Bpe, MergeOfTokensHoldingSpacesSplitsAtTheSpaceThatNamesTokens) {
  const std::vector<std::string> texts = {"a", " ", "b", "c", "a ", "a b", "a bc", "b c"};
  const Vocab vocab(texts, {}, std::vector<uint32_t>(texts.size(), token_attr::kNormal));
  const BpeTokenizer bpe(vocab, {"a  ", "a  b", "a b c"}, false);
  EXPECT_EQ(bpe.num_merges(), 3);
  EXPECT_EQ(encode(bpe, "a bc"), (std::vector<int32_t>{6}));
  EXPECT_EQ(encode(bpe, "a b"), (std::vector<int32_t>{5}));
  // Without the later merges the word stays in pieces, so the test above could fail.
  const BpeTokenizer first_only(vocab, {"a  "}, false);
  EXPECT_EQ(encode(first_only, "a bc"), (std::vector<int32_t>{4, 2, 3}));
}

// Where the first space already splits into a real merge, that split wins (llama.cpp's), even
// when a later space would too.
TEST(Bpe, FirstSpaceSplitWinsWhenItIsAMerge) {
  const std::vector<std::string> texts = {"x", " ", "y", " y", "x ", "x y"};
  const Vocab vocab(texts, {}, std::vector<uint32_t>(texts.size(), token_attr::kNormal));
  // "x  y" is "x" + " y" (first space) or "x " + "y" (second): both join to "x y".
  const BpeTokenizer via_space_y(vocab, {"  y", "x  y"}, false);  // " " + "y" -> " y", then "x" + " y"
  EXPECT_EQ(encode(via_space_y, "x y"), (std::vector<int32_t>{5}));
  const BpeTokenizer via_x_space(vocab, {"x  ", "x  y"}, false);  // "x" + " " -> "x ", and no "x " + "y"
  EXPECT_EQ(encode(via_x_space, "x y"), (std::vector<int32_t>{4, 2}));
}

TEST(Bpe, MergeWithoutASpaceIsNamed) {
  const std::vector<std::string> texts = {"a", "b", "ab"};
  const Vocab vocab(texts, {}, std::vector<uint32_t>(texts.size(), token_attr::kNormal));
  try {
    BpeTokenizer bpe(vocab, {"a b", "ab"}, false);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.merges[1] = 'ab'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pagellm
