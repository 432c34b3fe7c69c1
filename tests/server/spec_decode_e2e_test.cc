// Speculative decoding end to end: two `pagellm serve` processes on the bundled stories260K, one
// speculating (n-gram lookup, self-speculation or a Q4_0 draft model; fixed k, so drafts are always verified) and
// one without, answer the
// same requests with the same bytes: completions and chat, greedy and seeded sampling, n > 1,
// logprobs, streaming; the speculating one reports accepted drafts in usage and /metrics.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "server_process.h"
#include "test_util.h"

namespace pagellm::test {
namespace {

using nlohmann::json;

std::vector<json> request_bodies() {
  std::vector<json> out;
  const char* prompts[] = {"Once upon a time", "Lily and Ben went to the park. Lily and Ben", "The cat sat"};
  for (int i = 0; i < 6; ++i) {
    json r = {{"prompt", prompts[i % 3]}, {"max_tokens", 60}};
    if (i >= 3) r = {{"messages", json::array({{{"role", "user"}, {"content", prompts[i % 3]}}})}, {"max_tokens", 60}};
    if (i % 2 == 0) {
      r["temperature"] = 0.0;
    } else {
      r["temperature"] = 0.9;
      r["seed"] = 7 + i;
      r["n"] = 2;
    }
    if (i < 3) r["logprobs"] = 2;
    out.push_back(r);
  }
  return out;
}

// The response without its id / created / usage: what must not depend on speculation.
json content_of(json j) {
  j.erase("id");
  j.erase("created");
  j.erase("usage");
  return j;
}

// proposer: the flags of one proposer (n-gram lookup, or self-speculation with 4 of 5 layers).
void check_same_answers(const std::vector<std::string>& proposer) {
  std::vector<std::string> args = proposer;
  for (const char* a : {"--no-speculative-adaptive", "--num-speculative-tokens", "4"}) args.emplace_back(a);
  ServerProcess spec(args);
  ServerProcess plain({});
  const std::vector<json> bodies = request_bodies();
  // All requests at once on each server, so that verify steps share batches with other decodes.
  auto run_all = [&](int port, bool stream) {
    std::vector<HttpResult> res(bodies.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < bodies.size(); ++i) {
      threads.emplace_back([&, i] {
        json b = bodies[i];
        if (stream) {
          b["stream"] = true;
          b["stream_options"] = {{"include_usage", true}};
          b["n"] = 1;
        }
        const bool chat = b.contains("messages");
        res[i] = http(port, "POST", chat ? "/v1/chat/completions" : "/v1/completions", b.dump());
      });
    }
    for (std::thread& t : threads) t.join();
    return res;
  };
  const std::vector<HttpResult> a = run_all(spec.port(), false), b = run_all(plain.port(), false);
  int64_t accepted = 0;
  for (size_t i = 0; i < bodies.size(); ++i) {
    ASSERT_EQ(a[i].status, 200) << a[i].body;
    ASSERT_EQ(b[i].status, 200) << b[i].body;
    const json ja = json::parse(a[i].body), jb = json::parse(b[i].body);
    EXPECT_EQ(content_of(ja), content_of(jb)) << "request " << i;
    EXPECT_EQ(ja["usage"]["completion_tokens"], jb["usage"]["completion_tokens"]);
    accepted += ja["usage"]["completion_tokens_details"]["accepted_prediction_tokens"].get<int64_t>();
    EXPECT_FALSE(jb["usage"].contains("completion_tokens_details"));  // no proposer: no field
  }
  EXPECT_GT(accepted, 0);
  const std::vector<HttpResult> sa = run_all(spec.port(), true), sb = run_all(plain.port(), true);
  for (size_t i = 0; i < bodies.size(); ++i) {
    const bool chat = bodies[i].contains("messages");
    const Streamed x = collect(sa[i].body, chat), y = collect(sb[i].body, chat);
    EXPECT_TRUE(x.done);
    EXPECT_EQ(x.text, y.text) << "request " << i;
    EXPECT_EQ(x.finish_reasons, y.finish_reasons);
    EXPECT_TRUE(x.usage.contains("completion_tokens_details"));
  }
  auto m = read_metrics(spec.port());
  EXPECT_GT(m["pagellm:spec_decode_num_drafts_total"], 0);
  EXPECT_GT(m["pagellm:spec_decode_num_accepted_tokens_total"], 0);
  EXPECT_LE(m["pagellm:spec_decode_num_accepted_tokens_total"], m["pagellm:spec_decode_num_draft_tokens_total"]);
  EXPECT_GT(m["pagellm:spec_decode_num_accepted_tokens_per_pos_total"], 0);  // position 0, the first sample
  EXPECT_GT(m["pagellm:spec_decode_mean_accepted_length"], 1.0);
  EXPECT_EQ(read_metrics(plain.port())["pagellm:spec_decode_num_drafts_total"], 0);
  EXPECT_EQ(spec.stop(), 0);
  EXPECT_EQ(plain.stop(), 0);
}

TEST(SpecDecodeE2E, ServersWithAndWithoutSpeculationAnswerTheSame) { check_same_answers({"--speculative-ngram"}); }

TEST(SpecDecodeE2E, ServersWithAndWithoutSelfSpeculationAnswerTheSame) {
  check_same_answers({"--speculative-self-layers", "4"});
}

TEST(SpecDecodeE2E, ServersWithAndWithoutADraftModelAnswerTheSame) {
  check_same_answers({"--speculative-model", testdata("stories260K/stories260K-q4_0.gguf")});
}

TEST(SpecDecodeE2E, PerRequestSpeculativeFieldIsValidated) {
  ServerProcess spec({"--speculative-ngram", "--no-speculative-adaptive"});
  const std::string path = "/v1/completions";
  json r = {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}};
  const json on = json::parse(http(spec.port(), "POST", path, r.dump()).body);
  r["speculative"] = false;
  const HttpResult off = http(spec.port(), "POST", path, r.dump());
  ASSERT_EQ(off.status, 200) << off.body;
  const json joff = json::parse(off.body);
  EXPECT_EQ(joff["choices"], on["choices"]);
  EXPECT_FALSE(joff["usage"].contains("completion_tokens_details"));
  r["speculative"] = {{"num_speculative_tokens", 2}};
  const HttpResult two = http(spec.port(), "POST", path, r.dump());
  ASSERT_EQ(two.status, 200) << two.body;
  EXPECT_EQ(json::parse(two.body)["choices"], on["choices"]);
  for (const json& bad : {json(3), json("yes"), json({{"num_speculative_tokens", 17}}),
                          json({{"num_speculative_tokens", -1}}), json({{"method", "ngram"}})}) {
    r["speculative"] = bad;
    const HttpResult res = http(spec.port(), "POST", path, r.dump());
    EXPECT_EQ(res.status, 400) << bad.dump() << " -> " << res.body;
    EXPECT_EQ(json::parse(res.body)["error"]["param"].get<std::string>().rfind("speculative", 0), 0u) << res.body;
  }
  EXPECT_EQ(http(spec.port(), "GET", "/health").status, 200);
  EXPECT_EQ(spec.stop(), 0);
}

}  // namespace
}  // namespace pagellm::test
