// AsyncEngine: the engine thread, the two queues, abort, back-pressure and drain.
#include "engine/async_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "test_util.h"

namespace pagellm {
namespace {

// The bundled model with the given scheduler limits and waiting-queue bound.
std::unique_ptr<LLM> load(int32_t max_num_seqs, int64_t max_num_batched_tokens, int32_t max_waiting) {
  EngineConfig c;
  c.model_path = test::source_dir() + "/models/stories260K-f32.gguf";
  c.num_threads = 1;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = max_num_batched_tokens;
  c.max_waiting = max_waiting;
  return std::make_unique<LLM>(c);
}

EngineRequest req(const std::string& id, int32_t max_tokens) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_token_ids = {1, 403, 407, 261, 378};
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

struct Collector {
  std::mutex mu;
  std::string text;
  std::string finish_reason;
  int tokens = 0;
  std::promise<void> done;
  AsyncEngine::Sink sink() {
    return [this](const RequestOutput& o) {
      std::lock_guard<std::mutex> lock(mu);
      text += o.delta_text;
      tokens += static_cast<int>(o.new_token_ids.size());
      if (o.finished) {
        finish_reason = o.finish_reason;
        done.set_value();
      }
    };
  }
};

TEST(AsyncEngine, ConcurrentRequestsFromManyThreads) {
  AsyncEngine engine(load(8, 64, 100));
  std::vector<std::unique_ptr<Collector>> cs;
  for (int i = 0; i < 12; ++i) cs.push_back(std::make_unique<Collector>());
  std::vector<std::thread> ts;
  for (int i = 0; i < 12; ++i) {
    ts.emplace_back([&, i] { engine.add_request(req("r" + std::to_string(i), 20), cs[i]->sink()); });
  }
  for (auto& t : ts) t.join();
  for (auto& c : cs) ASSERT_EQ(c->done.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  for (auto& c : cs) {
    EXPECT_EQ(c->text, cs[0]->text);  // same prompt, greedy: same text whatever the batch
    EXPECT_EQ(c->tokens, 20);
    EXPECT_EQ(c->finish_reason, "length");
  }
  EXPECT_EQ(cs[0]->text.rfind(", there was a little girl named Lily.", 0), 0u);
  for (int i = 0; i < 100; ++i) {  // stats are published after the final outputs' step
    if (engine.stats().num_free_blocks == engine.stats().num_blocks) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(engine.stats().num_free_blocks, engine.stats().num_blocks);
  EXPECT_EQ(engine.stats().generation_tokens, 12 * 20);
}

TEST(AsyncEngine, AbortEndsTheRequestWithAFinalOutput) {
  AsyncEngine engine(load(8, 64, 100));
  Collector c;
  engine.add_request(req("long", 500), c.sink());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  engine.abort_request("long");
  ASSERT_EQ(c.done.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(c.finish_reason, "abort");
  EXPECT_LT(c.tokens, 500);
}

// --max-queue-delay-s: once the cost model has seen steps, a request with prefill queued ahead
// of it whose predicted time to first token exceeds the limit is refused at once naming the
// limit; one with nothing queued ahead is always admitted (a 429 would be retried forever); a
// generous limit admits both. max_num_seqs 1 keeps b waiting (its prompt queued) while a runs;
// should a finish first (400 tokens of this model take ~20 ms on a fast core), b's 300-token
// prompt still has prefill chunks of 16 tokens queued when d arrives microseconds later.
TEST(AsyncEngine, PredictedQueueDelayOverTheLimitIsRefused) {
  for (const double limit : {1e-9, 3600.0}) {
    SCOPED_TRACE(limit);
    EngineConfig c;
    c.model_path = test::source_dir() + "/models/stories260K-f32.gguf";
    c.num_threads = 1;
    c.max_num_seqs = 1;
    c.max_num_batched_tokens = 16;
    c.max_queue_delay_s = limit;
    AsyncEngine engine(std::make_unique<LLM>(c));
    Collector a, b, d;
    engine.add_request(req("a", 400), a.sink());  // nothing measured yet: admitted
    for (int i = 0; i < 500 && !engine.stats().step_cost_ready; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(engine.stats().step_cost_ready);
    EngineRequest rb = req("b", 8);
    for (int32_t i = 0; i < 295; ++i) rb.prompt_token_ids.push_back(3 + i % 500);
    engine.add_request(rb, b.sink());  // a only decodes (or is done): nothing queued ahead
    if (limit < 1) {
      try {
        engine.add_request(req("d", 8), d.sink());
        ADD_FAILURE() << "admitted past the predicted delay";
      } catch (const QueueFull& e) {
        EXPECT_NE(std::string(e.what()).find("exceeds --max-queue-delay-s"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("prompt tokens queued ahead, 5 of its own"), std::string::npos)
            << e.what();
      }
    } else {
      engine.add_request(req("d", 8), d.sink());
    }
    engine.abort_request("a");
    b.done.get_future().wait();
    EXPECT_EQ(b.tokens, 8);
    if (limit > 1) {
      d.done.get_future().wait();
      EXPECT_EQ(d.tokens, 8);
    }
  }
}

// Admission by priority: a request waits only behind the running prompts and the queued ones of
// its own or a better priority (the scheduler admits waiting requests best priority first), so
// with b's 300-token prompt queued at priority 10 a priority -1 request is admitted under a
// limit that refuses another priority 10 one (as the test above: a runs, max_num_seqs 1 keeps b
// waiting). The better one then runs before b.
TEST(AsyncEngine, QueueDelayCountsOnlyWorkOfTheSameOrABetterPriority) {
  EngineConfig c;
  c.model_path = test::source_dir() + "/models/stories260K-f32.gguf";
  c.num_threads = 1;
  c.max_num_seqs = 1;
  c.max_num_batched_tokens = 16;
  c.max_queue_delay_s = 1e-9;
  AsyncEngine engine(std::make_unique<LLM>(c));
  Collector a, b, urgent, late;
  engine.add_request(req("a", 400), a.sink());
  for (int i = 0; i < 500 && !engine.stats().step_cost_ready; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(engine.stats().step_cost_ready);
  EngineRequest rb = req("b", 8);
  rb.priority = 10;
  for (int32_t i = 0; i < 295; ++i) rb.prompt_token_ids.push_back(3 + i % 500);
  engine.add_request(rb, b.sink());
  EngineRequest rl = req("late", 8);
  rl.priority = 10;
  try {
    engine.add_request(rl, late.sink());
    ADD_FAILURE() << "admitted behind 300 queued tokens of its own priority";
  } catch (const QueueFull& e) {
    EXPECT_NE(std::string(e.what()).find("300 prompt tokens queued ahead, 5 of its own"), std::string::npos)
        << e.what();
  }
  EngineRequest ru = req("urgent", 8);
  ru.priority = -1;
  engine.add_request(ru, urgent.sink());  // nothing of priority <= -1 queued: admitted
  engine.abort_request("a");
  urgent.done.get_future().wait();
  EXPECT_EQ(urgent.tokens, 8);
  b.done.get_future().wait();
  EXPECT_EQ(b.tokens, 8);
}

TEST(AsyncEngine, QueueFullThenDrain) {
  AsyncEngine engine(load(1, 64, 2));
  std::vector<std::unique_ptr<Collector>> cs;
  int full = 0;
  for (int i = 0; i < 10; ++i) {
    cs.push_back(std::make_unique<Collector>());
    try {
      engine.add_request(req("q" + std::to_string(i), 450), cs.back()->sink());
    } catch (const QueueFull&) {
      ++full;
      cs.pop_back();
    }
  }
  EXPECT_GT(full, 0);
  engine.drain(0.05);  // too short for 450 tokens each, one at a time: the rest is aborted
  for (auto& c : cs) ASSERT_EQ(c->done.get_future().wait_for(std::chrono::seconds(1)), std::future_status::ready);
  int aborted = 0;
  for (auto& c : cs) aborted += c->finish_reason == "abort";
  EXPECT_GT(aborted, 0);
  EXPECT_THROW(engine.add_request(req("late", 1), Collector().sink()), Error);
}

// One client request's sequences enter the waiting queue all or none: 4 sequences when only 3
// slots remain is QueueFull and adds nothing (no sink is called, nothing is waiting); then 3 fit.
TEST(AsyncEngine, AddRequestsIsAllOrNone) {
  std::vector<std::unique_ptr<Collector>> cs;
  AsyncEngine engine(load(8, 64, 3));
  auto batch = [&](const std::string& prefix, int k) {
    std::vector<EngineRequest> rs;
    std::vector<AsyncEngine::Sink> sinks;
    for (int i = 0; i < k; ++i) {
      cs.push_back(std::make_unique<Collector>());
      rs.push_back(req(prefix + std::to_string(i), 8));
      sinks.push_back(cs.back()->sink());
    }
    engine.add_requests(std::move(rs), std::move(sinks));
  };
  try {
    batch("big", 4);
    FAIL() << "4 sequences fit a queue of 3";
  } catch (const QueueFull& e) {
    EXPECT_NE(std::string(e.what()).find("4 sequences"), std::string::npos) << e.what();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (auto& c : cs) EXPECT_EQ(c->tokens, 0);
  EXPECT_EQ(engine.stats().num_waiting, 0);
  EXPECT_EQ(engine.stats().num_running, 0);
  EXPECT_EQ(engine.stats().num_steps, 0);  // nothing ever ran
  cs.clear();
  batch("fits", 3);
  for (auto& c : cs) ASSERT_EQ(c->done.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  for (auto& c : cs) EXPECT_EQ(c->tokens, 8);
}

// The n > 1 members that wait to fork their leader hold waiting slots: with the one running slot
// taken by a long request, a group of 3 fills 3 of 4 slots and a further 2 sequences do not fit.
// (They used to count as nothing once the engine had picked them up: only the leader waited.)
TEST(AsyncEngine, UnforkedGroupMembersCountAsWaiting) {
  Collector longc;  // the collectors outlive the engine, which calls their sinks until it stops
  std::vector<std::unique_ptr<Collector>> group, more;
  AsyncEngine engine(load(1, 64, 4));
  engine.add_request(req("long", 500), longc.sink());
  for (int i = 0; i < 1000 && engine.stats().num_running == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(engine.stats().num_running, 1);
  std::vector<EngineRequest> rs;
  std::vector<AsyncEngine::Sink> sinks;
  for (int i = 0; i < 3; ++i) {
    group.push_back(std::make_unique<Collector>());
    EngineRequest r = req("g" + std::to_string(i), 4);
    r.prompt_token_ids = {1, 403, 407};
    r.parallel_group = "g";
    r.parallel_group_size = 3;
    rs.push_back(std::move(r));
    sinks.push_back(group.back()->sink());
  }
  engine.add_requests(std::move(rs), std::move(sinks));
  // Let the engine take the group from its inbox and publish its stats.
  const int64_t steps = engine.stats().num_steps;
  for (int i = 0; i < 1000 && engine.stats().num_steps < steps + 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const EngineStats st = engine.stats();
  if (st.num_running != 1 || st.num_waiting == 0) GTEST_SKIP() << "the long request ended too soon on this machine";
  EXPECT_EQ(st.num_waiting, 3);
  std::vector<EngineRequest> rs2;
  std::vector<AsyncEngine::Sink> sinks2;
  for (int i = 0; i < 2; ++i) {
    more.push_back(std::make_unique<Collector>());
    rs2.push_back(req("m" + std::to_string(i), 4));
    sinks2.push_back(more.back()->sink());
  }
  EXPECT_THROW(engine.add_requests(std::move(rs2), std::move(sinks2)), QueueFull);
  engine.abort_request("long");
  for (auto& c : group) ASSERT_EQ(c->done.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  for (auto& c : group) EXPECT_EQ(c->tokens, 4);
}

}  // namespace
}  // namespace pagellm
