#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace pagellm {

namespace {

// llama.cpp's spelling of each regex (src/llama-vocab.cpp). (?i:...) contractions are spelled
// out as character classes there, which we keep so that only ASCII s/t/m/d/re/ve/ll match.
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// CJK ideographs U+4E00..U+9FA5, U+0800..U+4E00 and Hangul U+AC00..U+D7FF.
constexpr const char* kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

struct NamedSpec {
  std::vector<std::string_view> names;
  PreTokenizerSpec spec;
};

const std::vector<NamedSpec>& named_specs() {
  static const std::vector<NamedSpec> specs = {
      {{"", "default"},
       {"default", {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}, false, true, false}},
      {{"llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral"}, {"llama-bpe", {kLlama3}, true, true, true}},
      {{"dbrx"}, {"dbrx", {kLlama3}, false, true, false}},
      {{"smaug-bpe"}, {"smaug-bpe", {kLlama3}, false, true, false}},
      {{"qwen2", "deepseek-r1-qwen", "megrez"}, {"qwen2", {kQwen2}, false, false, false}},
      {{"stablelm2"}, {"stablelm2", {kQwen2}, false, true, false}},
      {{"deepseek-coder"},
       {"deepseek-coder", {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"}, false, false, false}},
      {{"falcon"}, {"falcon", {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}, false, true, false}},
      {{"gpt-2", "phi-2", "mpt", "olmo"}, {"gpt-2", {kGpt2}, false, true, false}},
      {{"starcoder", "refact", "codeshell", "exaone"}, {"starcoder", {R"(\p{N})", kGpt2}, false, true, false}},
      {{"command-r", "smollm"}, {"command-r", {R"(\p{N})", kGpt2}, false, false, false}},
  };
  return specs;
}

}  // namespace

bool find_pre_tokenizer_spec(std::string_view pre, PreTokenizerSpec* spec) {
  for (const NamedSpec& named : named_specs()) {
    for (std::string_view n : named.names) {
      if (n == pre) {
        *spec = named.spec;
        return true;
      }
    }
  }
  return false;
}

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const std::vector<std::string>& regexes) {
  for (const std::string& pattern : regexes) {
    auto re = std::make_unique<Regex>();
    int err = 0;
    PCRE2_SIZE err_off = 0;
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                             &err_off, nullptr);
    if (re->code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      throw Error("pre-tokenizer regex '" + pattern + "' does not compile at offset " + std::to_string(err_off) + ": " +
                  reinterpret_cast<const char*>(msg));
    }
    re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    regexes_.push_back(std::move(re));
  }
}

PreTokenizer::~PreTokenizer() = default;

namespace {

// One piece of the text being split: [begin, end) byte offsets.
struct Span {
  size_t begin;
  size_t end;
};

struct MatchData {
  pcre2_match_data* md;
  explicit MatchData(const pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
    PAGELLM_CHECK(md != nullptr, "pcre2_match_data_create_from_pattern failed");
  }
  ~MatchData() { pcre2_match_data_free(md); }
};

// Returns the PCRE2 result; retries without JIT when the JIT stack runs out.
int match_at(const pcre2_code* code, std::string_view subject, size_t start, pcre2_match_data* md) {
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc = pcre2_match(code, s, subject.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    rc = pcre2_match(code, s, subject.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
  }
  return rc;
}

// Appends to `out` the matches of `code` in `piece` and the unmatched runs between them.
void split_piece(const pcre2_code* code, pcre2_match_data* md, std::string_view text, Span piece,
                 std::vector<Span>* out) {
  const std::string_view subject = text.substr(piece.begin, piece.end - piece.begin);
  size_t pos = 0;      // where the next search starts
  size_t emitted = 0;  // end of what was already appended
  while (pos <= subject.size()) {
    const int rc = match_at(code, subject, pos, md);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      throw Error(std::string("pre-tokenizer regex match failed: ") + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t m_begin = ov[0];
    const size_t m_end = ov[1];
    if (m_end == m_begin) {
      // Empty match (none of our regexes can produce one): step over one code point.
      pos = m_end + (m_end < subject.size() ? unicode::utf8_len(subject[m_end]) : 1);
      continue;
    }
    if (m_begin > emitted) out->push_back({piece.begin + emitted, piece.begin + m_begin});
    out->push_back({piece.begin + m_begin, piece.begin + m_end});
    emitted = m_end;
    pos = m_end;
  }
  if (emitted < subject.size()) out->push_back({piece.begin + emitted, piece.end});
}

}  // namespace

std::vector<std::string> PreTokenizer::split(std::string_view raw) const {
  const std::string text = unicode::sanitize_utf8(raw);
  std::vector<Span> pieces;
  if (!text.empty()) pieces.push_back({0, text.size()});
  std::vector<Span> next;
  for (const auto& re : regexes_) {
    MatchData md(re->code);
    next.clear();
    next.reserve(pieces.size() * 2);
    for (const Span& piece : pieces) split_piece(re->code, md.md, text, piece, &next);
    pieces.swap(next);
  }
  std::vector<std::string> words;
  words.reserve(pieces.size());
  for (const Span& p : pieces) words.emplace_back(text, p.begin, p.end - p.begin);
  return words;
}

}  // namespace pagellm
