// Special tokens (parse_special on/off, user-defined tokens, BOS/EOS), load errors and
// out-of-range ids, on real vocabularies and on a tiny in-memory gpt2 vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace pagellm {
namespace {

using Ids = std::vector<int32_t>;

bool contains(const Ids& ids, int32_t id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

std::unique_ptr<GgufFile> open_vocab(const std::string& name) {
  return GgufFile::open(std::string(PAGELLM_TESTDATA_DIR) + "/vocab/ggml-vocab-" + name + ".gguf");
}

// 256 byte-level tokens, merges building "hello", a control token and a user-defined one.
TokenizerConfig tiny_gpt2_config() {
  TokenizerConfig c;
  c.model = "gpt2";
  c.pre = "gpt-2";
  for (const std::string& s : unicode::byte_to_unicode()) c.tokens.push_back(s);
  for (const char* t : {"he", "ll", "hell", "hello", "<|eot|>", "<tool>"}) c.tokens.push_back(t);
  c.token_types.assign(c.tokens.size(), 1);
  c.token_types[260] = 3;  // <|eot|>: control
  c.token_types[261] = 4;  // <tool>: user-defined
  c.merges = {"h e", "l l", "he ll", "hell o"};
  c.bos_id = 260;
  c.eos_id = 260;
  return c;
}

constexpr int32_t kHello = 259;
constexpr int32_t kEot = 260;
constexpr int32_t kTool = 261;

TEST(TinyVocab, MergesAndSpecials) {
  auto tok = Tokenizer::from_config(tiny_gpt2_config());
  EXPECT_EQ(tok->encode("hello", false, false), (Ids{kHello}));
  EXPECT_EQ(tok->encode("hel", false, false), (Ids{256, 'l'}));  // "he" + "l" (byte token ids = byte values here)

  // User-defined tokens are always cut out; control tokens only with parse_special.
  const Ids plain = tok->encode("hello<tool>hello<|eot|>", false, false);
  EXPECT_EQ(plain.front(), kHello);
  EXPECT_EQ(plain[1], kTool);
  EXPECT_EQ(plain[2], kHello);
  EXPECT_FALSE(contains(plain, kEot));
  EXPECT_EQ(tok->decode(plain), "hello<tool>hello<|eot|>");

  EXPECT_EQ(tok->encode("hello<tool>hello<|eot|>", false, true), (Ids{kHello, kTool, kHello, kEot}));
  // Control tokens decode to nothing (llama_detokenize with unparse_special = false).
  EXPECT_EQ(tok->decode(Ids{kHello, kEot, kHello}), "hellohello");
  EXPECT_EQ(tok->token_to_piece(kEot), "");
  EXPECT_EQ(tok->token_to_piece(kTool), "<tool>");
  EXPECT_TRUE(tok->is_control(kEot));
  EXPECT_TRUE(tok->is_eog(kEot));
  EXPECT_FALSE(tok->is_eog(kHello));
}

TEST(TinyVocab, AddSpecialFollowsFlags) {
  TokenizerConfig c = tiny_gpt2_config();
  EXPECT_EQ(Tokenizer::from_config(c)->encode("hello", true, false), (Ids{kHello}));  // gpt2: no BOS by default
  c.add_bos = true;
  c.add_eos = true;
  auto tok = Tokenizer::from_config(c);
  EXPECT_EQ(tok->encode("hello", true, false), (Ids{kEot, kHello, kEot}));
  EXPECT_EQ(tok->decode(Ids{kEot, kHello, kEot}), "hello");
}

// What llama.cpp reads past (an id key outside the vocabulary, an unknown token type) loads as
// there, and is named in load_warnings(); a clean file has none.
TEST(TinyVocab, LoadWarningsNameWhatWasReadPast) {
  EXPECT_TRUE(Tokenizer::from_config(tiny_gpt2_config())->load_warnings().empty());
  TokenizerConfig c = tiny_gpt2_config();
  c.bos_id = 5000;
  c.eot_id = -3;
  c.token_types[7] = 9;
  c.token_types[9] = -1;
  auto tok = Tokenizer::from_config(c);
  EXPECT_EQ(tok->bos_id(), 11);  // gpt2's default BOS, as llama.cpp
  EXPECT_TRUE(tok->is_eog(kEot));
  const std::vector<std::string>& w = tok->load_warnings();
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0],
            "tokenizer.ggml.token_type: 2 of 262 entries are outside the token types 0..6 (the first: token 7, "
            "type 9); read as undefined");
  EXPECT_EQ(w[1],
            "tokenizer.ggml.bos_token_id = 5000 is outside the vocabulary of 262 tokens; ignored (the default 11 is "
            "used)");
  EXPECT_EQ(w[2], "tokenizer.ggml.eot_token_id = -3 is outside the vocabulary of 262 tokens; ignored (none)");

  // Entries past the token list are read past too (a shorter list is an error).
  c = tiny_gpt2_config();
  c.token_types.resize(c.tokens.size() + 3, 99);
  c.scores.assign(c.tokens.size() + 1, 0.0f);
  const std::vector<std::string> extra = Tokenizer::from_config(c)->load_warnings();
  ASSERT_EQ(extra.size(), 2u);
  EXPECT_EQ(extra[0], "tokenizer.ggml.scores has 263 entries for 262 tokens; the last 1 are ignored");
  EXPECT_EQ(extra[1], "tokenizer.ggml.token_type has 265 entries for 262 tokens; the last 3 are ignored");
}

TEST(TinyVocab, LoadErrorsNameTheValue) {
  TokenizerConfig c = tiny_gpt2_config();
  c.pre = "no-such-pre";
  try {
    Tokenizer::from_config(c);
    FAIL() << "expected pagellm::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-pre"), std::string::npos) << e.what();
  }
  c = tiny_gpt2_config();
  c.model = "bert";
  EXPECT_THROW(Tokenizer::from_config(c), Error);
  c = tiny_gpt2_config();
  c.merges.clear();
  EXPECT_THROW(Tokenizer::from_config(c), Error);
  c = tiny_gpt2_config();
  c.merges.push_back("nospace");
  EXPECT_THROW(Tokenizer::from_config(c), Error);
  c = tiny_gpt2_config();
  c.token_types.resize(3);
  EXPECT_THROW(Tokenizer::from_config(c), Error);
}

TEST(TinyVocab, UnknownPreFromGgufThrows) {
  GgufWriter w;
  TokenizerConfig c = tiny_gpt2_config();
  std::vector<GgufValue> tokens, merges;
  for (const auto& t : c.tokens) tokens.push_back(GgufValue::str(t));
  for (const auto& m : c.merges) merges.push_back(GgufValue::str(m));
  w.set("tokenizer.ggml.model", GgufValue::str("gpt2"));
  w.set("tokenizer.ggml.pre", GgufValue::str("mystery-pre"));
  w.set("tokenizer.ggml.tokens", GgufValue::array(GgufValueType::STRING, tokens));
  w.set("tokenizer.ggml.merges", GgufValue::array(GgufValueType::STRING, merges));
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = GgufFile::parse(bytes, "in-memory");
  try {
    Tokenizer::from_gguf(*f);
    FAIL() << "expected pagellm::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mystery-pre"), std::string::npos) << e.what();
  }
  // The same file with a known pre-tokenizer loads.
  w.set("tokenizer.ggml.pre", GgufValue::str("gpt-2"));
  const std::vector<uint8_t> ok_bytes = w.to_bytes();
  auto ok = GgufFile::parse(ok_bytes, "in-memory");
  EXPECT_EQ(Tokenizer::from_gguf(*ok)->encode("hello", false, false), (Ids{kHello}));
}

TEST(TinyVocab, OutOfRangeIdsThrow) {
  auto tok = Tokenizer::from_config(tiny_gpt2_config());
  EXPECT_THROW(tok->decode(Ids{kHello, 262}), Error);
  EXPECT_THROW(tok->decode(Ids{-1}), Error);
  EXPECT_THROW(tok->token_to_piece(100000), Error);
  EXPECT_THROW(tok->token_text(-5), Error);
  EXPECT_FALSE(tok->is_control(-5));
}

TEST(LlamaSpm, ParseSpecialControlToken) {
  auto f = open_vocab("llama-spm");
  auto tok = Tokenizer::from_gguf(*f);
  const std::string text = "Hello <s> world</s>";
  const Ids plain = tok->encode(text, false, false);
  EXPECT_FALSE(contains(plain, 1));
  EXPECT_FALSE(contains(plain, 2));
  EXPECT_EQ(tok->decode(plain), text);

  const Ids parsed = tok->encode(text, false, true);
  // "Hello " | <s> | " world" | </s>; each text fragment after a special gets the dummy prefix.
  Ids expected = tok->encode("Hello ", false, false);
  expected.push_back(1);
  const Ids world = tok->encode(" world", false, false);
  expected.insert(expected.end(), world.begin(), world.end());
  expected.push_back(2);
  EXPECT_EQ(parsed, expected);

  const Ids with_bos = tok->encode("Hello", true, false);
  EXPECT_EQ(with_bos.front(), 1);
  EXPECT_EQ(with_bos.back(), 15043);  // "▁Hello", no EOS (add_eos_token = false)
}

TEST(Gpt2, ParseSpecialEndOfText) {
  auto f = open_vocab("gpt-2");
  auto tok = Tokenizer::from_gguf(*f);
  const std::string text = "a<|endoftext|>b";
  const Ids plain = tok->encode(text, false, false);
  EXPECT_FALSE(contains(plain, 50256));
  EXPECT_EQ(tok->decode(plain), text);
  const Ids a = tok->encode("a", false, false);
  const Ids b = tok->encode("b", false, false);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(tok->encode(text, false, true), (Ids{a[0], 50256, b[0]}));
  EXPECT_TRUE(tok->is_eog(50256));
  EXPECT_TRUE(tok->is_control(50256));
  EXPECT_FALSE(tok->add_bos());
}

// Phi-3 marks its special tokens rstrip (llama.cpp keys this on general.name), so the space
// after "<|end|>" is eaten when specials are parsed.
TEST(Phi3, RstripAfterParsedSpecial) {
  auto f = open_vocab("phi-3");
  auto tok = Tokenizer::from_gguf(*f);
  const Ids ids = tok->encode("<|user|> hi<|end|>", false, true);
  const Ids hi = tok->encode("hi", false, false);
  Ids expected = {32010};
  expected.insert(expected.end(), hi.begin(), hi.end());
  expected.push_back(32007);
  EXPECT_EQ(ids, expected);
  EXPECT_TRUE(tok->is_eog(32007));  // <|end|>
  EXPECT_TRUE(tok->is_eog(32000));  // <|endoftext|> (eos)
}

TEST(LongInput, EncodesQuickly) {
  auto f = open_vocab("gpt-2");
  auto tok = Tokenizer::from_gguf(*f);
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "The quick brown fox jumps over the lazy dog 12345. ";
  const Ids ids = tok->encode(text, false, false);
  EXPECT_GT(ids.size(), 20000u);
  EXPECT_EQ(tok->decode(ids), text);
}

}  // namespace
}  // namespace pagellm
