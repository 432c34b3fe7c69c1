// `pagellm make-model`: a vocabulary whose tokenizer pagellm cannot load is refused before any file
// is written (the model would run nowhere); a supported one gives a file that info says runs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "test_util.h"

namespace pagellm {
namespace {

using test::run_command;

TEST(MakeModelCli, RefusesAVocabularyNoCommandCanLoad) {
  const std::string out =
      (std::filesystem::temp_directory_path() / ("pagellm-make-model-" + std::to_string(::getpid()) + ".gguf"))
          .string();
  const std::string make = std::string(PAGELLM_BINARY) + " make-model --shape tiny-gqa --dtype f32 -o '" + out +
                           "' --vocab " + test::testdata("vocab/ggml-vocab-");
  const auto [bert, bert_status] = run_command(make + "bert-bge.gguf 2>&1");
  EXPECT_NE(bert_status, 0) << bert;
  EXPECT_NE(bert.find("--vocab '"), std::string::npos) << bert;
  EXPECT_NE(bert.find("tokenizer.ggml.model = 'bert' is not supported"), std::string::npos) << bert;
  EXPECT_FALSE(std::filesystem::exists(out));

  const auto [spm, spm_status] = run_command(make + "llama-spm.gguf 2>&1");
  ASSERT_EQ(spm_status, 0) << spm;
  const auto [info, info_status] = run_command(std::string(PAGELLM_BINARY) + " info '" + out + "'");
  EXPECT_EQ(info_status, 0) << info;
  EXPECT_NE(info.find("\nruns: yes"), std::string::npos) << info;
  std::filesystem::remove(out);
}

}  // namespace
}  // namespace pagellm
