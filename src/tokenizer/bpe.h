// Byte-level BPE (GPT-2 style) with ranked merges, as llama.cpp's llm_tokenizer_bpe
// (src/llama-vocab.cpp) and HF tokenizers' BPE model; Sennrich et al. 2016 (arXiv:1508.07909),
// byte-level variant from Radford et al. 2019 (GPT-2).
//
// Input words come from the pre-tokenizer and are already mapped through the GPT-2
// byte-to-unicode alphabet. Each word starts as one symbol per UTF-8 character; the adjacent
// pair with the lowest merge rank (ties: leftmost) is merged until no pair has a rank. A final
// symbol that is not a token is emitted as its single-byte tokens when they exist (and dropped
// otherwise), as llama.cpp does.
//
// Merges are keyed by the pair of token ids (left, right) -> (rank, merged id): a merge whose
// parts or result are not vocabulary tokens can never apply and is dropped at load.
// Cost per word: O(n log n) in characters.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace pagellm {

class BpeTokenizer {
 public:
  // `merges` are "left right" strings, rank = index (tokenizer.ggml.merges); split at the
  // first space after the first byte, as llama.cpp, or when that split is no merge of
  // vocabulary tokens, at the first later space that is (tokens that hold spaces).
  // `vocab` must outlive this object.
  // Throws pagellm::Error naming the merge when it has no separating space.
  BpeTokenizer(const Vocab& vocab, const std::vector<std::string>& merges, bool ignore_merges);

  // Appends the ids of one pre-tokenized, byte-encoded word to `out`. byte_tokens: when given
  // (SentencePiece-style BPE with byte fallback), a final symbol that is not a token is emitted
  // as byte_tokens[b] for each of its bytes (ids < 0 dropped) instead.
  void encode_word(std::string_view word, std::vector<int32_t>* out,
                   const std::array<int32_t, 256>* byte_tokens = nullptr) const;

  int32_t num_merges() const { return static_cast<int32_t>(ranks_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // token id of left+right
  };
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  const Vocab& vocab_;
  bool ignore_merges_;
  std::unordered_map<uint64_t, Merge> ranks_;
};

}  // namespace pagellm
