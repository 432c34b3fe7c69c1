// Encode / decode, following llama_vocab::impl::tokenize and ::detokenize (src/llama-vocab.cpp).
#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/spm.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace pagellm {

namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

void escape_spaces(std::string_view text, std::string* out) {
  for (char c : text) {
    if (c == ' ') {
      out->append(kSpmSpace);
    } else {
      out->push_back(c);
    }
  }
}

std::string unescape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, kSpmSpace.size(), kSpmSpace) == 0) {
      out.push_back(' ');
      i += kSpmSpace.size();
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

// GPT-2 alphabet text -> raw bytes; a code point outside the alphabet is kept visible as
// "[UNK_BYTE_0x<utf8 hex>...]" like llama.cpp's llama_decode_text.
std::string decode_byte_level(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t start = off;
    const uint32_t cpt = unicode::decode_utf8(text, &off);
    const int b = unicode::unicode_to_byte(cpt);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
      continue;
    }
    static constexpr char kHex[] = "0123456789abcdef";
    out += "[UNK_BYTE_0x";
    for (size_t k = start; k < off; ++k) {
      const auto c = static_cast<uint8_t>(text[k]);
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
    out.append(text);
    out += "]";
  }
  return out;
}

uint8_t hex_value(char c) {
  if (c >= '0' && c <= '9') return static_cast<uint8_t>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<uint8_t>(c - 'a' + 10);
  if (c >= 'A' && c <= 'F') return static_cast<uint8_t>(c - 'A' + 10);
  return 0;
}

}  // namespace

int32_t Tokenizer::vocab_size() const { return vocab_->size(); }

void Tokenizer::check_id(int32_t id) const {
  if (!vocab_->valid(id)) {
    throw Error("token id " + std::to_string(id) + " is out of range [0, " + std::to_string(vocab_->size()) + ")");
  }
}

bool Tokenizer::is_control(int32_t id) const { return vocab_->valid(id) && vocab_->has_attr(id, token_attr::kControl); }

const std::string& Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return vocab_->text(id);
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const int32_t id = vocab_->find(text);
  if (id < 0) return std::nullopt;
  return id;
}

void Tokenizer::encode_text(std::string_view text, bool prefix_space, std::vector<int32_t>* out) const {
  if (spm_) {
    std::string escaped;
    escaped.reserve(text.size() * 3 + 3);
    if (prefix_space) escaped.append(kSpmSpace);
    escape_spaces(text, &escaped);
    if (spm_merges_) {
      spm_merges_->encode_word(escaped, out, &spm_->byte_tokens());
    } else {
      spm_->encode(escaped, out);
    }
    return;
  }
  const auto& alphabet = unicode::byte_to_unicode();
  std::string encoded;
  for (const std::string& word : pre_->split(text)) {
    encoded.clear();
    for (char c : word) encoded += alphabet[static_cast<uint8_t>(c)];
    bpe_->encode_word(encoded, out);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && add_bos_) out.push_back(bos_id_);
  // SPM adds the dummy prefix to every text fragment that follows a special token or starts
  // the input (llama.cpp's is_prev_special).
  bool prev_special = true;
  for (const Fragment& f : specials_->split(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    encode_text(text.substr(f.begin, f.end - f.begin), spm_ && add_space_prefix_ && prev_special, &out);
    prev_special = false;
  }
  if (add_special && add_eos_) out.push_back(eos_id_);
  return out;
}

size_t Tokenizer::min_token_count(std::span<const std::string_view> parts) const {
  size_t bytes = 0;
  for (std::string_view part : parts) {
    for (const char c : part) bytes += byte_needs_token_[static_cast<uint8_t>(c)] ? 1 : 0;
  }
  return (bytes + max_token_bytes_ - 1) / max_token_bytes_;
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  check_id(id);
  const uint32_t attr = vocab_->attr(id);
  if (attr & (token_attr::kControl | token_attr::kUnknown)) return "";
  const std::string& text = vocab_->text(id);
  if (attr & token_attr::kUserDefined) return text;
  if (attr & token_attr::kNormal) return spm_ ? unescape_spaces(text) : decode_byte_level(text);
  if (attr & token_attr::kByte) {
    // "<0xXX>"
    if (text.size() < 6) return "";
    return std::string(1, static_cast<char>((hex_value(text[3]) << 4) | hex_value(text[4])));
  }
  return "";  // undefined / unused
}

std::vector<std::string> Tokenizer::decode_pieces(std::span<const int32_t> ids, bool skip_special) const {
  for (int32_t id : ids) check_id(id);
  std::vector<std::string> pieces(ids.size());
  size_t first = 0, last = ids.size();
  bool remove_space = add_space_prefix_;
  if (skip_special && add_bos_ && last > first && ids[first] == bos_id_) {
    remove_space = false;
    ++first;
  }
  if (skip_special && add_eos_ && last > first && ids[last - 1] == eos_id_) --last;
  for (size_t i = first; i < last; ++i) {
    std::string piece = token_to_piece(ids[i]);
    // llama.cpp strips the dummy prefix from the first token only (even if its piece is empty).
    if (remove_space && !piece.empty() && piece.front() == ' ') piece.erase(0, 1);
    remove_space = false;
    pieces[i] = std::move(piece);
  }
  return pieces;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string text;
  for (const std::string& piece : decode_pieces(ids, skip_special)) text += piece;
  if (clean_spaces_) clean_up_spaces(&text);
  return text;
}

std::vector<std::string> Tokenizer::decode_text_pieces(std::span<const int32_t> ids, bool add_special) const {
  for (int32_t id : ids) check_id(id);
  std::vector<std::string> pieces(ids.size());
  size_t first = 0, last = ids.size();
  if (add_special && add_bos_ && last > first && ids[first] == bos_id_) ++first;
  if (add_special && add_eos_ && last > first && ids[last - 1] == eos_id_) --last;
  constexpr uint32_t kSpecial = token_attr::kControl | token_attr::kUserDefined | token_attr::kUnknown;
  const bool dummy_prefix = spm_ != nullptr && add_space_prefix_;
  // encode gives each run of text between special tokens (and the first) a dummy-prefix space:
  // the run's text loses the space it starts with (the first byte of its first non-empty piece).
  bool run_has_text = false;
  for (size_t i = first; i < last; ++i) {
    const int32_t id = ids[i];
    if (vocab_->attr(id) & kSpecial) {
      pieces[i] = vocab_->text(id);
      run_has_text = false;
      continue;
    }
    std::string piece = token_to_piece(id);
    if (!run_has_text && !piece.empty()) {
      run_has_text = true;
      if (dummy_prefix && piece.front() == ' ') piece.erase(0, 1);
    }
    pieces[i] = std::move(piece);
  }
  return pieces;
}

std::string Tokenizer::decode_text(std::span<const int32_t> ids, bool add_special) const {
  std::string text;
  for (const std::string& piece : decode_text_pieces(ids, add_special)) text += piece;
  return text;
}

// HF clean_up_tokenization_spaces as llama.cpp does it, in three passes:
// " ?" " !" " ." " ," lose the space; " ' " loses both spaces; " 's" " 'm" " 're" " 've" lose the space.
void Tokenizer::clean_up_spaces(std::string* text) const {
  std::string& s = *text;
  auto pass = [&s](auto&& keep_space) {
    if (s.empty()) return;
    std::string out;
    out.reserve(s.size());
    out.push_back(s[0]);
    for (size_t i = 1; i < s.size(); ++i) {
      const int action = keep_space(i);  // 0: keep, 1: drop the space before s[i], 2: also drop s[i+1]
      if (action >= 1 && !out.empty() && out.back() == ' ') out.pop_back();
      out.push_back(s[i]);
      if (action == 2) ++i;
    }
    s.swap(out);
  };
  pass([&s](size_t i) {
    const char x = s[i];
    return s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',') ? 1 : 0;
  });
  size_t dropped = std::string::npos;  // llama.cpp overwrites the dropped space with '\0'
  pass([&s, &dropped](size_t i) {
    if (s[i] == '\'' && i + 1 < s.size() && i - 1 != dropped && s[i - 1] == ' ' && s[i + 1] == ' ') {
      dropped = i + 1;
      return 2;
    }
    return 0;
  });
  pass([&s](size_t i) {
    if (s[i - 1] != ' ' || s[i] != '\'' || i + 1 >= s.size()) return 0;
    const char x1 = s[i + 1];
    if (x1 == 's' || x1 == 'm') return 1;
    if (i + 2 < s.size()) {
      const char x2 = s[i + 2];
      if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) return 1;
    }
    return 0;
  });
}

}  // namespace pagellm
