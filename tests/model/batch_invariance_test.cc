// Batch invariance (docs/design.md invariant 1): a sequence's logits are bit-identical whether it
// is forwarded alone or in a batch with others, whatever the prefill chunking and thread count.
// Model: a random-weight 2-layer GQA model (tiny-gqa) with a real SPM vocabulary.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <unistd.h>

#include <random>
#include <tuple>

#include "format/gguf.h"
#include "kernels/cpu/cpu_features.h"
#include "model/llama.h"
#include "model/random_model.h"
#include "model_harness.h"
#include "test_util.h"

namespace pagellm {
namespace {

std::string make_model(GgmlType dtype, const std::string& shape = "tiny-gqa") {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("pagellm_" + shape + "_" + type_name(dtype) + "_" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  RandomModelSpec spec;
  spec.shape = shape;
  spec.dtype = dtype;
  spec.seed = 42;
  spec.vocab_path = test::testdata("vocab/ggml-vocab-llama-spm.gguf");
  write_random_model(spec, path);
  return path;
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int n, int32_t vocab) {
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs `prompts` to completion with the given chunk size, `group` sequences per forward pass,
// then `decode_steps` greedy decode steps with all sequences batched. Returns per sequence the
// logits of every prompt position followed by every decode step.
std::vector<std::vector<float>> run(LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                    size_t chunk, size_t group, int decode_steps, int32_t block_size = 16) {
  test::ModelHarness h(model, 256, block_size);
  const int64_t vocab = model.config().vocab_size;
  std::vector<std::vector<float>> out(prompts.size());
  std::vector<size_t> done(prompts.size(), 0);
  for (size_t g0 = 0; g0 < prompts.size(); g0 += group) {
    const size_t g1 = std::min(prompts.size(), g0 + group);
    for (bool any = true; any;) {
      any = false;
      std::vector<test::ModelHarness::Work> work;
      std::vector<size_t> who;
      for (size_t i = g0; i < g1; ++i) {
        if (done[i] == prompts[i].size()) continue;
        // Stagger chunk sizes per sequence so batches mix different offsets.
        const size_t c = std::min(prompts[i].size() - done[i], chunk + (i % 2));
        work.push_back({"s" + std::to_string(i),
                        std::vector<int32_t>(prompts[i].begin() + done[i], prompts[i].begin() + done[i] + c), true});
        who.push_back(i);
        done[i] += c;
        any = true;
      }
      if (!any) break;
      auto rows = h.step(work);
      for (size_t k = 0; k < who.size(); ++k) out[who[k]].insert(out[who[k]].end(), rows[k].begin(), rows[k].end());
    }
  }
  for (int s = 0; s < decode_steps; ++s) {
    std::vector<test::ModelHarness::Work> work;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const float* last = out[i].data() + out[i].size() - vocab;
      work.push_back({"s" + std::to_string(i), {test::argmax(last, vocab)}, true});
    }
    auto rows = h.step(work);
    for (size_t i = 0; i < prompts.size(); ++i) out[i].insert(out[i].end(), rows[i].begin(), rows[i].end());
  }
  return out;
}

class BatchInvariance : public ::testing::TestWithParam<std::tuple<GgmlType, std::string>> {};

TEST_P(BatchInvariance, AloneVsBatchedVsChunked) {
  const std::string path = make_model(std::get<0>(GetParam()), std::get<1>(GetParam()));
  auto file = GgufFile::open(path);
  ThreadPool pool2(2);
  LlamaModel model(*file, &pool2);
  std::mt19937 rng(123);
  std::vector<std::vector<int32_t>> prompts;
  for (int len : {37, 5, 64, 1, 20, 33, 17, 50}) prompts.push_back(random_tokens(rng, len, model.config().vocab_size));

  // Reference: each sequence alone, whole prompt in one pass.
  std::vector<std::vector<float>> alone;
  for (const auto& p : prompts) alone.push_back(run(model, {p}, p.size(), 1, 4)[0]);

  struct Case {
    size_t chunk, group;
  };
  for (Case c : {Case{1, 1}, Case{7, 1}, Case{1000, 3}, Case{7, 3}, Case{1000, 8}, Case{1, 8}, Case{7, 8}}) {
    const auto got = run(model, prompts, c.chunk, c.group, 4);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_TRUE(same_bits(got[i], alone[i])) << "seq " << i << " chunk " << c.chunk << " group " << c.group;
    }
  }
  // Another thread count and a different block size give the same bits too.
  ThreadPool pool1(1);
  LlamaModel model1(*file, &pool1);
  const auto one_thread = run(model1, prompts, 7, 8, 4, 4);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_TRUE(same_bits(one_thread[i], alone[i])) << "1 thread, seq " << i;
  std::filesystem::remove(path);
}

// tiny-gqa-wide: on AVX2 CPUs its weights are repacked at load (block sums, sequential floats).
INSTANTIATE_TEST_SUITE_P(Dtypes, BatchInvariance,
                         ::testing::Combine(::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0),
                                            ::testing::Values(std::string("tiny-gqa"), std::string("tiny-gqa-wide"))),
                         [](const auto& info) {
                           std::string shape = std::get<1>(info.param);
                           for (char& ch : shape) ch = ch == '-' ? '_' : ch;
                           return type_name(std::get<0>(info.param)) + "_" + shape;
                         });

// A model whose Q8_0/Q4_0 weights were repacked at load (block-sum arithmetic) stays close to the
// same model loaded without repacking (GGUF layout, ggml's arithmetic), and gives the same bits
// on the AVX2 tiles as on the AVX-512 VNNI ones.
TEST(Repacking, RepackedModelCloseToAvx2Model) {
  if (!kernels::cpu_has_avx2()) GTEST_SKIP() << "no AVX2: weights are never repacked";
  for (GgmlType dtype : {GgmlType::Q8_0, GgmlType::Q4_0}) {
    const std::string path = make_model(dtype, "tiny-gqa-wide");
    auto file = GgufFile::open(path);
    ThreadPool pool(2);
    std::mt19937 rng(7);
    std::vector<std::vector<int32_t>> prompts;
    LlamaModel repacked(*file, &pool);
    for (int len : {9, 40, 1}) prompts.push_back(random_tokens(rng, len, repacked.config().vocab_size));
    const auto got = run(repacked, prompts, 16, 3, 0);
    if (kernels::cpu_has_avx512_vnni()) {
      kernels::set_avx512_enabled(false);
      const auto got_avx2 = run(repacked, prompts, 16, 3, 0);
      kernels::set_avx512_enabled(true);
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_TRUE(same_bits(got[i], got_avx2[i])) << type_name(dtype) << " seq " << i << ": AVX2 tiles differ";
      }
    }
    kernels::set_repack_enabled(false);
    LlamaModel plain(*file, &pool);
    const auto want = run(plain, prompts, 16, 3, 0);
    kernels::set_repack_enabled(true);
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(got[i].size(), want[i].size());
      EXPECT_FALSE(same_bits(got[i], want[i])) << "repacking did not happen (same bits as the GGUF layout)";
      float max_diff = 0.0f, max_abs = 0.0f;
      for (size_t j = 0; j < got[i].size(); ++j) {
        max_diff = std::max(max_diff, std::fabs(got[i][j] - want[i][j]));
        max_abs = std::max(max_abs, std::fabs(want[i][j]));
      }
      // One activation landing on the other side of a q8_0 rounding boundary moves later layers'
      // logits by ~1% of their range on this random model; a layout bug moves them by ~100%.
      EXPECT_LT(max_diff, 3e-2f * max_abs) << type_name(dtype) << " seq " << i;
    }
    std::filesystem::remove(path);
  }
}

// F32/F16 models: their float weights are repacked at load for the sequential arithmetic
// (ref::dot_*_seq). The logits are the same on the AVX-512 and the AVX2 tiles, differ from the
// 16-lane arithmetic of the GGUF layout (PAGELLM_NO_REPACK) only by rounding. (Batch invariance
// itself: BatchInvariance.AloneVsBatchedVsChunked/F32_tiny_gqa_wide and F16_tiny_gqa_wide.)
TEST(Repacking, SequentialFloatModelSameOnBothIsasAndCloseToWide) {
  if (!kernels::cpu_has_avx2()) GTEST_SKIP() << "no AVX2: weights are never repacked";
  for (GgmlType dtype : {GgmlType::F32, GgmlType::F16}) {
    const std::string path = make_model(dtype, "tiny-gqa-wide");
    auto file = GgufFile::open(path);
    ThreadPool pool(2);
    std::mt19937 rng(8);
    LlamaModel seq(*file, &pool);
    std::vector<std::vector<int32_t>> prompts;
    for (int len : {23, 9, 40, 1}) prompts.push_back(random_tokens(rng, len, seq.config().vocab_size));
    const auto got = run(seq, prompts, 7, 4, 3);
    kernels::set_avx512_enabled(false);
    const auto got_avx2 = run(seq, prompts, 1000, 4, 3);
    kernels::set_avx512_enabled(true);
    kernels::set_repack_enabled(false);
    LlamaModel plain(*file, &pool);
    kernels::set_repack_enabled(true);
    const auto want = run(plain, prompts, 1000, 4, 3);
    for (size_t i = 0; i < prompts.size(); ++i) {
      SCOPED_TRACE(type_name(dtype) + " seq " + std::to_string(i));
      EXPECT_TRUE(same_bits(got[i], got_avx2[i])) << "AVX2 tiles differ";
      ASSERT_EQ(want[i].size(), got[i].size());
      EXPECT_FALSE(same_bits(want[i], got[i])) << "repacking did not happen";
      float max_diff = 0.0f, max_abs = 0.0f;
      for (size_t j = 0; j < want[i].size(); ++j) {
        max_diff = std::max(max_diff, std::fabs(want[i][j] - got[i][j]));
        max_abs = std::max(max_abs, std::fabs(want[i][j]));
      }
      EXPECT_LT(max_diff, 1e-3f * max_abs);
    }
    std::filesystem::remove(path);
  }
}

}  // namespace
}  // namespace pagellm
