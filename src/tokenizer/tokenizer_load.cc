// Loading: GGUF metadata -> TokenizerConfig -> Tokenizer, with llama.cpp's defaults and
// load-time fix-ups (llama_vocab::impl::load in src/llama-vocab.cpp).
#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <utility>

#include "core/error.h"
#include "format/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/spm.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace pagellm {

namespace {

std::optional<int64_t> opt_id(const GgufFile& f, const std::string& key) {
  if (f.find(key) == nullptr) return std::nullopt;
  return f.get_i64(key);
}

std::optional<bool> opt_bool(const GgufFile& f, const std::string& key) {
  if (f.find(key) == nullptr) return std::nullopt;
  return f.get_bool(key);
}

// Texts llama.cpp treats as end-of-generation (and forces to control type).
constexpr std::array<std::string_view, 22> kEogTexts = {"<|eot_id|>",
                                                        "<|im_end|>",
                                                        "<|end|>",
                                                        "<|return|>",
                                                        "<|call|>",
                                                        "<|flush|>",
                                                        "<|calls|>",
                                                        "<end_of_turn>",
                                                        "<|endoftext|>",
                                                        "</s>",
                                                        "<|eom_id|>",
                                                        "<EOT>",
                                                        "_<EOT>",
                                                        "[EOT]",
                                                        "[EOS]",
                                                        "<|end_of_text|>",
                                                        "<end_of_utterance>",
                                                        "<eos>",
                                                        "<turn|>",
                                                        "<|tool_response>",
                                                        "<\xEF\xBD\x9C"
                                                        "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                                                        "[e~["};

// FIM-looking texts llama.cpp forces to control type; pad/repo/file-sep ones are also EOG.
constexpr std::array<std::string_view, 18> kFimTexts = {"<|fim_prefix|>",
                                                        "<fim-prefix>",
                                                        "<fim_prefix>",
                                                        "<\xEF\xBD\x9C"
                                                        "fim\xE2\x96\x81"
                                                        "begin\xEF\xBD\x9C>",
                                                        "<PRE>",
                                                        "\xE2\x96\x81<PRE>",
                                                        "<|fim_suffix|>",
                                                        "<fim-suffix>",
                                                        "<fim_suffix>",
                                                        "<\xEF\xBD\x9C"
                                                        "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
                                                        "<SUF>",
                                                        "\xE2\x96\x81<SUF>",
                                                        "<|fim_middle|>",
                                                        "<fim-middle>",
                                                        "<fim_middle>",
                                                        "<\xEF\xBD\x9C"
                                                        "fim\xE2\x96\x81"
                                                        "end\xEF\xBD\x9C>",
                                                        "<MID>",
                                                        "\xE2\x96\x81<MID>"};
constexpr std::array<std::string_view, 11> kFimEogTexts = {"<|fim_pad|>", "<fim-pad>",    "<fim_pad>",     "<PAD>",
                                                           "[PAD]",       "<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                                           "<REPO>",      "<reponame>",   "<|file_sep|>"};

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& f) {
  TokenizerConfig c;
  c.model = f.get_string("tokenizer.ggml.model");
  c.pre = f.get_string_opt("tokenizer.ggml.pre");
  c.tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (f.find("tokenizer.ggml.scores")) c.scores = f.get_f32_array("tokenizer.ggml.scores");
  if (f.find("tokenizer.ggml.token_type")) c.token_types = f.get_int_array("tokenizer.ggml.token_type");
  if (f.find("tokenizer.ggml.merges")) c.merges = f.get_string_array("tokenizer.ggml.merges");
  c.bos_id = opt_id(f, "tokenizer.ggml.bos_token_id");
  c.eos_id = opt_id(f, "tokenizer.ggml.eos_token_id");
  c.eot_id = opt_id(f, "tokenizer.ggml.eot_token_id");
  c.eom_id = opt_id(f, "tokenizer.ggml.eom_token_id");
  c.unk_id = opt_id(f, "tokenizer.ggml.unknown_token_id");
  c.pad_id = opt_id(f, "tokenizer.ggml.padding_token_id");
  c.fim_pad_id = opt_id(f, "tokenizer.ggml.fim_pad_token_id");
  c.fim_rep_id = opt_id(f, "tokenizer.ggml.fim_rep_token_id");
  c.fim_sep_id = opt_id(f, "tokenizer.ggml.fim_sep_token_id");
  c.add_bos = opt_bool(f, "tokenizer.ggml.add_bos_token");
  c.add_eos = opt_bool(f, "tokenizer.ggml.add_eos_token");
  c.add_space_prefix = opt_bool(f, "tokenizer.ggml.add_space_prefix");
  c.model_name = f.get_string_opt("general.name").value_or("");
  return from_config(std::move(c));
}

std::unique_ptr<Tokenizer> Tokenizer::from_config(TokenizerConfig config) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->init(config);
  return t;
}

Tokenizer::~Tokenizer() = default;

void Tokenizer::init(TokenizerConfig& c) {
  const bool spm = c.model == "llama";
  if (!spm && c.model != "gpt2") {
    throw Error("tokenizer.ggml.model = '" + c.model + "' is not supported (expected 'llama' or 'gpt2')");
  }
  const size_t n = c.tokens.size();
  if (n == 0) throw Error("tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX)) throw Error("tokenizer.ggml.tokens has too many entries");
  if (!c.scores.empty() && c.scores.size() < n) {
    throw Error("tokenizer.ggml.scores has " + std::to_string(c.scores.size()) + " entries for " + std::to_string(n) +
                " tokens");
  }
  if (!c.token_types.empty() && c.token_types.size() < n) {
    throw Error("tokenizer.ggml.token_type has " + std::to_string(c.token_types.size()) + " entries for " +
                std::to_string(n) + " tokens");
  }
  for (const auto& [name, size] : {std::pair<const char*, size_t>{"scores", c.scores.size()},
                                   std::pair<const char*, size_t>{"token_type", c.token_types.size()}}) {
    if (size > n) {
      load_warnings_.push_back("tokenizer.ggml." + std::string(name) + " has " + std::to_string(size) +
                               " entries for " + std::to_string(n) + " tokens; the last " + std::to_string(size - n) +
                               " are ignored");
    }
  }
  std::vector<uint32_t> attrs(n, token_attr::kNormal);
  if (!c.token_types.empty()) {
    size_t outside = 0, first = 0;
    for (size_t i = 0; i < n; ++i) {
      attrs[i] = token_type_to_attr(c.token_types[i]);
      const int64_t t = c.token_types[i];
      if (t < static_cast<int64_t>(TokenType::kUndefined) || t > static_cast<int64_t>(TokenType::kByte)) {
        if (outside++ == 0) first = i;
      }
    }
    if (outside > 0) {
      load_warnings_.push_back("tokenizer.ggml.token_type: " + std::to_string(outside) + " of " + std::to_string(n) +
                               " entries are outside the token types 0..6 (the first: token " + std::to_string(first) +
                               ", type " + std::to_string(c.token_types[first]) + "); read as undefined");
    }
  }
  vocab_ = std::make_unique<Vocab>(std::move(c.tokens), std::move(c.scores), std::move(attrs));

  if (spm) {
    add_space_prefix_ = c.add_space_prefix.value_or(true);
    add_bos_ = true;
    clean_spaces_ = false;
  } else {
    const std::string pre = c.pre.value_or("");
    if (!find_pre_tokenizer_spec(pre, &pre_spec_)) {
      throw Error("tokenizer.ggml.pre = '" + pre + "' is not a supported pre-tokenizer");
    }
    if (c.merges.empty()) throw Error("tokenizer.ggml.merges is missing for tokenizer.ggml.model = 'gpt2'");
    add_space_prefix_ = c.add_space_prefix.value_or(false);
    add_bos_ = pre_spec_.add_bos;
    clean_spaces_ = pre_spec_.clean_spaces;
    pre_ = std::make_unique<PreTokenizer>(pre_spec_.regexes);
    bpe_ = std::make_unique<BpeTokenizer>(*vocab_, c.merges, pre_spec_.ignore_merges);
  }
  add_eos_ = false;
  if (c.add_bos) add_bos_ = *c.add_bos;
  if (c.add_eos) add_eos_ = *c.add_eos;

  resolve_special_ids(c);
  apply_attr_fixups(c);
  if (add_bos_ && bos_id_ < 0) throw Error("tokenizer.ggml.add_bos_token is true but there is no BOS token");
  if (add_eos_ && eos_id_ < 0) throw Error("tokenizer.ggml.add_eos_token is true but there is no EOS token");
  if (spm) spm_ = std::make_unique<SpmTokenizer>(*vocab_, unk_id_);
  if (spm && !c.merges.empty()) spm_merges_ = std::make_unique<BpeTokenizer>(*vocab_, c.merges, false);
  specials_ = std::make_unique<SpecialTokenSplitter>(*vocab_);
  init_length_bound();
}

// max_token_bytes_ and byte_needs_token_, for min_token_count().
void Tokenizer::init_length_bound() {
  bool strips_whitespace = false;
  max_token_bytes_ = 1;
  for (int32_t id = 0; id < vocab_->size(); ++id) {
    max_token_bytes_ = std::max({max_token_bytes_, vocab_->text(id).size(), token_to_piece(id).size()});
    if (vocab_->has_attr(id, token_attr::kLstrip | token_attr::kRstrip)) strips_whitespace = true;
  }
  for (int b = 0; b < 256; ++b) {
    bool has_token = true;  // a byte with no token of its own is dropped by the BPE / SPM fallback
    if (bpe_) {
      has_token = vocab_->find(unicode::byte_to_unicode()[b]) >= 0;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
      has_token = unk_id_ >= 0 || vocab_->find(hex) >= 0 || vocab_->find(std::string(1, static_cast<char>(b))) >= 0;
    }
    const bool eaten = strips_whitespace && std::isspace(b);
    byte_needs_token_[b] = has_token && !eaten;
  }
}

// llama.cpp defaults: llama -> BOS 1, EOS 2, UNK 0; gpt2 -> BOS = EOS = 11 (GPT-2's historic
// default), no UNK. A default outside the vocab is disabled; a key outside the vocab is ignored
// (with a load warning, as llama.cpp warns).
void Tokenizer::resolve_special_ids(const TokenizerConfig& c) {
  const int32_t n = vocab_->size();
  auto resolve = [&](int32_t dflt, const std::optional<int64_t>& key, const char* name) -> int32_t {
    int32_t id = dflt >= 0 && dflt < n ? dflt : -1;
    if (key && *key >= 0 && *key < n) return static_cast<int32_t>(*key);
    if (key) {
      load_warnings_.push_back("tokenizer.ggml." + std::string(name) + " = " + std::to_string(*key) +
                               " is outside the vocabulary of " + std::to_string(n) + " tokens; ignored (" +
                               (id >= 0 ? "the default " + std::to_string(id) + " is used" : "none") + ")");
    }
    return id;
  };
  const bool spm = c.model == "llama";
  bos_id_ = resolve(spm ? 1 : 11, c.bos_id, "bos_token_id");
  eos_id_ = resolve(spm ? 2 : 11, c.eos_id, "eos_token_id");
  unk_id_ = resolve(spm ? 0 : -1, c.unk_id, "unknown_token_id");
  const std::pair<const std::optional<int64_t>&, const char*> eog_keys[] = {{c.eot_id, "eot_token_id"},
                                                                            {c.eom_id, "eom_token_id"},
                                                                            {c.fim_pad_id, "fim_pad_token_id"},
                                                                            {c.fim_rep_id, "fim_rep_token_id"},
                                                                            {c.fim_sep_id, "fim_sep_token_id"}};
  for (const auto& [key, name] : eog_keys) {
    const int32_t id = resolve(-1, key, name);
    if (id >= 0) eog_ids_.insert(id);
  }
  if (eos_id_ >= 0) eog_ids_.insert(eos_id_);
}

// Text-based fix-ups llama.cpp applies because GGUF files lack per-token attributes: EOG- and
// FIM-looking tokens become control (EOG ones join the EOG set), and Phi-3 special tokens eat
// the whitespace to their right.
void Tokenizer::apply_attr_fixups(const TokenizerConfig& c) {
  for (int32_t id = 0; id < vocab_->size(); ++id) {
    const std::string& text = vocab_->text(id);
    if (text.size() < 3 || text.size() > 40) continue;
    const bool eog = std::find(kEogTexts.begin(), kEogTexts.end(), text) != kEogTexts.end() ||
                     std::find(kFimEogTexts.begin(), kFimEogTexts.end(), text) != kFimEogTexts.end();
    const bool fim = std::find(kFimTexts.begin(), kFimTexts.end(), text) != kFimTexts.end();
    if (eog) eog_ids_.insert(id);
    if (eog || fim) vocab_->add_attr(id, token_attr::kControl);
  }
  std::string name = c.model_name;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char x) { return std::tolower(x); });
  if (contains(name, "phi-3") || contains(name, "phi3")) {
    constexpr uint32_t kSpecial = token_attr::kControl | token_attr::kUserDefined | token_attr::kUnknown;
    for (int32_t id = 0; id < vocab_->size(); ++id) {
      if (vocab_->has_attr(id, kSpecial)) vocab_->add_attr(id, token_attr::kRstrip);
    }
    if (int32_t id = vocab_->find("</s>"); id >= 0) vocab_->add_attr(id, token_attr::kRstrip);
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (int32_t id = vocab_->find(t); id >= 0) vocab_->clear_attr(id, token_attr::kRstrip);
    }
  }
}

}  // namespace pagellm
