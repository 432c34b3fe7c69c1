// `pagellm bench latency` end to end on the bundled model: the JSON fields a run reports, and the
// settings it refuses with a message instead of printing 0.00 tokens/s.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

namespace pagellm::cli {
namespace {

const std::string kModel = std::string(PAGELLM_SOURCE_DIR) + "/models/stories260K-f32.gguf";

struct CliRun {
  int status;
  std::string out, err;
};

// env: variables for this run (prefix of the shell command).
CliRun run_latency(const std::string& args, const std::string& probe_mib = "8", const std::string& env = "") {
  // Per process: ctest runs the tests of this file in parallel, each in its own process, and
  // a shared file name let one test read another's output.
  const std::string tag = std::to_string(::getpid());
  const std::string out = testing::TempDir() + "bench_latency_out_" + tag + ".txt";
  const std::string err = testing::TempDir() + "bench_latency_err_" + tag + ".txt";
  const std::string cmd = env + " " + std::string(PAGELLM_BINARY) + " bench latency -m " + kModel + " --probe-mib " +
                          probe_mib + " --threads 2 " + args + " > " + out + " 2> " + err;
  const int status = std::system(cmd.c_str());
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  CliRun run{status, slurp(out), slurp(err)};
  std::remove(out.c_str());
  std::remove(err.c_str());
  return run;
}

TEST(BenchLatencyCli, JsonReportsEveryFigure) {
  const CliRun r = run_latency("--prompt-tokens 32 --gen-tokens 8 --batch 1,4 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_tokens"], 32);
  EXPECT_EQ(j["gen_tokens"], 7);  // the first token comes from the prefill
  EXPECT_GT(j["prefill_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["decode_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["batch_decode_tokens_per_s"]["1"].get<double>(), 0);
  EXPECT_GT(j["batch_decode_tokens_per_s"]["4"].get<double>(), 0);
  EXPECT_GT(j["bandwidth_gb_per_s"].get<double>(), 0);
  EXPECT_GT(j["decode_bytes_per_token"].get<int64_t>(), 0);
  EXPECT_LE(j["decode_bytes_per_token"].get<int64_t>(), j["model_bytes"].get<int64_t>());
  const std::string isa = j["kernels"].get<std::string>();  // the kernels the figures come from
  EXPECT_TRUE(isa == "scalar" || isa == "avx2" || isa == "avx512" || isa == "avx512vnni" || isa == "avx512bf16") << isa;
}

// The kernels named are the ones that ran: the environment caps them at load.
TEST(BenchLatencyCli, NamesTheKernelsTheEnvironmentLeaves) {
  const CliRun r = run_latency("--prompt-tokens 4 --gen-tokens 2 --json", "1", "PAGELLM_NO_AVX2=1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["kernels"], "scalar");
}

// --kv-dtype as generate and serve take it (llama.cpp's llama-bench times an f16 KV cache).
TEST(BenchLatencyCli, TimesTheKvDtypeAskedFor) {
  const CliRun f16 = run_latency("--prompt-tokens 4 --gen-tokens 2 --kv-dtype f16 --json", "1");
  ASSERT_EQ(f16.status, 0) << f16.err;
  EXPECT_EQ(nlohmann::json::parse(f16.out)["kv_dtype"], "f16");
  const CliRun f32 = run_latency("--prompt-tokens 4 --gen-tokens 2 --json", "1");
  ASSERT_EQ(f32.status, 0) << f32.err;
  EXPECT_EQ(nlohmann::json::parse(f32.out)["kv_dtype"], "f32");
  const CliRun bad = run_latency("--prompt-tokens 4 --gen-tokens 2 --kv-dtype q8", "1");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("--kv-dtype"), std::string::npos) << bad.err;
}

TEST(BenchLatencyCli, PromptGivesWayToGeneratedTokens) {
  // stories260K has a 512-token context: 512 + 16 do not fit, the prompt is shortened to 496.
  const CliRun r = run_latency("--prompt-tokens 512 --gen-tokens 16 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["prompt_tokens"], 496);
  EXPECT_NE(r.err.find("prompt of 496"), std::string::npos) << r.err;
}

TEST(BenchLatencyCli, RefusesWhatCannotBeMeasured) {
  const CliRun big = run_latency("--prompt-tokens 8 --gen-tokens 8 --batch 1,64");
  EXPECT_NE(big.status, 0);
  EXPECT_NE(big.err.find("--batch 64: 64 sequences do not fit the KV cache"), std::string::npos) << big.err;
  EXPECT_NE(big.err.find("at most 32"), std::string::npos) << big.err;
  const CliRun one = run_latency("--gen-tokens 1");
  EXPECT_NE(one.status, 0);
  EXPECT_NE(one.err.find("--gen-tokens must be in [2, 511]"), std::string::npos) << one.err;
  const CliRun zero = run_latency("--prompt-tokens 0");
  EXPECT_NE(zero.status, 0);
  EXPECT_NE(zero.err.find("--prompt-tokens must be >= 1"), std::string::npos) << zero.err;
  // A probe buffer larger than the machine (~1 TiB): refused before the run, naming the flag, not
  // killed or a segfault when it is touched. (Should the check not fire, ASan in the sanitizer
  // build would abort on the allocation unless told to return null, as the C library does.)
  const char* asan = std::getenv("ASAN_OPTIONS");
  const std::string env =
      "ASAN_OPTIONS=" + std::string(asan != nullptr && *asan != '\0' ? std::string(asan) + ":" : "") +
      "allocator_may_return_null=1";
  const CliRun huge = run_latency("--prompt-tokens 8 --gen-tokens 4", "999999", env);
  EXPECT_EQ(WEXITSTATUS(huge.status), 1) << huge.err;
  EXPECT_NE(huge.err.find("error: bandwidth probe: --probe-mib 999999 needs 999999.0 MiB, but "), std::string::npos)
      << huge.err;
  EXPECT_NE(huge.err.find(" MiB; lower --probe-mib\n"), std::string::npos) << huge.err;
  EXPECT_EQ(huge.out, "");  // refused before the model runs
}

}  // namespace
}  // namespace pagellm::cli
