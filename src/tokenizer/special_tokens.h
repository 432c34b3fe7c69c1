// Splitting user text around special tokens before the model tokenizer runs, as llama.cpp's
// llama_vocab::impl::tokenizer_st_partition (src/llama-vocab.cpp).
//
// Candidates are the control, user-defined and unknown tokens, tried longest text first (ties:
// lower id). Each candidate in turn cuts every remaining text fragment at each of its
// occurrences. With parse_special == false only user-defined tokens are cut out (HF tokenizers
// also pre-splits added non-special tokens); control and unknown tokens stay plain text.
// A token with the rstrip (lstrip) attribute eats the ASCII whitespace to its right (left).
//
// Cost: one pass over the text with a byte trie finds which candidates occur at all; only
// those run the per-token cut, so vocabularies with thousands of special tokens stay cheap.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace pagellm {

// A piece of the input: either a special token or a byte range of the text.
struct Fragment {
  int32_t token;  // -1 for text
  size_t begin;   // text byte range [begin, end) when token == -1
  size_t end;
};

class SpecialTokenSplitter {
 public:
  // Collects the candidates from `vocab`'s attributes. `vocab` must outlive this object and its
  // attributes must not change afterwards.
  explicit SpecialTokenSplitter(const Vocab& vocab);

  std::vector<Fragment> split(std::string_view text, bool parse_special) const;

  // Candidate ids in matching priority order.
  const std::vector<int32_t>& candidates() const { return candidates_; }

 private:
  struct TrieNode {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                 // candidate ending here
  };
  int32_t child(int32_t node, uint8_t byte) const;

  const Vocab& vocab_;
  std::vector<int32_t> candidates_;
  std::vector<TrieNode> trie_;
};

}  // namespace pagellm
