// Prometheus rendering (parsed back), the histogram arithmetic from RequestOutput.times, and the
// --kv-cache-memory parser.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "core/build_info.h"
#include "core/error.h"
#include "server/metrics.h"
#include "server/serve.h"

namespace pagellm::server {
namespace {

// "name{labels} value" lines -> {"name{labels}": value}; checks every sample line's shape and
// that each family has HELP and TYPE before its samples.
std::map<std::string, double> parse_prometheus(const std::string& text) {
  std::map<std::string, double> m;
  std::map<std::string, std::string> types;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    EXPECT_FALSE(line.empty());
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream ls(line.substr(7));
      std::string name, type;
      ls >> name >> type;
      types[name] = type;
      continue;
    }
    if (line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    const std::string key = line.substr(0, sp);
    const std::string name = key.substr(0, key.find('{'));
    EXPECT_NE(key.find("model_name=\""), std::string::npos) << line;
    bool declared = types.contains(name);
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        declared = declared || types[name.substr(0, name.size() - s.size())] == "histogram";
      }
    }
    EXPECT_TRUE(declared) << "no # TYPE for " << name;
    m[key] = std::stod(line.substr(sp + 1));
  }
  return m;
}

RequestOutput output(const std::string& id, int n_new, bool finished, double last_token) {
  RequestOutput o;
  o.request_id = id;
  o.new_token_ids.assign(static_cast<size_t>(n_new), 7);
  o.finished = finished;
  o.finish_reason = finished ? "length" : "";
  o.num_prompt_tokens = 5;
  o.times.arrival = 100.0;
  o.times.first_scheduled = 100.5;
  o.times.first_token = 101.0;
  o.times.prefill_seconds = 0.5;
  o.times.last_token = last_token;
  return o;
}

TEST(Metrics, RendersEveryFamilyAndParsesBack) {
  ServerMetrics m("my \"model\"");
  // One request: first token at 101.0, then tokens at 101.2 and 101.5; finished at 101.6.
  m.on_output(output("r", 1, false, 101.0));
  m.on_output(output("r", 1, false, 101.2));
  RequestOutput last = output("r", 1, true, 101.5);
  last.num_generated_tokens = 3;
  last.times.finished = 101.6;
  m.on_output(last);
  m.on_http_status(200);
  m.on_http_status(400);
  m.on_http_status(400);
  m.on_http_status(429);
  EngineStats s;
  s.num_running = 2;
  s.num_waiting = 3;
  s.num_blocks = 24;
  s.num_free_blocks = 20;
  s.kv_cache_usage = 4.0 / 24;
  s.num_preemptions = 6;
  s.num_steps = 40;
  s.step_budget_seconds = 0.25;
  s.step_cost_c_step = 0.05;
  s.step_cost_c_token = 1.5e-5;
  s.step_cost_c_attn = 2e-7;
  s.step_cost_mean_relative_error = 0.125;
  s.last_step_seconds = 0.2;
  s.last_step_predicted_seconds = 0.19;
  s.step_seconds_total = 8.5;
  const auto v = parse_prometheus(m.render(s));
  const std::string l = "{model_name=\"my \\\"model\\\"\"";
  EXPECT_EQ(v.at("pagellm:num_requests_running" + l + "}"), 2);
  EXPECT_EQ(v.at("pagellm:num_requests_waiting" + l + "}"), 3);
  EXPECT_EQ(v.at("pagellm:num_blocks" + l + "}"), 24);
  EXPECT_EQ(v.at("pagellm:num_free_blocks" + l + "}"), 20);
  EXPECT_NEAR(v.at("pagellm:kv_cache_usage_perc" + l + "}"), 4.0 / 24, 1e-12);
  EXPECT_EQ(v.at("pagellm:num_preemptions_total" + l + "}"), 6);
  EXPECT_EQ(v.at("pagellm:num_steps_total" + l + "}"), 40);
  EXPECT_EQ(v.at("pagellm:step_seconds_total" + l + "}"), 8.5);
  EXPECT_EQ(v.at("pagellm:step_budget_seconds" + l + "}"), 0.25);
  EXPECT_EQ(v.at("pagellm:last_step_seconds" + l + "}"), 0.2);
  EXPECT_EQ(v.at("pagellm:last_step_predicted_seconds" + l + "}"), 0.19);
  EXPECT_EQ(v.at("pagellm:step_cost_coefficient" + l + ",term=\"step\"}"), 0.05);
  EXPECT_EQ(v.at("pagellm:step_cost_coefficient" + l + ",term=\"token\"}"), 1.5e-5);  // not rounded away
  EXPECT_EQ(v.at("pagellm:step_cost_coefficient" + l + ",term=\"attn\"}"), 2e-7);
  EXPECT_EQ(v.at("pagellm:step_cost_mean_relative_error" + l + "}"), 0.125);
  EXPECT_EQ(v.at("pagellm:prompt_tokens_total" + l + "}"), 5);  // once per request
  EXPECT_EQ(v.at("pagellm:generation_tokens_total" + l + "}"), 3);
  EXPECT_EQ(v.at("pagellm:request_success_total" + l + ",finished_reason=\"length\"}"), 1);
  EXPECT_EQ(v.at("pagellm:request_success_total" + l + ",finished_reason=\"stop\"}"), 0);
  EXPECT_EQ(v.at("pagellm:http_errors_total" + l + ",status=\"400\"}"), 2);
  EXPECT_EQ(v.at("pagellm:http_errors_total" + l + ",status=\"429\"}"), 1);
  EXPECT_FALSE(v.contains("pagellm:http_errors_total" + l + ",status=\"200\"}"));
  const BuildInfo& b = build_info();
  EXPECT_EQ(v.at("pagellm:build_info" + l + ",version=\"" + b.version + "\",commit=\"" + b.commit + "\",compiler=\"" +
                 b.compiler + "\",build_type=\"" + b.build_type + "\"}"),
            1);

  const std::string h = "pagellm:time_to_first_token_seconds";
  EXPECT_EQ(v.at(h + "_count" + l + "}"), 1);
  EXPECT_NEAR(v.at(h + "_sum" + l + "}"), 1.0, 1e-9);
  EXPECT_EQ(v.at(h + "_bucket" + l + ",le=\"0.75\"}"), 0);
  EXPECT_EQ(v.at(h + "_bucket" + l + ",le=\"1\"}"), 1);  // le is inclusive
  EXPECT_EQ(v.at(h + "_bucket" + l + ",le=\"+Inf\"}"), 1);
  const std::string itl = "pagellm:inter_token_latency_seconds";
  EXPECT_EQ(v.at(itl + "_count" + l + "}"), 2);
  EXPECT_NEAR(v.at(itl + "_sum" + l + "}"), 0.5, 1e-9);
  EXPECT_NEAR(v.at("pagellm:time_per_output_token_seconds_sum" + l + "}"), 0.25, 1e-9);  // 0.5 s / 2
  EXPECT_NEAR(v.at("pagellm:e2e_request_latency_seconds_sum" + l + "}"), 1.6, 1e-9);
  EXPECT_NEAR(v.at("pagellm:request_queue_time_seconds_sum" + l + "}"), 0.5, 1e-9);
  EXPECT_NEAR(v.at("pagellm:request_prefill_time_seconds_sum" + l + "}"), 0.5, 1e-9);
  EXPECT_NEAR(v.at("pagellm:request_decode_time_seconds_sum" + l + "}"), 0.5, 1e-9);
}

TEST(Metrics, HistogramBucketsAreCumulative) {
  Histogram h({0.1, 1.0});
  for (double x : {0.05, 0.1, 0.5, 3.0}) h.observe(x);
  EXPECT_EQ(h.cumulative_counts(), (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(h.count(), 4u);
  EXPECT_DOUBLE_EQ(h.sum(), 3.65);
}

TEST(Metrics, EscapesLabelValues) { EXPECT_EQ(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd"); }

TEST(KvCacheMemory, ParsesBytesUnitsAndBlocks) {
  struct Case {
    const char* text;
    int64_t bytes, blocks;
  };
  const Case cases[] = {
      {"1073741824", 1073741824, 0},
      {"64MiB", 64 << 20, 0},
      {"64mib", 64 << 20, 0},
      {"1.5GiB", 1610612736, 0},
      {"512KB", 512000, 0},
      {"2G", 2147483648LL, 0},
      {"100 b", 100, 0},
      {"200blocks", 0, 200},
      {"24 blocks", 0, 24},
      {"1block", 0, 1},
      {"1GB", 1000000000, 0},
      {"3k", 3072, 0},
      {"2.50 KiB", 2560, 0},
      {" 64 MiB\n", 64 << 20, 0},
      {"0000000000000000000000000000000000000000000000064MiB", 64 << 20, 0},
      {"0000000000000000000000000000000000000000000000001blocks", 0, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const KvCacheMemory m = parse_kv_cache_memory(c.text);
    EXPECT_EQ(m.bytes, c.bytes);
    EXPECT_EQ(m.blocks, c.blocks);
  }
  for (const char* bad : {"",
                          "abc",
                          "-5",
                          "+5",
                          ".5MiB",
                          "2.",
                          "1.MiB",
                          "1.blocks",
                          "1. blocks",
                          "1.5blocks",
                          "1.0blocks",
                          "12 parsecs",
                          "MiB",
                          "1e400",
                          "1e9",
                          "0x4p20",
                          "nan",
                          "inf",
                          "9e18",
                          "10000000000000000000",
                          "3000000000blocks",
                          "2 4GiB",
                          "64 M iB",
                          "1 0 0 blocks",
                          "64MiB x",
                          " "}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(parse_kv_cache_memory(bad), Error);
  }
  // What is wrong, when the form is right.
  auto message = [](const char* text) {
    try {
      parse_kv_cache_memory(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("0"), "--kv-cache-memory: the cache needs at least 1 byte, got '0'");
  EXPECT_EQ(message("0.4"), "--kv-cache-memory: the cache needs at least 1 byte, got '0.4'");
  EXPECT_EQ(message("0blocks"), "--kv-cache-memory: the cache needs at least 1 block, got '0blocks'");
  EXPECT_EQ(message("2.5 blocks"), "--kv-cache-memory: a block count is a whole number, got '2.5 blocks'");
  EXPECT_EQ(message("0x4p20"),
            "--kv-cache-memory: expected bytes (e.g. 1073741824, 64MiB, 1.5GiB) or a block count (e.g. 200blocks), "
            "got '0x4p20'");
}

TEST(ServedModelName, IsTheFileStem) {
  EXPECT_EQ(default_served_model_name("models/stories260K-f32.gguf"), "stories260K-f32");
  EXPECT_EQ(default_served_model_name("/x/y/model.bin"), "model.bin");
}

}  // namespace
}  // namespace pagellm::server
