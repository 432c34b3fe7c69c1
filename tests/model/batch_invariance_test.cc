// Batch invariance (docs/design.md invariant 1): a sequence's logits are bit-identical whether it
// is forwarded alone or in a batch with others, whatever the prefill chunking and thread count.
// Model: a random-weight 2-layer GQA model (tiny-gqa) with a real SPM vocabulary.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstring>
#include <filesystem>

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
  std::string path = (std::filesystem::temp_directory_path() /
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
std::vector<std::vector<float>> run(LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts, size_t chunk,
                                    size_t group, int decode_steps, int32_t block_size = 16) {
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

// The last layer computes queries and attention, then everything after, only for the rows whose
// logits are wanted (LlamaModel::forward): a prompt's middle chunks want none, its last chunk one
// row. Those rows keep the bits of a batch that wants every row (where nothing is left out), and
// the KV cache written on the way is the same (the decode steps after the prompts read it).
// Llama (F32, Q4_0), and the golden files of gemma3 (q/k norms, q scaled, a sliding window),
// phi3 (fused qkv) and qwen2 (q/k/v biases).
TEST(BatchInvariance, OnlyTheWantedRowsGoOnAfterTheLastAttention) {
  for (const std::string name :
       {"F32", "Q4_0", "archs/gemma3-s14-f32.gguf", "archs/phi3-s15-f32.gguf", "archs/qwen2-s12-f32.gguf"}) {
    SCOPED_TRACE(name);
    const bool made = name.find('/') == std::string::npos;
    const std::string path =
        made ? make_model(name == "F32" ? GgmlType::F32 : GgmlType::Q4_0, "tiny-gqa-wide") : test::testdata(name);
    auto file = GgufFile::open(path);
    ThreadPool pool2(2);
    LlamaModel model(*file, &pool2);
    const int64_t vocab = model.config().vocab_size;
    std::mt19937 rng(7);
    std::vector<std::vector<int32_t>> prompts;
    for (int len : {29, 12, 40}) prompts.push_back(random_tokens(rng, len, vocab));
    const auto all = run(model, prompts, 1000, 3, 3);  // every row of every step wanted

    test::ModelHarness h(model, 256, 16);
    std::vector<std::vector<float>> got(prompts.size());
    std::vector<size_t> done(prompts.size(), 0);
    for (bool any = true; any;) {
      any = false;
      std::vector<test::ModelHarness::Work> work;
      std::vector<size_t> who;
      for (size_t i = 0; i < prompts.size(); ++i) {
        if (done[i] == prompts[i].size()) continue;
        const size_t c = std::min<size_t>(prompts[i].size() - done[i], 9);
        const bool final_chunk = done[i] + c == prompts[i].size();
        // Sequence 0 wants every row; the others nothing until their last prompt token.
        const int32_t rows = i == 0 ? static_cast<int32_t>(c) : (final_chunk ? 1 : 0);
        work.push_back({"s" + std::to_string(i),
                        std::vector<int32_t>(prompts[i].begin() + done[i], prompts[i].begin() + done[i] + c), false,
                        rows});
        who.push_back(i);
        done[i] += c;
        any = true;
      }
      if (!any) break;
      auto rows = h.step(work);
      for (size_t k = 0; k < who.size(); ++k) got[who[k]].insert(got[who[k]].end(), rows[k].begin(), rows[k].end());
    }
    for (int s = 0; s < 3; ++s) {  // greedy decode steps (one row each), as run() takes them
      std::vector<test::ModelHarness::Work> work;
      for (size_t i = 0; i < prompts.size(); ++i) {
        work.push_back({"s" + std::to_string(i), {test::argmax(got[i].data() + got[i].size() - vocab, vocab)}, false});
      }
      auto rows = h.step(work);
      for (size_t i = 0; i < prompts.size(); ++i) got[i].insert(got[i].end(), rows[i].begin(), rows[i].end());
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      // all[i]: every prompt row, then 3 decode rows; got[i]: the same for sequence 0, else the
      // last prompt row, then 3 decode rows.
      const size_t skip = i == 0 ? 0 : (prompts[i].size() - 1) * vocab;
      const std::vector<float> want(all[i].begin() + static_cast<std::ptrdiff_t>(skip), all[i].end());
      EXPECT_TRUE(same_bits(got[i], want)) << "seq " << i;
    }
    if (made) std::filesystem::remove(path);
  }
}

// tiny-gqa-wide: on AVX2 CPUs its weights are repacked at load (block sums, sequential floats).
INSTANTIATE_TEST_SUITE_P(Dtypes, BatchInvariance,
                         ::testing::Combine(::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::Q8_0,
                                                              GgmlType::Q4_0),
                                            ::testing::Values(std::string("tiny-gqa"), std::string("tiny-gqa-wide"))),
                         [](const auto& info) {
                           std::string shape = std::get<1>(info.param);
                           for (char& ch : shape) ch = ch == '-' ? '_' : ch;
                           return type_name(std::get<0>(info.param)) + "_" + shape;
                         });

// One arithmetic per weight family on every CPU (docs/design.md, "Kernel table"): the same
// model loaded for each ISA this CPU has (scalar: GGUF layout and the oracles; AVX2 / AVX-512:
// repacked tiles) gives the same logits bit for bit, batched, chunked and decoding, so a machine
// without AVX2 (or with AVX-512) computes what this one does.
TEST(KernelTable, EveryIsaGivesTheSameLogits) {
  for (GgmlType dtype : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0}) {
    for (const char* shape : {"tiny-gqa", "tiny-gqa-wide"}) {
      SCOPED_TRACE(type_name(dtype) + " " + shape);
      const std::string path = make_model(dtype, shape);
      auto file = GgufFile::open(path);
      ThreadPool pool(2);
      std::mt19937 rng(7);
      std::vector<std::vector<int32_t>> prompts;
      LlamaModel scalar(*file, &pool, kernels::Isa::kScalar);
      for (int len : {9, 40, 1}) prompts.push_back(random_tokens(rng, len, scalar.config().vocab_size));
      const auto want = run(scalar, prompts, 16, 3, 3);
      for (kernels::Isa isa : kernels::usable_isas()) {
        if (isa == kernels::Isa::kScalar) continue;
        LlamaModel simd(*file, &pool, isa);
        const auto got = run(simd, prompts, 7, 2, 3);
        for (size_t i = 0; i < prompts.size(); ++i) {
          EXPECT_TRUE(same_bits(got[i], want[i])) << kernels::isa_name(isa) << " seq " << i;
        }
      }
      std::filesystem::remove(path);
    }
  }
}

// The quantized types beyond Q8_0 / Q4_0, on llama.cpp's own files (../shared/testdata/kquant,
// llama-quantize's mixes: Q4_K_M is Q4_K + Q6_K, Q3_K_M is Q3_K + Q4_K + Q5_K + Q6_K, ...): each
// sequence's logits alone equal its logits batched and chunked, with 1 or 2 threads, and on
// every ISA this CPU has (scalar oracles, AVX2 tiles, AVX-512 VNNI tiles).
class BatchInvarianceKquant : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchInvarianceKquant, AloneVsBatchedVsChunkedOnEveryIsa) {
  auto file = GgufFile::open(test::testdata("kquant/llama-kq-s7-" + GetParam() + ".gguf"));
  ThreadPool pool2(2), pool1(1);
  LlamaModel model(*file, &pool2);
  std::mt19937 rng(99);
  std::vector<std::vector<int32_t>> prompts;
  for (int len : {37, 5, 20, 1}) prompts.push_back(random_tokens(rng, len, model.config().vocab_size));
  std::vector<std::vector<float>> alone;
  for (const auto& p : prompts) alone.push_back(run(model, {p}, p.size(), 1, 3)[0]);
  for (kernels::Isa isa : kernels::usable_isas()) {
    for (ThreadPool* pool : {&pool1, &pool2}) {
      LlamaModel m(*file, pool, isa);
      for (size_t chunk : {size_t{1}, size_t{7}, size_t{1000}}) {
        const auto got = run(m, prompts, chunk, 3, 3);
        for (size_t i = 0; i < prompts.size(); ++i) {
          EXPECT_TRUE(same_bits(got[i], alone[i]))
              << kernels::isa_name(isa) << " threads " << pool->num_threads() << " chunk " << chunk << " seq " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Files, BatchInvarianceKquant,
                         ::testing::Values("q4_k_m", "q5_k_m", "q3_k_m", "q2_k", "q6_k", "iq4_xs", "q4_1", "q5_0",
                                           "q5_1", "iq4_nl"),
                         [](const auto& info) { return std::string(info.param); });

// The other architectures (src/model/architectures.h), on their golden files: gemma3 (sliding
// window of 16 keys on layer 0 with its own RoPE base, q/k norms, post norms, GeGLU, embedding
// scale; prompts and decode steps run well past the window, chunks start inside and outside it),
// phi3 (fused qkv and gate_up, NEOX RoPE, q scaled before attention) and qwen2 (q/k/v biases).
// Alone, batched, chunked, 1 or 2 threads, another block size, and every ISA of this CPU: the same
// bits.
TEST(BatchInvarianceArchs, AloneVsBatchedVsChunkedVsIsa) {
  for (const char* name : {"gemma3-s14-f32.gguf", "phi3-s15-f32.gguf", "qwen2-s12-f32.gguf"}) {
    SCOPED_TRACE(name);
    auto file = GgufFile::open(test::testdata(std::string("archs/") + name));
    ThreadPool pool2(2);
    LlamaModel model(*file, &pool2);
    std::mt19937 rng(321);
    std::vector<std::vector<int32_t>> prompts;
    for (int len : {37, 5, 64, 1, 20, 33}) prompts.push_back(random_tokens(rng, len, model.config().vocab_size));
    std::vector<std::vector<float>> alone;
    for (const auto& p : prompts) alone.push_back(run(model, {p}, p.size(), 1, 6)[0]);
    for (auto [chunk, group] : {std::pair<size_t, size_t>{1, 1}, {7, 3}, {1000, 6}, {15, 6}}) {
      const auto got = run(model, prompts, chunk, group, 6);
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_TRUE(same_bits(got[i], alone[i])) << "seq " << i << " chunk " << chunk << " group " << group;
      }
    }
    ThreadPool pool1(1);
    for (kernels::Isa isa : kernels::usable_isas()) {
      LlamaModel other(*file, &pool1, isa);
      const auto got = run(other, prompts, 7, 6, 6, 4);
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_TRUE(same_bits(got[i], alone[i])) << kernels::isa_name(isa) << ", 1 thread, seq " << i;
      }
    }
  }
}

}  // namespace
}  // namespace pagellm
