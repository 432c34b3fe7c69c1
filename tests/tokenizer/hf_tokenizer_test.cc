// tokenizer.json (Hugging Face BPE with byte fallback, ranked merges) against the GGUF
// vocabulary of the same model (SentencePiece merging over scores = -id): two algorithms that
// must give the same ids on real text (../shared/testdata/tinystories-656k/README.md).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "format/hf_dir.h"
#include "format/hf_json.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "vocab_cases.h"

namespace pagellm {
namespace {

TEST(HfTokenizer, TokenizesTheValidationSampleAsTheGgufVocabulary) {
  auto hf_file = open_model_file(test::testdata("tinystories-656k/hf"));
  auto gguf_file = GgufFile::open(test::testdata("tinystories-656k/TinyStories-656K-f32.gguf"));
  auto hf = Tokenizer::from_gguf(*hf_file);
  auto gguf = Tokenizer::from_gguf(*gguf_file);
  std::ifstream in(test::testdata("tinystories/valid-sample.txt"));
  ASSERT_TRUE(in);
  std::stringstream all;
  all << in.rdbuf();
  std::istringstream lines(all.str());
  std::string line;
  int n = 0;
  size_t tokens = 0;
  while (std::getline(lines, line)) {
    const auto a = hf->encode(line, true, true), b = gguf->encode(line, true, true);
    ASSERT_EQ(a, b) << "line " << n << ": " << line;
    EXPECT_EQ(hf->decode(a, true), gguf->decode(b, true));
    tokens += a.size();
    ++n;
  }
  EXPECT_GT(n, 100);
  EXPECT_GT(tokens, 5000u);
  EXPECT_EQ(hf->encode(all.str(), true, true), gguf->encode(all.str(), true, true));
}

// A byte-level tokenizer.json written from llama.cpp's GPT-2 vocabulary (vocab, merges, the
// control token as an added token, the ByteLevel pre-tokenizer with GPT-2's regex) must tokenize
// llama.cpp's golden inputs (test-tokenizer-0's .inp/.out) as llama.cpp does: the byte-level path
// of tokenizer.json against an independent oracle.
TEST(HfTokenizer, ByteLevelTokenizerJsonMatchesLlamaCppOnItsGoldenVectors) {
  const std::string vocab = test::testdata("vocab/ggml-vocab-gpt-2.gguf");
  auto gguf = GgufFile::open(vocab);
  const std::vector<std::string> tokens = gguf->get_string_array("tokenizer.ggml.tokens");
  const std::vector<int64_t> types = gguf->get_int_array("tokenizer.ggml.token_type");
  nlohmann::json model = {{"type", "BPE"}, {"byte_fallback", false}, {"vocab", nlohmann::json::object()}};
  nlohmann::json added = nlohmann::json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    model["vocab"][tokens[i]] = i;
    if (types[i] == 3) added.push_back({{"id", i}, {"content", tokens[i]}, {"special", true}});
  }
  model["merges"] = gguf->get_string_array("tokenizer.ggml.merges");
  ASSERT_FALSE(added.empty());
  const nlohmann::json tokenizer = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", model}};
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("pagellm-bytelevel-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tokenizer.dump();
  hf::JsonFile config, generation;
  config.path = (dir / "config.json").string();
  generation.path = (dir / "generation_config.json").string();
  hf::Metadata kv;
  hf::tokenizer_metadata(dir.string(), config, generation, static_cast<int64_t>(tokens.size()), kv);
  std::filesystem::remove_all(dir);
  auto file = GgufFile::assemble("bytelevel", kv, {}, {}, {});
  EXPECT_EQ(file->get_string("tokenizer.ggml.pre"), "gpt-2");
  auto hf_tok = Tokenizer::from_gguf(*file);
  auto gguf_tok = Tokenizer::from_gguf(*gguf);

  const std::vector<test::VocabCase> cases = test::read_vocab_cases(vocab);
  ASSERT_EQ(cases.size(), 46u);
  for (size_t n = 0; n < cases.size(); ++n) {
    EXPECT_EQ(hf_tok->encode(cases[n].input, false, false), cases[n].expected)
        << "case " << n << ": " << cases[n].input;
  }
  // And on real text, the same ids and text as the GGUF vocabulary, special tokens parsed.
  const std::string text = test::read_text(test::testdata("tinystories/valid-sample.txt")) + "<|endoftext|>";
  const auto a = hf_tok->encode(text, true, true);
  EXPECT_EQ(a, gguf_tok->encode(text, true, true));
  EXPECT_EQ(a.back(), 50256);
  EXPECT_EQ(hf_tok->decode(a, false), gguf_tok->decode(a, false));
}

}  // namespace
}  // namespace pagellm
