// Tokenizer::decode_text inverts encode (what /tokenize then /detokenize needs), while decode
// keeps llama.cpp's detokenize (pinned by the golden vectors): decode gains a space after a
// dropped BOS and loses special tokens, decode_text gives the text back. Bundled stories260K
// (SPM with dummy prefix) and the llama.cpp vocabularies of ../shared/testdata/vocab (SPM and gpt2).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace pagellm {
namespace {

struct Loaded {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};

Loaded load(const std::string& path) {
  Loaded l;
  l.file = GgufFile::open(path);
  l.tok = Tokenizer::from_gguf(*l.file);
  return l;
}

std::string vocab_path(const std::string& name) {
  return std::string(PAGELLM_TESTDATA_DIR) + "/vocab/ggml-vocab-" + name + ".gguf";
}

bool has_unknown(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    if (tok.token_text(id) == "<unk>" || tok.token_text(id) == "[UNK]") return true;
  }
  return false;
}

// Every text through every (add_special, parse_special): decode_text(encode) == text.
void expect_round_trips(const Tokenizer& tok, const std::vector<std::string>& texts, const std::string& name) {
  for (const std::string& t : texts) {
    for (bool add_special : {true, false}) {
      for (bool parse_special : {true, false}) {
        const std::vector<int32_t> ids = tok.encode(t, add_special, parse_special);
        if (has_unknown(tok, ids)) continue;  // the vocabulary cannot represent t
        EXPECT_EQ(tok.decode_text(ids, add_special), t)
            << name << " '" << t << "' add_special=" << add_special << " parse_special=" << parse_special;
      }
    }
  }
}

// Special tokens, leading spaces, BOS spelled in the text, spaces around special tokens.
std::vector<std::string> tricky_texts(const Tokenizer& tok) {
  std::vector<std::string> texts = {"Hello world", " leading space",         "  two leading",
                                    "trailing ",   "\n\tnewline first",      "a",
                                    " ",           "Hello . world , ok ' s", "caf\xC3\xA9 \xE4\xB8\xAD"};
  std::vector<std::string> specials;
  if (tok.bos_id() >= 0) specials.push_back(tok.token_text(tok.bos_id()));
  if (tok.eos_id() >= 0) specials.push_back(tok.token_text(tok.eos_id()));
  for (const std::string& s : specials) {
    texts.push_back(s + "Once upon");
    texts.push_back(s + " Once upon");
    texts.push_back("Once" + s + "upon");
    texts.push_back("Once " + s + " upon");
    texts.push_back("Once" + s);
    texts.push_back(s);
    texts.push_back(s + s + " x");
  }
  return texts;
}

TEST(DecodeText, Stories260KRoundTripsWhereDecodeDoesNot) {
  Loaded l = load(std::string(PAGELLM_SOURCE_DIR) + "/models/stories260K-f32.gguf");
  const Tokenizer& tok = *l.tok;
  ASSERT_TRUE(tok.is_spm());
  ASSERT_TRUE(tok.add_bos());
  // What /tokenize gives by default (add_special, parse_special).
  const std::vector<int32_t> ids = tok.encode("Hello</s>world", true, true);
  ASSERT_EQ(ids.front(), tok.bos_id());
  EXPECT_EQ(tok.decode(ids), " Hello world");  // llama.cpp: dummy prefixes kept, </s> dropped
  EXPECT_EQ(tok.decode_text(ids, true), "Hello</s>world");
  EXPECT_EQ(tok.decode_text(tok.encode("Hello", true, false), true), "Hello");
  EXPECT_EQ(tok.decode_text(tok.encode("Hello", false, false), false), "Hello");
  // Without add_special a BOS in the ids is text the caller asked for ("<s>" parsed).
  EXPECT_EQ(tok.decode_text(tok.encode("<s>Hello", false, true), false), "<s>Hello");
  EXPECT_EQ(tok.decode_text(tok.encode("<s>Hello", true, true), true), "<s>Hello");
  expect_round_trips(tok, tricky_texts(tok), "stories260K");
}

TEST(DecodeText, LlamaCppVocabulariesRoundTrip) {
  for (const std::string name : {"llama-spm", "phi-3", "baichuan", "gpt-2", "gpt-neox", "deepseek-coder", "falcon",
                                 "mpt", "refact", "starcoder"}) {
    SCOPED_TRACE(name);
    Loaded l = load(vocab_path(name));
    std::vector<std::string> texts = tricky_texts(*l.tok);
    // And the llama.cpp tokenizer test inputs.
    std::ifstream in(vocab_path(name) + ".inp", std::ios::binary);
    if (in.good()) {
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string raw = ss.str(), sep = "\n__ggml_vocab_test__\n";
      for (size_t pos = 0; pos < raw.size();) {
        const size_t next = raw.find(sep, pos);
        texts.push_back(raw.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
        if (next == std::string::npos) break;
        pos = next + sep.size();
      }
    }
    expect_round_trips(*l.tok, texts, name);
  }
}

TEST(DecodeText, RejectsOutOfRangeIds) {
  Loaded l = load(std::string(PAGELLM_SOURCE_DIR) + "/models/stories260K-f32.gguf");
  EXPECT_THROW(l.tok->decode_text(std::vector<int32_t>{1, 100000}, true), Error);
  EXPECT_EQ(l.tok->decode_text(std::vector<int32_t>{}, true), "");
}

}  // namespace
}  // namespace pagellm
