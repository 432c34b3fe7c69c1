// A Hugging Face directory runs as its GGUF conversion: TinyStories-656K's hf/ and its F32
// GGUF (an independent converter) give the same logits, bit for bit, over prompt and decode.
#include <gtest/gtest.h>

#include "format/hf_dir.h"
#include "model/llama.h"
#include "model_harness.h"
#include "test_util.h"

namespace pagellm {
namespace {

TEST(HfModel, LogitsEqualTheGgufConversion) {
  auto hf_file = open_model_file(test::testdata("tinystories-656k/hf"));
  auto gguf_file = GgufFile::open(test::testdata("tinystories-656k/TinyStories-656K-f32.gguf"));
  ThreadPool pool(2);
  LlamaModel hf(*hf_file, &pool), gguf(*gguf_file, &pool);
  EXPECT_EQ(hf.config().rope_type, gguf.config().rope_type);
  test::ModelHarness a(hf, 16, 16), b(gguf, 16, 16);
  std::vector<int32_t> prompt = {1, 300, 25, 700, 12, 99};
  auto la = a.step({{"s", prompt, true}}), lb = b.step({{"s", prompt, true}});
  ASSERT_EQ(la[0].size(), prompt.size() * 2048);
  EXPECT_EQ(la[0], lb[0]);
  int32_t next = test::argmax(la[0].data() + (prompt.size() - 1) * 2048, 2048);
  for (int step = 0; step < 40; ++step) {
    la = a.step({{"s", {next}}});
    lb = b.step({{"s", {next}}});
    ASSERT_EQ(la[0], lb[0]) << "decode step " << step;
    next = test::argmax(la[0].data(), 2048);
  }
}

}  // namespace
}  // namespace pagellm
