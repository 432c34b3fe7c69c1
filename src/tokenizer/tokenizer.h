// Text <-> token ids from GGUF `tokenizer.ggml.*` metadata, matching llama.cpp's llama_vocab
// (src/llama-vocab.cpp at commit 34af94cd) on its golden vectors (tests/tokenizer/).
//
// Models:
//  - "llama": SentencePiece BPE over scores (spm.h), byte fallback <0xXX>, dummy space prefix
//    (tokenizer.ggml.add_space_prefix, default true) and spaces escaped to U+2581. With
//    tokenizer.ggml.merges (which llama.cpp's files never have, format/hf_dir.h's view of a
//    tokenizer.json always does) the escaped text is one word merged by rank (bpe.h), as Hugging
//    Face's BPE model with byte_fallback and no pre-tokenizer.
//  - "gpt2": byte-level BPE over ranked merges (bpe.h) after a regex pre-tokenizer chosen by
//    tokenizer.ggml.pre (pre_tokenizer.h).
// Special tokens (control / user-defined / unknown) are cut out of the text first
// (special_tokens.h). Anything else ("bert", "t5", ...) is rejected at load.
//
// A Tokenizer is immutable after loading; encode/decode are const and thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "tokenizer/pre_tokenizer.h"

namespace pagellm {

class GgufFile;
class Vocab;
class SpmTokenizer;
class BpeTokenizer;
class SpecialTokenSplitter;

// The tokenizer metadata as plain values (what from_gguf reads; tests build it directly).
struct TokenizerConfig {
  std::string model;                 // tokenizer.ggml.model: "llama" or "gpt2"
  std::optional<std::string> pre;    // tokenizer.ggml.pre (gpt2 only; absent -> "default")
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens [vocab_size]
  std::vector<float> scores;         // tokenizer.ggml.scores [vocab_size] or empty
  std::vector<int64_t> token_types;  // tokenizer.ggml.token_type [vocab_size] or empty (all normal)
  std::vector<std::string> merges;   // tokenizer.ggml.merges (gpt2: required; llama: optional, see above)
  std::optional<int64_t> bos_id, eos_id, eot_id, eom_id, unk_id, pad_id;
  std::optional<int64_t> fim_pad_id, fim_rep_id, fim_sep_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::string model_name;  // general.name (llama.cpp keys a Phi-3 quirk on it)
};

class Tokenizer {
 public:
  // Throws pagellm::Error naming the key and value when the metadata is missing or invalid,
  // including an unknown tokenizer.ggml.model or tokenizer.ggml.pre.
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& f);
  static std::unique_ptr<Tokenizer> from_config(TokenizerConfig config);
  ~Tokenizer();

  // add_special: prepend BOS / append EOS per add_bos() / add_eos().
  // parse_special: also turn control and unknown token texts into their ids (user-defined
  // tokens are always matched). As llama_tokenize.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // As llama_detokenize(remove_special = skip_special, unparse_special = false): control and
  // unknown tokens render as ""; with skip_special a leading BOS (if add_bos) and trailing EOS
  // (if add_eos) are dropped. SPM: when the first token is not a dropped BOS, one leading space
  // of its piece is removed (the dummy prefix). gpt2 vocabularies (except qwen2 and
  // deepseek-coder ...) clean " ?", " !", " .", " ,", " 's" ... as HF clean_up_tokenization_spaces.
  // Throws pagellm::Error on an id outside [0, vocab_size).
  std::string decode(std::span<const int32_t> ids, bool skip_special = true) const;

  // The inverse of encode(text, add_special, parse_special), for either parse_special:
  // decode_text(encode(t, s, p), s) == t whenever the vocabulary represents t (no unknown
  // token). Unlike decode (llama.cpp's detokenize, which gains a space after a dropped BOS and
  // loses special tokens): with add_special the BOS / EOS that encode adds are dropped; every
  // other control, user-defined or unknown token renders as its text; the SPM dummy-prefix space
  // is removed exactly where encode adds it (the start of the text and after each special token);
  // gpt2 spaces are never cleaned up. A text that spells a special token with parse_special
  // decodes to that spelling (the id is the same either way). Throws pagellm::Error on an id
  // outside [0, vocab_size).
  std::string decode_text(std::span<const int32_t> ids, bool add_special) const;

  // The same texts token by token: one string per id ("" for a dropped BOS / EOS), whose
  // concatenation is decode_text(ids, add_special), or decode(ids, skip_special) before its gpt2
  // space clean-up (which joins tokens). For the text_offset of echoed prompt tokens. Throw as
  // decode.
  std::vector<std::string> decode_text_pieces(std::span<const int32_t> ids, bool add_special) const;
  std::vector<std::string> decode_pieces(std::span<const int32_t> ids, bool skip_special) const;

  // Raw bytes of one token, as llama_token_to_piece(special = false): byte tokens -> their
  // byte, control / unknown -> "", gpt2 tokens -> bytes through the GPT-2 alphabet.
  // Throws pagellm::Error on an out-of-range id.
  std::string token_to_piece(int32_t id) const;

  int32_t vocab_size() const;
  int32_t bos_id() const { return bos_id_; }  // -1 if none
  int32_t eos_id() const { return eos_id_; }  // -1 if none
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool is_eog(int32_t id) const { return eog_ids_.contains(id); }
  bool is_control(int32_t id) const;
  const std::string& token_text(int32_t id) const;  // throws pagellm::Error when out of range
  std::optional<int32_t> find_token(std::string_view text) const;

  // The most input bytes one token can stand for: the longest token text or piece, in bytes
  // (computed once at load).
  size_t max_token_bytes() const { return max_token_bytes_; }
  // A lower bound on encode(t, ...).size() for any text t that contains `parts` as disjoint
  // substrings, from their bytes alone (no tokenising, one pass over the bytes): every byte
  // that the tokenizer cannot drop needs a token, and a token covers at most max_token_bytes()
  // of them. Bytes it can drop: ASCII whitespace when some special token has the lstrip /
  // rstrip attribute (it eats any run of it), and bytes without a byte token in a vocabulary
  // that drops those (gpt2 always, llama when it has no <unk> either). BOS / EOS not counted.
  size_t min_token_count(std::span<const std::string_view> parts) const;

  bool is_spm() const { return spm_ != nullptr; }
  // What the loader read past as llama.cpp does, one sentence each: a special-token id key outside
  // the vocabulary (ignored: the default id, or none, is used), token types outside the
  // tokenizer.ggml.token_type enum (read as undefined). Empty for a clean file. `pagellm info`
  // prints them; generate and serve log them.
  const std::vector<std::string>& load_warnings() const { return load_warnings_; }
  const PreTokenizerSpec& pre_tokenizer_spec() const { return pre_spec_; }  // gpt2 only

 private:
  Tokenizer() = default;
  void init(TokenizerConfig& config);
  void resolve_special_ids(const TokenizerConfig& config);
  void init_length_bound();
  void apply_attr_fixups(const TokenizerConfig& config);
  void encode_text(std::string_view text, bool prefix_space, std::vector<int32_t>* out) const;
  void check_id(int32_t id) const;
  void clean_up_spaces(std::string* text) const;

  std::unique_ptr<Vocab> vocab_;
  std::unique_ptr<SpmTokenizer> spm_;
  std::unique_ptr<BpeTokenizer> bpe_;
  // SentencePiece-style vocabulary with ranked merges (tokenizer.json's BPE model with byte
  // fallback, as format/hf_dir.h presents it): merges replace the score-ordered SPM merging.
  std::unique_ptr<BpeTokenizer> spm_merges_;
  std::unique_ptr<PreTokenizer> pre_;
  std::unique_ptr<SpecialTokenSplitter> specials_;
  PreTokenizerSpec pre_spec_;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t unk_id_ = -1;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;
  bool clean_spaces_ = false;
  std::unordered_set<int32_t> eog_ids_;
  size_t max_token_bytes_ = 1;
  std::array<bool, 256> byte_needs_token_{};  // see min_token_count
  std::vector<std::string> load_warnings_;
};

}  // namespace pagellm
