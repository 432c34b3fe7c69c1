// SentencePiece-style (SPM) BPE over a scored vocabulary, as llama.cpp's llm_tokenizer_spm
// (src/llama-vocab.cpp, originally llama.cpp commit 074bea2e); Kudo & Richardson 2018,
// "SentencePiece" (arXiv:1808.06226), BPE mode.
//
// The text is split into UTF-8 characters; every adjacent pair whose concatenation is a token
// is a candidate, and the candidate whose token has the highest score is merged first (ties:
// the leftmost). Merging repeats until no candidate is left. A final piece that is not a token
// falls back to one <0xXX> byte token per byte.
//
// Cost: O(n log n) in the number of characters (a binary heap over bigrams; stale entries are
// skipped when popped).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace pagellm {

class SpmTokenizer {
 public:
  // `vocab` must outlive this object.
  explicit SpmTokenizer(const Vocab& vocab, int32_t unk_id);

  // Appends the ids of `text` to `out`. `text` is already normalized: spaces escaped to
  // U+2581 and the dummy prefix added by the caller.
  void encode(std::string_view text, std::vector<int32_t>* out) const;

  // Token id of byte `b`: "<0xXX>", else the one-byte token, else unk (-1 if none).
  int32_t byte_token(uint8_t b) const { return byte_tokens_[b]; }
  const std::array<int32_t, 256>& byte_tokens() const { return byte_tokens_; }

 private:
  const Vocab& vocab_;
  std::array<int32_t, 256> byte_tokens_;
};

}  // namespace pagellm
