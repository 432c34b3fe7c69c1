// OutputProcessor without an engine: core outputs in, text out; the stop-in-engine call.
#include "engine/output_processor.h"

#include <gtest/gtest.h>

#include "format/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagellm {
namespace {

class OutputProcessorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = GgufFile::open(test::source_dir() + "/models/stories260K-f32.gguf");
    tok_ = Tokenizer::from_gguf(*file_);
  }
  int32_t id(const std::string& piece) const {
    const std::optional<int32_t> t = tok_->find_token(piece);
    EXPECT_TRUE(t.has_value()) << piece;
    return t.value_or(0);
  }
  static EngineCoreOutput core(const std::string& req, std::vector<int32_t> ids, int32_t num_generated) {
    EngineCoreOutput o;
    o.request_id = req;
    o.new_token_ids = std::move(ids);
    o.num_generated_tokens = num_generated;
    return o;
  }
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tok_;
};

const std::string kSp = "\xE2\x96\x81";  // "▁", the SentencePiece space

TEST_F(OutputProcessorTest, StopStringStopsTheRequestInTheEngineAndDropsLaterTokens) {
  OutputProcessor p(*tok_);
  p.add_request("a", {" day"});
  std::vector<std::pair<std::string, std::string>> calls;
  auto stop = [&](const std::string& rid, const std::string& s) -> std::optional<EngineCoreOutput> {
    calls.emplace_back(rid, s);
    EngineCoreOutput last = core(rid, {}, 7);
    last.finished = true;
    last.finish_reason = "stop";
    return last;
  };
  RequestOutput o = p.process(core("a", {id(kSp + "happy")}, 1), stop);
  EXPECT_EQ(o.delta_text, " happy");
  EXPECT_FALSE(o.finished);
  // Two tokens in one output (a multi-token step): the first completes the stop string.
  o = p.process(core("a", {id(kSp + "day"), id(kSp + "happy")}, 3), stop);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], std::make_pair(std::string("a"), std::string(" day")));
  EXPECT_EQ(o.delta_text, "");
  EXPECT_TRUE(o.finished);
  EXPECT_EQ(o.finish_reason, "stop");
  EXPECT_EQ(o.stop_reason, std::optional<std::string>(" day"));
  EXPECT_EQ(o.new_token_ids, std::vector<int32_t>{id(kSp + "day")});
  EXPECT_EQ(o.num_generated_tokens, 7);  // the engine's count
  EXPECT_EQ(p.num_requests(), 0u);
}

TEST_F(OutputProcessorTest, EosIsNotTextAndHeldBackTextIsReleased) {
  OutputProcessor p(*tok_);
  p.add_request("a", {" happy never"});
  auto no_call = [](const std::string&, const std::string&) -> std::optional<EngineCoreOutput> {
    ADD_FAILURE() << "no stop string completes";
    return std::nullopt;
  };
  RequestOutput o = p.process(core("a", {id(kSp + "happy")}, 1), no_call);
  EXPECT_EQ(o.delta_text, "");  // a proper prefix of the stop string: held back
  EngineCoreOutput fin = core("a", {tok_->eos_id()}, 2);
  fin.finished = true;
  fin.finish_reason = "stop";
  o = p.process(fin, no_call);
  EXPECT_EQ(o.delta_text, " happy");
  EXPECT_EQ(o.finish_reason, "stop");
  EXPECT_FALSE(o.stop_reason.has_value());
}

TEST_F(OutputProcessorTest, StopStringOnTheLastAllowedTokenIsAStopNotLength) {
  OutputProcessor p(*tok_);
  p.add_request("a", {"happy"});
  int calls = 0;
  auto stop = [&](const std::string&, const std::string&) -> std::optional<EngineCoreOutput> {
    ++calls;
    return std::nullopt;
  };
  EngineCoreOutput fin = core("a", {id(kSp + "happy")}, 1);
  fin.finished = true;
  fin.finish_reason = "length";
  const RequestOutput o = p.process(fin, stop);
  EXPECT_EQ(calls, 0);  // the engine has finished it already
  EXPECT_EQ(o.delta_text, " ");
  EXPECT_EQ(o.finish_reason, "stop");
  EXPECT_EQ(o.stop_reason, std::optional<std::string>("happy"));
}

TEST_F(OutputProcessorTest, UntrackedRequestPassesThroughWithoutText) {
  OutputProcessor p(*tok_);
  const RequestOutput o = p.process(core("x", {id(kSp + "happy")}, 1), nullptr);
  EXPECT_EQ(o.delta_text, "");
  EXPECT_EQ(o.new_token_ids.size(), 1u);
}

}  // namespace
}  // namespace pagellm
