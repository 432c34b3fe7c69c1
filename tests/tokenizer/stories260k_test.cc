// stories260K (SPM, 512 tokens, byte fallback) against llama.cpp's golden.json: prompt ids
// with BOS, token_to_piece of the greedy ids, and llama_detokenize of prompt + greedy ids.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace pagellm {
namespace {

class Stories260K : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = std::string(PAGELLM_TESTDATA_DIR) + "/stories260K/";
    gguf_ = GgufFile::open(dir + "stories260K-f32.gguf").release();
    tok_ = Tokenizer::from_gguf(*gguf_).release();
    std::ifstream in(dir + "golden.json");
    golden_ = new nlohmann::json(nlohmann::json::parse(in));
  }
  static void TearDownTestSuite() {
    delete golden_;
    delete tok_;
    delete gguf_;
  }
  static GgufFile* gguf_;
  static Tokenizer* tok_;
  static nlohmann::json* golden_;
};

GgufFile* Stories260K::gguf_ = nullptr;
Tokenizer* Stories260K::tok_ = nullptr;
nlohmann::json* Stories260K::golden_ = nullptr;

TEST_F(Stories260K, Metadata) {
  EXPECT_EQ(tok_->vocab_size(), 512);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_TRUE(tok_->add_bos());
  EXPECT_TRUE(tok_->is_eog(2));
  EXPECT_FALSE(tok_->is_eog(1));
  EXPECT_TRUE(tok_->is_control(1));
  EXPECT_EQ(tok_->token_text(1), "<s>");
  EXPECT_EQ(tok_->find_token("<s>"), 1);
  EXPECT_EQ(tok_->find_token("no such token"), std::nullopt);
}

TEST_F(Stories260K, PromptIdsMatchGolden) {
  ASSERT_EQ((*golden_)["prompts"].size(), 6u);
  for (const auto& p : (*golden_)["prompts"]) {
    const std::string prompt = p["prompt"];
    const auto expected = p["prompt_token_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok_->encode(prompt, /*add_special=*/true, /*parse_special=*/false), expected) << prompt;
  }
}

TEST_F(Stories260K, PiecesAndDetokenizeMatchGolden) {
  for (const auto& p : (*golden_)["prompts"]) {
    for (const auto& [quant, r] : p["results"].items()) {
      const auto greedy = r["greedy_token_ids"].get<std::vector<int32_t>>();
      std::string text;
      for (int32_t id : greedy) text += tok_->token_to_piece(id);
      EXPECT_EQ(text, r["greedy_text"].get<std::string>()) << p["prompt"] << " " << quant;

      auto all = p["prompt_token_ids"].get<std::vector<int32_t>>();
      all.insert(all.end(), greedy.begin(), greedy.end());
      EXPECT_EQ(tok_->decode(all, /*skip_special=*/true), r["detokenized_prompt_plus_greedy"].get<std::string>())
          << p["prompt"] << " " << quant;
    }
  }
}

// Without a BOS first, the dummy-prefix space of the first piece is removed (llama.cpp).
TEST_F(Stories260K, DecodeStripsDummyPrefixWithoutBos) {
  const auto ids = tok_->encode("Once upon a time", /*add_special=*/false, /*parse_special=*/false);
  EXPECT_EQ(tok_->decode(ids), "Once upon a time");
  const std::vector<int32_t> with_bos = {1, 403};
  EXPECT_EQ(tok_->decode(with_bos), " Once");
}

TEST_F(Stories260K, ByteFallbackRoundTrips) {
  const std::string text = "caf\xC3\xA9 \xF0\x9F\xA6\x99 \xE4\xB8\xAD\n\t~";
  const auto ids = tok_->encode(text, false, false);
  EXPECT_EQ(tok_->decode(ids), text);
}

}  // namespace
}  // namespace pagellm
