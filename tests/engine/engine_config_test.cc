// EngineConfig: one default and one check per setting; plan_kv_cache sizes the pool from the
// model's hyper-parameters; a non-default --block-size changes where K/V live, not the tokens.
#include "engine/engine_config.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/engine_core.h"
#include "engine/llm.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "test_util.h"

namespace pagellm {
namespace {

const std::string kModel = test::source_dir() + "/models/stories260K-f32.gguf";

// The message of the Error that validate() throws for `c` ("" if none).
std::string validate_error(const EngineConfig& c) {
  try {
    c.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(EngineConfig, DefaultsAreValid) { EXPECT_EQ(validate_error(EngineConfig{}), ""); }

TEST(EngineConfig, BlockSizeIsAPowerOfTwoUpTo256) {
  for (int32_t ok : {1, 2, 16, 128, 256}) {
    EngineConfig c;
    c.block_size = ok;
    EXPECT_EQ(validate_error(c), "") << ok;
  }
  for (int32_t bad : {0, -16, 3, 24, 512}) {
    EngineConfig c;
    c.block_size = bad;
    EXPECT_EQ(validate_error(c), "--block-size must be a power of two in [1, 256], got " + std::to_string(bad));
  }
}

TEST(EngineConfig, EachCheckNamesItsFlagAndValue) {
  EngineConfig c;
  c.max_num_batched_tokens = 0;
  EXPECT_EQ(validate_error(c), "--max-num-batched-tokens must be >= 1, got 0");
  c = EngineConfig{};
  c.max_num_seqs = -2;
  EXPECT_EQ(validate_error(c), "--max-num-seqs must be >= 1, got -2");
  c = EngineConfig{};
  c.max_waiting = 0;
  EXPECT_EQ(validate_error(c), "--max-waiting must be >= 1, got 0");
  c = EngineConfig{};
  c.num_threads = -1;
  EXPECT_EQ(validate_error(c), "--threads must be in [0, 4096], got -1");
  c = EngineConfig{};
  c.kv_dtype = GgmlType::Q8_0;
  EXPECT_NE(validate_error(c).find("--kv-dtype must be f32 or f16"), std::string::npos);
  c = EngineConfig{};
  c.kv_cache_bytes = 1 << 20;
  c.kv_cache_blocks = 10;
  EXPECT_EQ(validate_error(c), "--kv-cache-memory: give bytes or blocks, not both");
  c = EngineConfig{};
  c.max_step_ms = -0.5;  // only kAutoMaxStepMs (-1) is a negative that means something
  EXPECT_NE(validate_error(c).find("--max-step-ms must be auto or in [0, 3600000] milliseconds"), std::string::npos);
  c.max_step_ms = EngineConfig::kAutoMaxStepMs;
  EXPECT_EQ(validate_error(c), "");
  c.max_step_ms = -2;
  EXPECT_NE(validate_error(c).find("--max-step-ms"), std::string::npos);
  c.max_step_ms = std::nan("");
  EXPECT_NE(validate_error(c).find("--max-step-ms"), std::string::npos);
  c = EngineConfig{};
  c.auto_step_factor = 1;  // a step of the decodes alone would leave prefill nothing
  EXPECT_NE(validate_error(c).find("--auto-step-factor must be in (1, 100]"), std::string::npos);
  c.auto_step_factor = std::nan("");
  EXPECT_NE(validate_error(c).find("--auto-step-factor"), std::string::npos);
  c.auto_step_factor = 1.5;
  EXPECT_EQ(validate_error(c), "");
  c = EngineConfig{};
  c.num_speculative_tokens = 17;
  EXPECT_EQ(validate_error(c), "--num-speculative-tokens must be in [1, 16], got 17");
  c = EngineConfig{};
  c.ngram_min = 3;
  c.ngram_max = 2;
  EXPECT_EQ(validate_error(c), "--ngram-min must be >= 1 and --ngram-max in [--ngram-min, 64], got 3 and 2");
  c = EngineConfig{};
  c.speculative_ngram = true;
  c.speculative_self_layers = 2;
  const std::string three =
      "--speculative-ngram, --speculative-self-layers and --speculative-model are three proposers: choose one";
  EXPECT_EQ(validate_error(c), three);
  c.speculative_ngram = false;
  c.speculative_model = "draft.gguf";
  EXPECT_EQ(validate_error(c), three);
  c.speculative_model.clear();
  c.speculative_self_layers = -1;
  EXPECT_EQ(validate_error(c), "--speculative-self-layers must be >= 1 (0: off), got -1");
  EXPECT_EQ(parse_kv_dtype("f16"), GgmlType::F16);
  EXPECT_THROW(parse_kv_dtype("bf16"), Error);
}

TEST(EngineConfig, SchedulerLimitsAreAView) {
  EngineConfig c;
  c.max_num_seqs = 3;
  c.max_num_batched_tokens = 77;
  const SchedulerLimits l = c.scheduler_limits();
  EXPECT_EQ(l.max_num_seqs, 3);
  EXPECT_EQ(l.max_num_batched_tokens, 77);
  c.max_step_ms = 250;
  c.block_size = 32;
  EXPECT_EQ(c.scheduler_limits().max_step_seconds, 0.25);
  EXPECT_EQ(c.scheduler_limits().min_prefill_chunk, 32);  // a block of tokens
}

// stories260K: 5 layers, 4 KV heads of 8 dims, context 512: 2 x 5 x 4 x 8 x 4 = 1280 bytes per
// token in f32, 20480 per 16-token block.
TEST(PlanKvCache, SizesFromTheModel) {
  auto file = GgufFile::open(kModel);
  const LlamaConfig m = LlamaConfig::from_gguf(*file);
  ASSERT_EQ(kv_bytes_per_token(m, GgmlType::F32), 1280);
  ASSERT_EQ(kv_bytes_per_token(m, GgmlType::F16), 640);
  EngineConfig c;
  EXPECT_EQ(plan_kv_cache(c, m), 32);  // one context: 512 / 16
  c.block_size = 256;
  EXPECT_EQ(plan_kv_cache(c, m), 2);
  c.block_size = 16;
  c.kv_cache_default_contexts = 16;
  EXPECT_EQ(plan_kv_cache(c, m), 512);  // 10 MiB, under the 1 GiB cap
  c.kv_cache_blocks = 200;
  EXPECT_EQ(plan_kv_cache(c, m), 200);
  c.kv_cache_blocks = 0;
  c.kv_cache_bytes = 20480 * 7 + 20479;
  EXPECT_EQ(plan_kv_cache(c, m), 7);  // whole blocks only
  c.kv_dtype = GgmlType::F16;
  EXPECT_EQ(plan_kv_cache(c, m), 15);
  c.kv_cache_bytes = 100;
  EXPECT_THROW(plan_kv_cache(c, m), Error);
  c.kv_cache_bytes = 0;
  c.block_size = 5;
  EXPECT_THROW(plan_kv_cache(c, m), Error);  // validated first
}

// A default pool stops at 1 GiB even for one context (generate, bench): a 131072-token context
// of Llama 3.1 8B is 32 GiB in f32. A budget given is taken as it is.
TEST(PlanKvCache, TheDefaultStopsAtOneGibEvenForOneContext) {
  auto file = GgufFile::open(kModel);
  LlamaConfig m = LlamaConfig::from_gguf(*file);
  m.max_position_embeddings = int64_t{1} << 22;  // 5 GiB of f32 K/V at 1280 bytes per token
  EngineConfig c;
  EXPECT_EQ(plan_kv_cache(c, m), (int64_t{1} << 30) / 20480);
  c.kv_cache_default_contexts = 16;
  EXPECT_EQ(plan_kv_cache(c, m), (int64_t{1} << 30) / 20480);
  c.kv_cache_bytes = int64_t{2} << 30;
  EXPECT_EQ(plan_kv_cache(c, m), (int64_t{2} << 30) / 20480);
}

// A pool larger than the machine's memory is refused at load, naming its size and the flag,
// rather than killed while it is zero-filled.
TEST(PlanKvCache, APoolLargerThanTheMachineIsRefused) {
  const int64_t memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  ASSERT_GT(memory, 0);
  EngineConfig c;
  c.model_path = kModel;
  c.num_threads = 1;
  c.kv_cache_bytes = 2 * memory;
  try {
    LLM llm(c);
    ADD_FAILURE() << "a KV cache of twice the memory was allocated";
  } catch (const Error& e) {
    const std::string what = e.what();
    // (in a container with a memory limit below the RAM, that limit is named instead)
    EXPECT_TRUE(what.find(", but this machine's memory is ") != std::string::npos ||
                what.find(", but the memory limit of cgroup /") != std::string::npos)
        << what;
    EXPECT_NE(what.find("--kv-cache-memory"), std::string::npos) << what;
  }
}

TEST(PlanKvCache, LlmUsesThePlan) {
  EngineConfig c;
  c.model_path = kModel;
  c.num_threads = 2;
  c.block_size = 8;
  c.kv_cache_blocks = 50;
  LLM llm(c);
  EXPECT_EQ(llm.kv_cache().num_blocks(), 50);
  EXPECT_EQ(llm.kv_cache().block_size(), 8);
  EXPECT_EQ(llm.kv_manager().block_size(), 8);
  c.block_size = 12;
  EXPECT_THROW(LLM{c}, Error);
}

// A Hugging Face directory whose config.json holds fewer layers than its safetensors: refused
// (not run as a truncated model), in config.json's and the safetensors' names.
TEST(LlmLoad, HuggingFaceDirectoryErrorsNameTheConfigFieldAndTensor) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("pagellm-llm-hf-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(test::testdata("tinystories-656k/hf"))) {
    fs::copy_file(e.path(), dir / e.path().filename());
  }
  fs::permissions(dir / "config.json", fs::perms::owner_write, fs::perm_options::add);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  ASSERT_GT(config["num_hidden_layers"].get<int>(), 1);
  config["num_hidden_layers"] = 1;
  std::ofstream(dir / "config.json") << config.dump();
  EngineConfig c;
  c.model_path = dir.string();
  c.num_threads = 1;
  try {
    LLM llm(c);
    ADD_FAILURE() << "a model with its layer 1 dropped loaded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("is of layer 1, but llama.block_count = 1"), std::string::npos) << what;
    EXPECT_NE(what.find("config.json's \"num_hidden_layers\""), std::string::npos) << what;
    EXPECT_NE(what.find("'model.layers.1."), std::string::npos) << what;
  }
  fs::remove_all(dir);
}

// Tokenizer metadata errors name the model file once: a missing key (GgufFile's message, which
// names the file itself) and an unsupported value (the tokenizer's, which does not).
TEST(LlmLoad, TokenizerErrorsNameTheFileOnce) {
  const auto src = GgufFile::open(kModel);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("pagellm-llm-tok-" + std::to_string(::getpid()) + ".gguf")).string();
  for (const bool drop : {true, false}) {
    GgufWriter w;
    for (const auto& [key, value] : src->metadata()) {
      if (key == "general.alignment") continue;
      if (key == "tokenizer.ggml.model") {
        if (!drop) w.set(key, GgufValue::str("bert"));
        continue;
      }
      w.set(key, value);
    }
    for (const GgufTensorInfo& t : src->tensors()) {
      w.add_tensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.size_bytes));
    }
    w.write(path);
    EngineConfig c;
    c.model_path = path;
    c.num_threads = 1;
    try {
      LLM llm(c);
      ADD_FAILURE() << "a model without a usable tokenizer.ggml.model loaded";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(drop ? "required key 'tokenizer.ggml.model' is missing" : "'bert' is not supported"),
                std::string::npos)
          << what;
      const size_t first = what.find(path);
      EXPECT_NE(first, std::string::npos) << what;
      EXPECT_EQ(what.find(path, first + 1), std::string::npos) << what;
    }
  }
  std::filesystem::remove(path);
}

// Greedy tokens of a few requests run together, with the given block size (several prompts, one
// longer than a 16-token block, chunked prefill of 7 tokens so chunks straddle blocks).
std::vector<std::vector<int32_t>> greedy_tokens(int32_t block_size) {
  EngineConfig c;
  c.model_path = kModel;
  c.num_threads = 2;
  c.block_size = block_size;
  c.max_num_batched_tokens = 7;
  c.kv_cache_default_contexts = 4;
  LLM llm(c);
  EngineCore core(llm);
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 403, 407, 1520, 1339},
      {1, 9038, 2501, 263, 931, 29892, 727, 471, 263, 2217, 7826, 4257, 365, 2354, 29889, 2296, 5360, 29879},
      {1, 32, 77}};
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineRequest r;
    r.request_id = std::to_string(i);
    r.prompt_token_ids = prompts[i];
    for (int32_t& t : r.prompt_token_ids) t %= static_cast<int32_t>(llm.model().config().vocab_size);
    r.sampling.temperature = 0;
    r.max_tokens = 40;
    r.ignore_eos = true;
    core.add_request(r);
  }
  std::vector<std::vector<int32_t>> out(prompts.size());
  while (core.has_work()) {
    for (const EngineCoreOutput& o : core.step()) {
      auto& v = out[std::stoul(o.request_id)];
      v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
  }
  return out;
}

TEST(BlockSize, GreedyTokensDoNotDependOnIt) {
  const auto want = greedy_tokens(16);
  for (const auto& t : want) ASSERT_EQ(t.size(), 40u);
  for (int32_t bs : {1, 4, 32, 256}) EXPECT_EQ(greedy_tokens(bs), want) << "block_size " << bs;
}

// The memory check's estimate of the runner's buffers counts a draft model as a second model
// whose logits are one row per request: the draft's buffers are not left out of it.
TEST(RunnerBufferBytes, CountsTheDraftModelsBuffers) {
  const LlamaConfig m = LlamaConfig::from_gguf(*GgufFile::open(kModel));
  const LlamaConfig d =
      LlamaConfig::from_gguf(*GgufFile::open(test::testdata("tinystories-656k/TinyStories-656K-f16.gguf")));
  EngineConfig e;
  const int64_t alone = runner_buffer_bytes(e, d, 0);
  EXPECT_GT(alone, int64_t{32} << 20);
  e.speculative_model = "draft.gguf";
  e.num_speculative_tokens = 4;
  const int64_t target = runner_buffer_bytes(e, m, 100);
  const int64_t both = runner_buffer_bytes(e, m, 100, &d);
  EXPECT_EQ(both - target, alone - (int64_t{32} << 20));
  // Every term grows with the step's tokens.
  e.max_num_batched_tokens *= 2;
  EXPECT_GT(runner_buffer_bytes(e, m, 100, &d) - runner_buffer_bytes(e, m, 100), both - target);
}

}  // namespace
}  // namespace pagellm
