#include "engine/engine_core.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "engine/model_runner.h"
#include "kv/kv_cache_layout.h"

namespace pagellm {

double engine_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

EngineCore::EngineCore(LLM& llm) : EngineCore(llm, llm.config().scheduler_limits()) {}

EngineCore::EngineCore(LLM& llm, const SchedulerLimits& limits)
    : llm_(llm), runner_(llm.runner()), kv_manager_(llm.kv_manager()), scheduler_(limits, kv_manager_) {
  // The longest request the pool can hold alone, over all KV cache groups.
  max_total_tokens_ =
      max_tokens_per_request(kv_manager_.group_sliding_window(), runner_.block_size(), runner_.num_blocks(),
                             runner_.model_config().max_position_embeddings, limits.max_num_batched_tokens);
  const EngineConfig& c = llm.config();
  speculative_ = c.speculative();
  self_layers_ = c.speculative_self_layers;
  draft_runner_ = llm.draft_runner();
  const int64_t num_layers = runner_.model_config().num_hidden_layers;
  if (self_layers_ >= num_layers) {
    throw Error("--speculative-self-layers " + std::to_string(self_layers_) + ": the draft must be fewer than the " +
                std::to_string(num_layers) + " layers of the model");
  }
  draft_cost_ratio_ = static_cast<double>(self_layers_) / static_cast<double>(num_layers);
  if (draft_runner_ != nullptr) {
    // Decode is bandwidth-bound: a draft pass costs about the weight bytes it reads.
    draft_cost_ratio_ = static_cast<double>(draft_runner_->model().decode_bytes_per_token()) /
                        static_cast<double>(runner_.model().decode_bytes_per_token());
    draft_max_positions_ = draft_runner_->model_config().max_position_embeddings;
  }
  ngram_ = NgramParams{c.ngram_min, c.ngram_max};
  num_speculative_tokens_ = c.num_speculative_tokens;
  speculative_adaptive_ = c.speculative_adaptive;
  counters_.spec.num_accepted_tokens_per_pos.assign(EngineConfig::kMaxSpeculativeTokens, 0);
}

void EngineCore::add_request(const EngineRequest& req) {
  const int64_t vocab = runner_.model_config().vocab_size;
  if (req.prompt_token_ids.empty()) throw Error("the prompt has no tokens");
  for (int32_t id : req.prompt_token_ids) {
    if (id < 0 || id >= vocab) throw Error("prompt token id " + std::to_string(id) + " is outside the vocabulary");
  }
  const auto n_prompt = static_cast<int64_t>(req.prompt_token_ids.size());
  if (n_prompt + 1 > max_total_tokens_) {
    throw Error("the prompt has " + std::to_string(n_prompt) + " tokens; at most " +
                std::to_string(std::max<int64_t>(max_total_tokens_ - 1, 0)) + " fit (context length and KV cache)");
  }
  if (req.max_tokens < 1) throw Error("max_tokens must be at least 1");
  if (states_.count(req.request_id) != 0) throw Error("duplicate request id '" + req.request_id + "'");
  req.sampling.validate(static_cast<int32_t>(vocab));
  if (req.num_speculative_tokens < -1 || req.num_speculative_tokens > EngineConfig::kMaxSpeculativeTokens) {
    throw Error("num_speculative_tokens must be in [0, " + std::to_string(EngineConfig::kMaxSpeculativeTokens) +
                "], got " + std::to_string(req.num_speculative_tokens));
  }

  auto r = std::make_unique<Request>();
  r->request_id = req.request_id;
  r->priority = req.priority;
  r->arrival_time = req.arrival_time > 0 ? req.arrival_time : engine_now();
  r->prompt_token_ids = req.prompt_token_ids;
  r->prefix_root_hash = KvCacheManager::root_hash(req.cache_salt);
  r->max_tokens = static_cast<int32_t>(std::min<int64_t>(req.max_tokens, max_total_tokens_ - n_prompt));
  State st{req, std::make_unique<Sampler>(req.sampling), RequestTimes{}};
  st.times.arrival = r->arrival_time;
  // A request may lower the engine's k, never raise it (the metrics have one position per k).
  if (speculative_) {
    st.max_spec_tokens = req.num_speculative_tokens < 0 ? num_speculative_tokens_
                                                        : std::min(req.num_speculative_tokens, num_speculative_tokens_);
  }
  states_.emplace(req.request_id, std::move(st));
  if (!req.parallel_group.empty() && req.parallel_group_size > 1) {
    Group& g = groups_[req.parallel_group];
    const Request* leader = g.leader.empty() ? nullptr : scheduler_.find(g.leader);
    if (leader == nullptr) {
      g.leader = req.request_id;
    } else if (leader->prompt_token_ids == r->prompt_token_ids && leader->output_token_ids.empty()) {
      group_of_[req.request_id] = req.parallel_group;
      g.pending.push_back(std::move(r));
      reserve_fork_seats(g);
      return;
    }
    if (g.leader == req.request_id) group_of_[req.request_id] = req.parallel_group;
  }
  scheduler_.add_request(std::move(r));
}

int64_t EngineCore::num_waiting() const {
  int64_t n = scheduler_.num_waiting();
  for (const auto& [name, g] : groups_) n += static_cast<int64_t>(g.pending.size());
  return n;
}

std::unique_ptr<Request> EngineCore::take_pending(const std::string& id) {
  auto gi = group_of_.find(id);
  if (gi == group_of_.end()) return nullptr;
  Group& g = groups_.at(gi->second);
  for (auto it = g.pending.begin(); it != g.pending.end(); ++it) {
    if ((*it)->request_id == id) {
      std::unique_ptr<Request> r = std::move(*it);
      g.pending.erase(it);
      group_of_.erase(gi);
      reserve_fork_seats(g);
      return r;
    }
  }
  return nullptr;
}

void EngineCore::reserve_fork_seats(Group& g) {
  Request* leader = scheduler_.find(g.leader);
  if (leader == nullptr) return;
  const int32_t want = static_cast<int32_t>(
      std::min<int64_t>(static_cast<int64_t>(g.pending.size()), scheduler_.limits().max_num_seqs - 1));
  leader->num_fork_seats = leader->status == RequestStatus::kWaiting ? want : std::min(leader->num_fork_seats, want);
}

void EngineCore::promote_member(const std::string& group) {
  Group& g = groups_.at(group);
  std::unique_ptr<Request> next = std::move(g.pending.front());
  g.pending.erase(g.pending.begin());
  g.leader = next->request_id;
  scheduler_.add_request(std::move(next));
  reserve_fork_seats(g);
}

void EngineCore::fork_group(Request& leader, const float* logits, double now, std::vector<EngineCoreOutput>& outputs) {
  auto gi = group_of_.find(leader.request_id);
  if (gi == group_of_.end()) return;
  const std::string group = gi->second;
  Group& g = groups_.at(group);
  // Only the members whose seats the leader reserved fork now (max_num_seqs); the rest stay a
  // group with a new leader that waits for seats and computes the prompt again.
  const auto k = std::min<size_t>(static_cast<size_t>(leader.num_fork_seats), g.pending.size());
  leader.num_fork_seats = 0;
  std::vector<std::unique_ptr<Request>> members(std::make_move_iterator(g.pending.begin()),
                                                std::make_move_iterator(g.pending.begin() + k));
  g.pending.erase(g.pending.begin(), g.pending.begin() + k);
  for (auto& m : members) group_of_.erase(m->request_id);
  group_of_.erase(leader.request_id);
  if (g.pending.empty()) {
    groups_.erase(group);
  } else {
    promote_member(group);
  }
  for (auto& m : members) {
    Request& r = *m;
    r.num_computed_tokens = leader.num_computed_tokens;
    r.num_draft_computed_tokens = leader.num_draft_computed_tokens;  // the draft's K/V in the shared blocks
    r.num_cached_tokens = leader.num_computed_tokens;                // served from the shared blocks
    kv_manager_.fork(leader.request_id, r.request_id);
    states_.at(r.request_id).times.first_scheduled = states_.at(leader.request_id).times.first_scheduled;
    scheduler_.add_running(std::move(m));
    EngineCoreOutput out;
    out.request_id = r.request_id;
    out.num_prompt_tokens = static_cast<int32_t>(r.num_prompt_tokens());
    out.num_cached_tokens = static_cast<int32_t>(r.num_cached_tokens);
    const std::string id = r.request_id;
    postprocess(r, logits, now, out);
    if (!out.finished) {
      out.num_generated_tokens = static_cast<int32_t>(r.output_token_ids.size());
      out.times = states_.at(id).times;
      out.cumulative_logprob = states_.at(id).cumulative_logprob;
    }
    outputs.push_back(std::move(out));
  }
}

EngineCoreOutput EngineCore::finish(const std::string& id, RequestStatus status, EngineCoreOutput out, double now) {
  std::unique_ptr<Request> r = scheduler_.finish_request(id, status);
  if (!r) r = take_pending(id);
  PAGELLM_CHECK(r != nullptr, "finishing unknown request " + id);
  r->status = status;
  // A group leader that ends before its first token hands the group to a pending member.
  if (auto gi = group_of_.find(id); gi != group_of_.end()) {
    const std::string group = gi->second;
    group_of_.erase(gi);
    Group& g = groups_.at(group);
    if (g.pending.empty()) {
      groups_.erase(group);
    } else {
      promote_member(group);
    }
  }
  State& st = states_.at(id);
  st.times.finished = now;
  out.finished = true;
  out.finish_reason = finish_reason(status);
  out.num_generated_tokens = static_cast<int32_t>(r->output_token_ids.size());
  out.num_prompt_tokens = static_cast<int32_t>(r->prompt_token_ids.size());
  out.num_cached_tokens = static_cast<int32_t>(r->num_cached_tokens);
  out.cumulative_logprob = st.cumulative_logprob;
  out.num_accepted_draft_tokens = st.num_accepted_draft_tokens;
  out.times = st.times;
  states_.erase(id);
  return out;
}

std::optional<EngineCoreOutput> EngineCore::abort_request(const std::string& id) {
  if (states_.count(id) == 0) return std::nullopt;
  EngineCoreOutput out;
  out.request_id = id;
  return finish(id, RequestStatus::kFinishedAborted, std::move(out), engine_now());
}

std::optional<EngineCoreOutput> EngineCore::stop_request(const std::string& id, const std::string& stop_reason) {
  if (states_.count(id) == 0) return std::nullopt;
  EngineCoreOutput out;
  out.request_id = id;
  out.stop_reason = stop_reason;
  return finish(id, RequestStatus::kFinishedStopped, std::move(out), engine_now());
}

void EngineCore::postprocess(Request& r, const float* logits, double now, EngineCoreOutput& out) {
  State& st = states_.at(r.request_id);
  const int64_t vocab = llm_.model().config().vocab_size;
  const std::span<const float> row(logits, static_cast<size_t>(vocab));
  const bool with_logprob = st.params.sampling.logprobs >= 0 || st.params.need_cumulative_logprob;
  SampleResult res{};
  try {
    if (with_logprob) {
      res = st.sampler->sample_with_logprobs(row, r.prompt_token_ids, r.output_token_ids);
    } else {
      res.token_id = st.sampler->sample(row, r.prompt_token_ids, r.output_token_ids);
    }
  } catch (const SamplingError& e) {
    // The model's logits leave nothing to sample (NaN / infinite weights): this request fails,
    // its blocks are freed, the other requests and the engine go on.
    out.error = e.what();
    out = finish(r.request_id, RequestStatus::kFinishedError, std::move(out), now);
    return;
  }
  append_token(r, res, with_logprob, now, out);
}

bool EngineCore::append_token(Request& r, const SampleResult& res, bool with_logprob, double now,
                              EngineCoreOutput& out) {
  State& st = states_.at(r.request_id);
  const int32_t tok = res.token_id;
  if (with_logprob) {
    st.cumulative_logprob += res.logprob;
    if (st.params.sampling.logprobs >= 0) out.new_logprobs.push_back(res);
  }
  r.output_token_ids.push_back(tok);
  out.new_token_ids.push_back(tok);
  ++counters_.generation_tokens;
  if (st.times.first_token == 0) {
    st.times.first_token = now;
    st.times.prefill_seconds = now - st.times.first_scheduled;
  }
  st.times.last_token = now;

  const bool eos = !st.params.ignore_eos && llm_.tokenizer().is_eog(tok);
  const bool stop_id = std::find(st.params.stop_token_ids.begin(), st.params.stop_token_ids.end(), tok) !=
                       st.params.stop_token_ids.end();
  if (eos || stop_id) {
    if (stop_id) out.stop_reason = std::to_string(tok);
    out = finish(r.request_id, RequestStatus::kFinishedStopped, std::move(out), now);
    return true;
  }
  if (static_cast<int64_t>(r.output_token_ids.size()) >= r.max_tokens) {
    out = finish(r.request_id, RequestStatus::kFinishedLength, std::move(out), now);
    return true;
  }
  return false;
}

namespace {
// Per decode step, acceptance evidence keeps this fraction: old evidence fades, and a request
// whose drafts stopped paying (k = 0) drifts back to the prior and probes again.
constexpr double kSpecEvidenceDecay = 0.9;
// Per engine step, the engine-wide evidence (the prior of every request) keeps this fraction: a
// new request starts from what the recent ones measured, and after a few hundred steps without
// drafts the prior is back at 1/2 and probes again.
constexpr double kSpecPriorDecay = 0.99;
}  // namespace

int32_t EngineCore::draft_length(const Request& r, const State& st, const StepFeatures& decodes,
                                 int64_t num_decodes) const {
  // Drafts past max_tokens are wasted: the bonus token may be the last one allowed.
  const int64_t left = r.max_tokens - static_cast<int64_t>(r.output_token_ids.size()) - 1;
  int64_t k_bound = std::min<int64_t>(st.max_spec_tokens, left);
  // A draft model writes positions num_computed .. num_computed + k - 1, inside its own context.
  if (draft_max_positions_ > 0) k_bound = std::min(k_bound, draft_max_positions_ - r.num_computed_tokens);
  const auto k_max = static_cast<int32_t>(std::max<int64_t>(0, k_bound));
  if (k_max == 0 || !speculative_adaptive_) return k_max;
  const StepCostModel& model = scheduler_.cost_model();
  const double t0 = model.predict(decodes);
  if (!model.ready() || !(t0 > 0)) return k_max;  // nothing measured yet: try
  // Two pseudo-counts of the engine-wide acceptance, then the request's own evidence.
  const double prior = (spec_accepted_all_ + 1) / (spec_accepted_all_ + spec_rejections_all_ + 2);
  const double a = (st.spec_accepted + 2 * prior) / (st.spec_accepted + st.spec_rejections + 2);
  const auto b = static_cast<double>(num_decodes);
  const double draft_pass = draft_cost_ratio_ * t0;  // one draft pass over the decodes (self or draft model)
  // A draft model that lags behind r first computes the missed tokens (at most a token budget).
  double catch_up = 0;
  if (draft_runner_ != nullptr && r.num_draft_computed_tokens < r.num_computed_tokens) {
    StepFeatures f = decodes;
    f += StepFeatures::chunk(r.num_draft_computed_tokens, std::min(r.num_computed_tokens - r.num_draft_computed_tokens,
                                                                   scheduler_.limits().max_num_batched_tokens));
    catch_up = draft_cost_ratio_ * std::max(0.0, model.predict(f) - t0);
  }
  double best_rate = b / t0, g = 0, a_pow = 1;
  int32_t best_k = 0;
  for (int32_t k = 1; k <= k_max; ++k) {
    a_pow *= a;
    g += a_pow;  // expected accepted drafts of k
    StepFeatures f = decodes;
    f += StepFeatures::chunk(r.num_computed_tokens + 1, k);
    const double rate = (b + g) / (model.predict(f) + k * draft_pass + catch_up);
    if (rate > best_rate) {
      best_rate = rate;
      best_k = k;
    }
  }
  return best_k;
}

void EngineCore::propose_drafts() {
  if (!speculative_) return;
  spec_accepted_all_ *= kSpecPriorDecay;
  spec_rejections_all_ *= kSpecPriorDecay;
  const std::vector<Request*>& running = scheduler_.running_requests();
  StepFeatures decodes;
  int64_t num_decodes = 0;
  for (const Request* r : running) {
    if (r->num_tokens() - r->num_computed_tokens != 1) continue;
    decodes += StepFeatures::chunk(r->num_computed_tokens, 1);
    ++num_decodes;
  }
  // A draft model's first pass of a step (draft_with_model) catches the draft's K/V up for every
  // request that drafts or catches up, all in one batch: its tokens together stay within one
  // token budget, as a step of the target does, which bounds that pass's time and the draft's
  // activation buffers (runner_buffer_bytes). A request whose catch-up does not fit what is left
  // drafts nothing this step; it catches up with what is left, or in a later step.
  int64_t draft_budget = scheduler_.limits().max_num_batched_tokens;
  for (Request* r : running) {
    r->spec_token_ids.clear();
    // Decodes only, from the second token on (the first may fork an n > 1 group).
    if (r->num_tokens() - r->num_computed_tokens != 1 || r->output_token_ids.empty()) continue;
    State& st = states_.at(r->request_id);
    st.draft_catch_up = false;
    if (st.max_spec_tokens == 0) continue;
    st.spec_accepted *= kSpecEvidenceDecay;
    st.spec_rejections *= kSpecEvidenceDecay;
    const int32_t k = draft_length(*r, st, decodes, num_decodes);
    if (k <= 0) continue;
    // A draft model too far behind to catch up and draft within what is left of the budget only
    // catches up this step: no drafts, so none is verified in vain.
    if (draft_runner_ != nullptr) {
      const int64_t lag = std::max<int64_t>(0, r->num_computed_tokens + 1 - r->num_draft_computed_tokens);
      if (lag > draft_budget) {
        st.draft_catch_up = draft_budget > 0;
        draft_budget = 0;
        continue;
      }
      draft_budget -= lag;
    }
    if (self_layers_ > 0 || draft_runner_ != nullptr) {
      // Placeholders for the scheduler's grant; draft_self / draft_with_model write the drafts.
      r->spec_token_ids.assign(static_cast<size_t>(k), r->output_token_ids.back());
    } else {
      r->spec_token_ids = propose_ngram(r->all_token_ids(), ngram_, k);
    }
  }
}

void EngineCore::draft_self(const SchedulerOutput& so) {
  if (self_layers_ == 0) return;
  std::vector<const ScheduledRequest*> spec;
  int64_t k_max = 0;
  for (const ScheduledRequest& s : so.scheduled) {
    if (s.num_spec_tokens == 0) continue;
    spec.push_back(&s);
    k_max = std::max(k_max, s.num_spec_tokens);
  }
  std::vector<int32_t> tokens(spec.size());  // one input token per sequence and pass; never resized
  std::vector<ScheduledSeq> seqs;
  std::vector<Request*> drafting;
  // Pass j computes position num_computed + j of each request (j = 0: its last real token) in
  // the first self_layers_ layers, whose K/V it writes (the verify step rewrites them), and takes
  // the argmax as draft j.
  for (int64_t j = 0; j < k_max; ++j) {
    seqs.clear();
    drafting.clear();
    for (size_t i = 0; i < spec.size(); ++i) {
      if (spec[i]->num_spec_tokens <= j) continue;
      Request& r = *spec[i]->request;
      const int64_t pos = r.num_computed_tokens + j;
      tokens[i] = r.token_at(pos);
      seqs.push_back(
          ScheduledSeq{kv_manager_.block_tables(r.request_id), std::span<const int32_t>(&tokens[i], 1), pos, 1});
      drafting.push_back(&r);
    }
    const ModelRunnerOutput& mo = runner_.execute(seqs, self_layers_);
    for (size_t q = 0; q < drafting.size(); ++q) {
      drafting[q]->spec_token_ids[static_cast<size_t>(j)] = greedy_argmax(mo.row(q));
    }
  }
}

void EngineCore::draft_with_model(const SchedulerOutput& so) {
  if (draft_runner_ == nullptr) return;
  int64_t left = scheduler_.limits().max_num_batched_tokens;      // the pass's tokens, all requests
  std::vector<std::vector<int32_t>> chunks(so.scheduled.size());  // never resized: the seqs point in
  std::vector<ScheduledSeq> seqs;
  std::vector<std::pair<const ScheduledRequest*, size_t>> drafting;  // (request, its row in the pass)
  // The draft runs only for the requests that verify drafts this step, and for those that
  // propose_drafts left to catch up; the others' K/V lag and are caught up when they speculate.
  // Pass 0: each gets the draft's K/V of its tokens up to its decode token (what the draft missed
  // while it lagged) and a drafting one takes the argmax of that token's row as draft 0. All of
  // them together take at most one token budget: the drafting requests first (propose_drafts
  // kept their catch-ups within it), then the catch-up-only ones with what is left.
  for (const bool drafting_round : {true, false}) {
    for (size_t i = 0; i < so.scheduled.size(); ++i) {
      const ScheduledRequest& s = so.scheduled[i];
      if ((s.num_spec_tokens > 0) != drafting_round) continue;
      Request& r = *s.request;
      State& st = states_.at(r.request_id);
      const bool catch_up_only = !drafting_round && st.draft_catch_up;
      st.draft_catch_up = false;
      if (!drafting_round && !catch_up_only) continue;
      const int64_t end = r.num_computed_tokens + s.num_scheduled_tokens - s.num_spec_tokens;
      const int64_t begin = r.num_draft_computed_tokens;
      const int64_t stop = std::min(end, begin + left);
      PAGELLM_CHECK(!drafting_round || stop == end, "a drafting request's catch-up exceeds the token budget");
      if (stop <= begin) continue;
      for (int64_t p = begin; p < stop; ++p) chunks[i].push_back(r.token_at(p));
      if (drafting_round) drafting.emplace_back(&s, seqs.size());
      seqs.push_back(ScheduledSeq{kv_manager_.block_tables(r.request_id), chunks[i], begin, drafting_round ? 1 : 0});
      r.num_draft_computed_tokens = stop;
      left -= stop - begin;
    }
  }
  if (seqs.empty()) return;
  const ModelRunnerOutput& first = draft_runner_->execute(seqs);
  int64_t k_max = 0;
  for (const auto& [s, row] : drafting) {
    s->request->spec_token_ids[0] = greedy_argmax(first.row(row));
    k_max = std::max(k_max, s->num_spec_tokens);
  }
  // Pass j >= 1 computes draft j - 1 at position num_computed + j and takes draft j.
  std::vector<int32_t> tokens(drafting.size());  // one input token per sequence and pass; never resized
  std::vector<Request*> order;
  for (int64_t j = 1; j < k_max; ++j) {
    seqs.clear();
    order.clear();
    for (size_t q = 0; q < drafting.size(); ++q) {
      const ScheduledRequest& s = *drafting[q].first;
      if (s.num_spec_tokens <= j) continue;
      Request& r = *s.request;
      const int64_t pos = r.num_computed_tokens + j;
      tokens[q] = r.token_at(pos);
      seqs.push_back(
          ScheduledSeq{kv_manager_.block_tables(r.request_id), std::span<const int32_t>(&tokens[q], 1), pos, 1});
      order.push_back(&r);
      r.num_draft_computed_tokens = pos + 1;
    }
    const ModelRunnerOutput& mo = draft_runner_->execute(seqs);
    for (size_t q = 0; q < order.size(); ++q)
      order[q]->spec_token_ids[static_cast<size_t>(j)] = greedy_argmax(mo.row(q));
  }
}

void EngineCore::verify(Request& r, const ScheduledRequest& s, std::span<const float> logits, double now,
                        EngineCoreOutput& out) {
  State& st = states_.at(r.request_id);
  const int64_t k = s.num_spec_tokens;
  const bool with_logprob = st.params.sampling.logprobs >= 0 || st.params.need_cumulative_logprob;
  std::vector<SampleResult> results;
  try {
    const std::span<const int32_t> draft(r.spec_token_ids.data(), static_cast<size_t>(k));
    results = st.sampler->sample_rows(logits, 1 + k, r.prompt_token_ids, r.output_token_ids, with_logprob, draft);
  } catch (const SamplingError& e) {
    out.error = e.what();
    out = finish(r.request_id, RequestStatus::kFinishedError, std::move(out), now);
    return;
  }
  const auto num_accepted = static_cast<int64_t>(results.size()) - 1;
  SpecDecodeCounters& c = counters_.spec;
  ++c.num_drafts;
  c.num_draft_tokens += k;
  c.num_accepted_tokens += num_accepted;
  for (int64_t j = 0; j < num_accepted; ++j) ++c.num_accepted_tokens_per_pos[static_cast<size_t>(j)];
  st.spec_accepted += static_cast<double>(num_accepted);
  if (num_accepted < k) st.spec_rejections += 1;
  spec_accepted_all_ += static_cast<double>(num_accepted);
  if (num_accepted < k) spec_rejections_all_ += 1;
  // The rejected drafts' K/V go; the accepted ones' stay (the bonus token has none yet).
  r.spec_token_ids.clear();
  scheduler_.roll_back(r, k - num_accepted);
  for (int64_t j = 0; j <= num_accepted; ++j) {
    if (j < num_accepted) ++st.num_accepted_draft_tokens;
    if (append_token(r, results[static_cast<size_t>(j)], with_logprob, now, out)) return;  // st is gone
  }
}

std::vector<EngineCoreOutput> EngineCore::step() {
  std::vector<EngineCoreOutput> outputs;
  propose_drafts();
  const SchedulerOutput so = scheduler_.schedule();
  if (so.scheduled.empty()) return outputs;
  const double t_sched = engine_now();
  last_step_predicted_seconds_ = so.predicted_seconds;
  for (const ScheduledRequest& s : so.scheduled) {
    RequestTimes& times = states_.at(s.request->request_id).times;
    if (times.first_scheduled == 0) times.first_scheduled = t_sched;
  }
  runner_.copy_blocks(so.blocks_to_copy);
  if (draft_runner_ != nullptr) draft_runner_->copy_blocks(so.blocks_to_copy);
  draft_self(so);  // after the copies: the drafts write into the new blocks
  draft_with_model(so);
  const ModelRunnerOutput& mo = runner_.execute(so, kv_manager_);
  ++counters_.num_steps;
  scheduler_.on_step_done(so);
  const double now = engine_now();
  for (size_t i = 0; i < so.scheduled.size(); ++i) {
    const ScheduledRequest& s = so.scheduled[i];
    counters_.prompt_tokens += s.num_scheduled_tokens - s.num_spec_tokens - (s.num_logits_rows > 0 ? 1 : 0);
    if (s.num_spec_tokens == 0) s.request->spec_token_ids.clear();  // proposed, not granted
    if (s.num_logits_rows == 0) continue;
    EngineCoreOutput out;
    out.request_id = s.request->request_id;
    out.num_prompt_tokens = static_cast<int32_t>(s.request->num_prompt_tokens());
    out.num_cached_tokens = static_cast<int32_t>(s.request->num_cached_tokens);
    const std::string id = s.request->request_id;
    const float* row_logits = mo.row(i).data();
    // n > 1: members of this request's group fork its blocks before it may finish and free them.
    if (s.request->output_token_ids.empty()) fork_group(*s.request, row_logits, now, outputs);
    if (s.num_spec_tokens > 0) {
      const size_t vocab = static_cast<size_t>(mo.vocab_size);
      verify(*s.request, s, std::span<const float>(row_logits, static_cast<size_t>(s.num_logits_rows) * vocab), now,
             out);
    } else {
      postprocess(*s.request, row_logits, now, out);
    }
    if (!out.finished) {
      const State& st = states_.at(id);
      out.num_generated_tokens = static_cast<int32_t>(s.request->output_token_ids.size());
      out.times = st.times;
      out.cumulative_logprob = st.cumulative_logprob;
      out.num_accepted_draft_tokens = st.num_accepted_draft_tokens;
    }
    outputs.push_back(std::move(out));
  }
  // The step's time as a decode waits for it, after schedule(): the forward, sampling and the
  // token-level stop checks (stop strings are the output processor's, later). The first step is
  // not fitted: it also pages the weights in and starts the workers, and one slow point would
  // shape the model for hundreds of steps.
  last_step_seconds_ = engine_now() - t_sched;
  step_seconds_total_ += last_step_seconds_;
  if (counters_.num_steps > 1) scheduler_.observe_step(so, last_step_seconds_);
  return outputs;
}

}  // namespace pagellm
