// `pagellm generate` and `bench latency` on the bundled model: the KV pool's size
// (--kv-cache-memory), the warning when it holds less than the model's context, and the clear
// error for a pool the machine cannot hold.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace pagellm {
namespace {

using test::run_command;

const std::string kGenerate = std::string(PAGELLM_BINARY) + " generate -m " + test::source_dir() +
                              "/models/stories260K-f32.gguf -p 'Once upon a time' --temperature 0 --threads 1 ";

// stories260K: context 512, 1280 bytes of f32 K/V per token.
TEST(GenerateCli, ASmallerKvCacheLimitsTheRequestAndSaysSo) {
  const auto [full, full_status] = run_command(kGenerate + "-n 4 2>&1");
  EXPECT_EQ(full_status, 0) << full;
  EXPECT_EQ(full.find("warning: the KV cache"), std::string::npos) << full;

  // 4 blocks of 16 tokens: prompt + max_tokens are limited to 64, and stderr says so first.
  const auto [small, small_status] = run_command(kGenerate + "-n 200 --ignore-eos --kv-cache-memory 4blocks 2>&1");
  EXPECT_EQ(small_status, 0) << small;
  EXPECT_EQ(small.find("warning: the KV cache holds 64 tokens, less than the model's context of 512: requests are "
                       "limited to 64 tokens (prompt + max_tokens); --kv-cache-memory sets its size\n"),
            0u)
      << small;
  EXPECT_NE(small.find("finish_reason=length"), std::string::npos) << small;
  const auto [json, json_status] = run_command(kGenerate + "-n 200 --ignore-eos --kv-cache-memory 81920 --json");
  EXPECT_EQ(json_status, 0) << json;
  // 81920 bytes = 4 blocks: the prompt and the generated tokens fill the 64 tokens.
  const nlohmann::json j = nlohmann::json::parse(json);
  EXPECT_EQ(j["finish_reason"], "length");
  EXPECT_EQ(j["prompt_token_ids"].size() + j["token_ids"].size(), 64u) << json;

  const auto [bad, bad_status] = run_command(kGenerate + "-n 4 --kv-cache-memory lots 2>&1");
  EXPECT_NE(bad_status, 0);
  EXPECT_NE(bad.find("--kv-cache-memory: expected bytes"), std::string::npos) << bad;
  // An empty value is refused, not read as "use the default".
  const auto [empty, empty_status] = run_command(kGenerate + "-n 4 --kv-cache-memory '' 2>&1");
  EXPECT_NE(empty_status, 0);
  EXPECT_NE(empty.find("--kv-cache-memory: expected bytes or a block count, got ''"), std::string::npos) << empty;
}

// A sliding-window model keeps two KV cache groups, so each token holds a slot in both: 4 blocks of
// 16 tokens hold requests of 32 tokens, and the warning says 32, not 64.
TEST(GenerateCli, TheLimitCountsEveryKvCacheGroup) {
  const std::string gen = std::string(PAGELLM_BINARY) + " generate -m " + test::testdata("archs/gemma3-s14-f32.gguf") +
                          " -p hi -n 200 --ignore-eos --temperature 0 --threads 1 --kv-cache-memory 4blocks";
  const auto [err, err_status] = run_command(gen + " 2>&1 >/dev/null");
  EXPECT_EQ(err_status, 0) << err;
  EXPECT_EQ(err.find("warning: the KV cache holds 32 tokens, less than the model's context of 32768"), 0u) << err;
  const auto [json, json_status] = run_command(gen + " --json 2>/dev/null");
  ASSERT_EQ(json_status, 0) << json;
  const nlohmann::json j = nlohmann::json::parse(json);
  EXPECT_EQ(j["prompt_token_ids"].size() + j["token_ids"].size(), 32u) << json;
}

TEST(GenerateCli, APoolLargerThanTheMachineIsAnErrorNamingTheFlag) {
  const auto [out, status] = run_command(kGenerate + "-n 4 --kv-cache-memory 16TiB 2>&1");
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  // 16 TiB = 858993459 blocks of 16 tokens of 20480 bytes (16777215.99 MiB), with the buffers.
  EXPECT_NE(out.find("error: the KV cache (858993459 blocks of 16 tokens, 16777216.0 MiB) and the runner's "),
            std::string::npos)
      << out;
  // (in a container with a memory limit below the RAM, that limit is named instead)
  EXPECT_TRUE(out.find(", but this machine's memory is ") != std::string::npos ||
              out.find(", but the memory limit of cgroup /") != std::string::npos)
      << out;
  EXPECT_NE(out.find(" MiB; give a smaller KV cache with --kv-cache-memory\n"), std::string::npos) << out;
}

// bench latency times requests that fit the pool it was given.
TEST(GenerateCli, BenchLatencyFitsTheKvCacheItIsGiven) {
  const std::string bench = std::string(PAGELLM_BINARY) + " bench latency -m " + test::source_dir() +
                            "/models/stories260K-f32.gguf --threads 1 --probe-mib 1 --kv-cache-memory 8blocks ";
  const auto [out, status] = run_command(bench + "--prompt-tokens 500 --gen-tokens 8 --json 2>&1");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("warning: the KV cache holds 128 tokens"), std::string::npos) << out;
  EXPECT_NE(out.find("prompt of 120"), std::string::npos) << out;
  EXPECT_NE(out.find("\"prompt_tokens\":120"), std::string::npos) << out;
  const auto [big, big_status] = run_command(bench + "--gen-tokens 200 2>&1");
  EXPECT_NE(big_status, 0);
  EXPECT_NE(big.find("--gen-tokens must be in [2, 127]"), std::string::npos) << big;
}

}  // namespace
}  // namespace pagellm
