// Regex pre-tokenizers for byte-level BPE vocabularies (tokenizer.ggml.pre).
//
// A pre-tokenizer is an ordered list of regexes, applied as llama.cpp's unicode_regex_split
// (src/unicode.cpp) does: the text starts as one piece; each regex in turn splits every piece
// into its matches and the unmatched runs between them (HF tokenizers' Split with behavior
// "Isolated"). A regex only sees its piece, so `$` and `(?!\S)` stop at the piece's end.
// The regexes are the ones llama.cpp uses per `tokenizer.ggml.pre` (src/llama-vocab.cpp,
// llm_tokenizer_bpe); they run through PCRE2 with PCRE2_UTF | PCRE2_UCP (JIT when available),
// so \p{L}, \p{N}, \p{P} and \s use PCRE2's Unicode tables instead of llama.cpp's own.
//
// Invalid UTF-8 is first replaced as llama.cpp's decoder does (U+FFFD per bad byte); the
// split pieces are returned as text, before the GPT-2 byte-to-unicode encoding.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pagellm {

// What `tokenizer.ggml.pre` selects besides the regexes (llama_vocab::impl::load).
struct PreTokenizerSpec {
  std::string name;                  // canonical llama.cpp name, e.g. "llama-bpe"
  std::vector<std::string> regexes;  // applied in order
  bool ignore_merges = false;        // a whole word found in the vocab is one token (Llama 3)
  bool clean_spaces = true;          // decode removes " ?" " !" " ." " ," etc. (HF clean_up_tokenization_spaces)
  bool add_bos = false;              // default for tokenizer.ggml.add_bos_token when absent
};

// Looks up a `tokenizer.ggml.pre` value (aliases as llama.cpp maps them; "" and "default" give
// the default GPT-2-style list). Returns false when the name is unknown.
bool find_pre_tokenizer_spec(std::string_view pre, PreTokenizerSpec* spec);

// Compiled regex list; immutable after construction and safe to share between threads.
class PreTokenizer {
 public:
  // Throws pagellm::Error naming the regex when PCRE2 rejects it.
  explicit PreTokenizer(const std::vector<std::string>& regexes);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Splits `text` (any bytes) into pieces whose concatenation is sanitize_utf8(text).
  std::vector<std::string> split(std::string_view text) const;

 private:
  struct Regex;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace pagellm
