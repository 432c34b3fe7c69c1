#include "server/generation.h"

#include <cstdio>

#include "core/error.h"
#include "server/sse.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::server {

namespace {

// Lives until every sequence has finished and the response is out (held by the sinks and by the
// functions they post). All members except the sinks' metrics calls run on the exchange's strand.
class GenerationCall : public std::enable_shared_from_this<GenerationCall> {
 public:
  GenerationCall(GenerationPlan plan, std::shared_ptr<Exchange> ex, EngineClient& engine, const Tokenizer& tokenizer,
                 ServerMetrics& metrics)
      : plan_(std::move(plan)), ex_(std::move(ex)), engine_(engine), metrics_(metrics), tok_(tokenizer) {
    choices_.resize(plan_.requests.size());
  }

  void submit();

 private:
  struct Choice {
    ChoiceResult result;
    bool finished = false;
    size_t text_offset = 0;  // completions logprobs text_offset of the next token (streaming)
  };

  void on_output(size_t index, const RequestOutput& out);
  void stream_preamble();
  void stream_output(size_t index, const RequestOutput& out);
  void finish();
  void fail(const std::string& message);
  void on_disconnect();
  void abort_unfinished();

  GenerationPlan plan_;
  std::shared_ptr<Exchange> ex_;
  EngineClient& engine_;
  ServerMetrics& metrics_;
  const Tokenizer& tok_;
  std::vector<Choice> choices_;  // [plan_.requests.size()]
  size_t num_finished_ = 0;
  size_t num_submitted_ = 0;
  bool done_ = false;  // answered, refused, or the client is gone: later outputs are dropped
};

void GenerationCall::submit() {
  auto self = shared_from_this();
  std::vector<EngineClient::OutputStream> sinks;
  sinks.reserve(plan_.requests.size());
  for (size_t i = 0; i < plan_.requests.size(); ++i) {
    sinks.push_back([self, i](const RequestOutput& out) {
      self->metrics_.on_output(out);
      self->ex_->post([self, i, out] { self->on_output(i, out); });
    });
  }
  // All of the request's sequences enter the waiting queue or none does (429 then).
  try {
    engine_.add_requests(plan_.requests, std::move(sinks));
    num_submitted_ = plan_.requests.size();
  } catch (const QueueFull& e) {
    abort_unfinished();
    ApiError err(429, std::string(e.what()) + "; retry later", "rate_limit_error", std::nullopt, "rate_limit_exceeded");
    err.headers.emplace_back("Retry-After", "1");
    throw err;
  } catch (const Error& e) {
    abort_unfinished();
    ApiError err(503, e.what(), "service_unavailable");
    err.headers.emplace_back("Retry-After", "1");
    throw err;  // the engine refuses only while shutting down; bad requests were caught before
  }
  ex_->on_disconnect([self] { self->on_disconnect(); });
  if (plan_.stream) stream_preamble();
}

void GenerationCall::abort_unfinished() {
  done_ = true;
  for (size_t i = 0; i < num_submitted_; ++i) {
    if (!choices_[i].finished) engine_.abort_request(plan_.requests[i].request_id);
  }
}

void GenerationCall::on_disconnect() {
  if (done_) return;
  abort_unfinished();
}

void GenerationCall::on_output(size_t index, const RequestOutput& out) {
  if (done_) return;
  if (out.finished && out.finish_reason == "error") {
    choices_[index].finished = true;
    return fail(out.error);
  }
  Choice& c = choices_[index];
  ChoiceResult& r = c.result;
  r.token_ids.insert(r.token_ids.end(), out.new_token_ids.begin(), out.new_token_ids.end());
  r.logprobs.insert(r.logprobs.end(), out.new_logprobs.begin(), out.new_logprobs.end());
  r.text += out.delta_text;
  if (out.finished) {
    c.finished = true;
    r.num_cached_tokens = out.num_cached_tokens;
    r.cumulative_logprob = out.cumulative_logprob;
    r.num_accepted_draft_tokens = out.num_accepted_draft_tokens;
    r.finish_reason = out.finish_reason;
    if (out.finish_reason == "stop") r.stop_reason = out.stop_reason;
    ++num_finished_;
  }
  if (plan_.stream) stream_output(index, out);
  if (num_finished_ == choices_.size()) finish();
}

// Chat: a first chunk with the role for every choice. Completions with echo: the prompt text.
void GenerationCall::stream_preamble() {
  ex_->start_stream();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const auto index = static_cast<int32_t>(i);
    if (plan_.endpoint == Endpoint::kChat) {
      ex_->write(sse_event(chat_chunk(plan_, index, {{"role", "assistant"}, {"content", ""}}, nullptr, {}, {})));
    } else if (plan_.echo) {
      const PromptPlan& prompt = plan_.prompts[i / static_cast<size_t>(plan_.n)];
      ResponseJson logprobs = nullptr;
      if (plan_.logprobs >= 0) logprobs = completion_logprobs(tok_, prompt.echo_pieces, {}, &choices_[i].text_offset);
      ex_->write(sse_event(completion_chunk(plan_, index, prompt.text, std::move(logprobs), {}, {})));
    }
  }
}

void GenerationCall::stream_output(size_t index, const RequestOutput& out) {
  const bool with_logprobs = plan_.logprobs >= 0 && !out.new_logprobs.empty();
  if (out.delta_text.empty() && !with_logprobs && !out.finished) return;
  Choice& c = choices_[index];
  std::optional<std::string> finish_reason, stop_reason;
  if (out.finished) {
    finish_reason = c.result.finish_reason;
    stop_reason = c.result.stop_reason;
  }
  const auto i = static_cast<int32_t>(index);
  if (plan_.endpoint == Endpoint::kChat) {
    ResponseJson delta = ResponseJson::object();
    if (!out.delta_text.empty() || with_logprobs) delta["content"] = out.delta_text;
    ResponseJson logprobs = nullptr;
    if (with_logprobs) logprobs = {{"content", chat_logprobs_content(tok_, out.new_logprobs, plan_.logprobs)}};
    ex_->write(sse_event(chat_chunk(plan_, i, std::move(delta), std::move(logprobs), finish_reason, stop_reason)));
  } else {
    ResponseJson logprobs = nullptr;
    if (with_logprobs) logprobs = completion_logprobs(tok_, {}, out.new_logprobs, &c.text_offset);
    ex_->write(sse_event(completion_chunk(plan_, i, out.delta_text, std::move(logprobs), finish_reason, stop_reason)));
  }
}

void GenerationCall::finish() {
  done_ = true;
  std::vector<ChoiceResult> results;
  results.reserve(choices_.size());
  for (Choice& c : choices_) results.push_back(std::move(c.result));
  results = select_best_of(plan_, std::move(results));
  if (plan_.stream) {
    if (plan_.include_usage) ex_->write(sse_event(usage_chunk(plan_, plan_usage(plan_, results))));
    ex_->write(sse_done());
    ex_->finish_stream();
    return;
  }
  HttpResponse r;
  r.body = dump_json(plan_.endpoint == Endpoint::kChat ? chat_response(plan_, results, tok_)
                                                       : completion_response(plan_, results, tok_));
  ex_->respond(std::move(r));
}

// A sequence failed in the engine (its logits left no token to sample): the whole response is
// an HTTP 500 server_error, or, once streaming, an error event and [DONE] (as vLLM streams
// errors); the other choices are aborted.
void GenerationCall::fail(const std::string& message) {
  abort_unfinished();
  std::fprintf(stderr, "pagellm serve: request %s failed (HTTP 500): %s\n", plan_.requests.front().request_id.c_str(),
               message.c_str());
  const ApiError err(500, message, "server_error", std::nullopt, "generation_failed");
  if (plan_.stream) {
    ex_->write("data: " + error_body(err) + "\n\n");  // the error body as one event
    ex_->write(sse_done());
    ex_->finish_stream();
    return;
  }
  HttpResponse r;
  r.status = err.status();
  r.body = error_body(err);
  ex_->respond(std::move(r));
}

}  // namespace

void start_generation(GenerationPlan plan, std::shared_ptr<Exchange> exchange, EngineClient& engine,
                      const Tokenizer& tokenizer, ServerMetrics& metrics) {
  auto call = std::make_shared<GenerationCall>(std::move(plan), std::move(exchange), engine, tokenizer, metrics);
  call->submit();
}

}  // namespace pagellm::server
