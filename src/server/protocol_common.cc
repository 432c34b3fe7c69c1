// Request fields shared by completions and chat, the fan-out into engine requests, and small
// helpers (error bodies, ids, JSON in and out).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string_view>

#include "core/error.h"
#include "engine/engine_config.h"
#include "server/protocol_internal.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::server {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<std::string> parse_stop(const Fields& f) {
  const nlohmann::json* v = f.get("stop");
  std::vector<std::string> stop;
  if (!v) return stop;
  if (v->is_string()) {
    stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const nlohmann::json& s : *v) {
      if (!s.is_string()) wrong_type("stop", "a string or an array of strings", *v);
      stop.push_back(s.get<std::string>());
    }
  } else {
    wrong_type("stop", "a string or an array of strings", *v);
  }
  for (const std::string& s : stop) {
    if (s.empty()) throw bad_request("'stop' strings must not be empty", "stop");
  }
  return stop;
}

std::vector<std::pair<int32_t, float>> parse_logit_bias(const Fields& f, int32_t vocab_size) {
  const nlohmann::json* v = f.get("logit_bias");
  std::vector<std::pair<int32_t, float>> bias;
  if (!v) return bias;
  if (!v->is_object()) wrong_type("logit_bias", "an object mapping token ids to numbers", *v);
  for (const auto& [key, value] : v->items()) {
    // Decimal digits only: std::stoll would also take " 5" and "+5".
    const bool digits = !key.empty() && key.size() <= 10 &&
                        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    const long long id = digits ? std::stoll(key) : -1;
    if (!digits) {
      throw bad_request("'logit_bias' keys must be token ids, got " + brief(key), "logit_bias");
    }
    if (id < 0 || id >= vocab_size) {
      throw bad_request(
          "'logit_bias' token id " + key + " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")",
          "logit_bias");
    }
    if (!value.is_number() || !std::isfinite(value.get<double>()) || std::fabs(value.get<double>()) > 100.0) {
      throw bad_request(
          "'logit_bias' values must be numbers in [-100, 100], got " + brief(value) + " for " + brief(key),
          "logit_bias");
    }
    bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
  }
  return bias;
}

SamplingParams parse_sampling(const Fields& f, int32_t vocab_size, const SamplingParams& defaults) {
  SamplingParams s = defaults;
  if (auto t = f.number("temperature", 0.0, kInf)) {
    if (*t > std::numeric_limits<float>::max()) {  // it would become inf as a float
      throw bad_request("'temperature' must be at most 3.4e38 (the largest float), got " + brief(*f.get("temperature")),
                        "temperature");
    }
    s.temperature = static_cast<float>(*t);
  }
  if (const nlohmann::json* v = f.get("top_p");
      v && v->is_number() && !(v->get<double>() > 0.0 && v->get<double>() <= 1.0)) {
    throw bad_request("'top_p' must be in (0, 1], got " + brief(*v), "top_p");
  }
  if (auto p = f.number("top_p", 0.0, 1.0)) {
    s.top_p = static_cast<float>(*p);
  }
  if (auto k = f.integer("top_k", -1, std::numeric_limits<int32_t>::max())) s.top_k = static_cast<int32_t>(*k);
  if (auto m = f.number("min_p", 0.0, 1.0)) s.min_p = static_cast<float>(*m);
  if (auto p = f.number("presence_penalty", -2.0, 2.0)) s.presence_penalty = static_cast<float>(*p);
  if (auto p = f.number("frequency_penalty", -2.0, 2.0)) s.frequency_penalty = static_cast<float>(*p);
  // [kMinRepetitionPenalty, kMaxRepetitionPenalty], so that a finite logit stays finite (see
  // sampling_params.h); vLLM only asks > 0.
  if (auto r = f.number("repetition_penalty", 0.01, 100.0)) {
    s.repetition_penalty = static_cast<float>(*r);
  }
  if (auto seed = f.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(*seed);
  }
  s.logit_bias = parse_logit_bias(f, vocab_size);
  return s;
}

}  // namespace

void check_unsupported_fields(const Fields& f, Endpoint endpoint) {
  for (const UnsupportedField& u : kUnsupportedFields) {
    if (!(endpoint == Endpoint::kChat ? u.chat : u.completions)) continue;
    const nlohmann::json* v = f.get(u.name);
    if (v && !u.is_noop(*v)) throw bad_request("'" + std::string(u.name) + "' is not supported by this server", u.name);
  }
}

void check_model(const Fields& f, const ModelInfo& model) {
  const std::optional<std::string> name = f.string("model");
  if (name && *name != model.served_model_name) {
    const std::string shown = name->size() > 64 ? name->substr(0, 64) + "..." : *name;
    throw ApiError(404,
                   "The model '" + shown + "' does not exist; this server serves '" + model.served_model_name + "'",
                   "invalid_request_error", "model", "model_not_found");
  }
}

CommonParams parse_common_params(const Fields& f, const ModelInfo& model, bool chat) {
  const int32_t vocab_size = model.tokenizer->vocab_size();
  CommonParams p;
  p.sampling = parse_sampling(f, vocab_size, model.default_sampling);
  constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();
  p.max_tokens = f.integer("max_tokens", 1, kMaxInt32);
  if (chat) {
    if (auto m = f.integer("max_completion_tokens", 1, kMaxInt32)) p.max_tokens = m;
  }
  p.n = static_cast<int32_t>(f.integer("n", 1, kMaxN).value_or(1));
  p.stop = parse_stop(f);
  if (const nlohmann::json* ids = f.get("stop_token_ids"))
    p.stop_token_ids = parse_token_ids(*ids, vocab_size, "stop_token_ids");
  p.ignore_eos = f.boolean("ignore_eos").value_or(false);
  p.stream = f.boolean("stream").value_or(false);
  if (const nlohmann::json* so = f.get("stream_options")) {
    if (!p.stream) throw bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    const Fields sf(*so, "stream_options.");
    p.include_usage = sf.boolean("include_usage").value_or(false);
    (void)sf.boolean("continuous_usage_stats");
  }
  p.priority = static_cast<int32_t>(f.integer("priority", std::numeric_limits<int32_t>::min(), kMaxInt32).value_or(0));
  (void)f.string("user");  // accepted and ignored, as the OpenAI API allows
  if (auto salt = f.string("cache_salt")) {
    if (salt->empty()) throw bad_request("'cache_salt' must be a non-empty string", "cache_salt");
    p.cache_salt = *salt;
  }
  if (const nlohmann::json* spec = f.get("speculative")) {
    if (spec->is_boolean()) {
      p.num_speculative_tokens = spec->get<bool>() ? -1 : 0;
    } else if (spec->is_object()) {
      for (const auto& [key, value] : spec->items()) {
        if (key != "num_speculative_tokens") {
          throw bad_request("unknown field 'speculative." + brief(key) + "' (only num_speculative_tokens)",
                            "speculative");
        }
      }
      const Fields sf(*spec, "speculative.");
      p.num_speculative_tokens = static_cast<int32_t>(
          sf.integer("num_speculative_tokens", 0, EngineConfig::kMaxSpeculativeTokens).value_or(-1));
    } else {
      wrong_type("speculative", "a boolean or an object", *spec);
    }
  }
  return p;
}

std::vector<int32_t> parse_token_ids(const nlohmann::json& v, int32_t vocab_size, const std::string& param) {
  if (!v.is_array()) wrong_type(param, "an array of token ids", v);
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const nlohmann::json& e : v) {
    const std::optional<int64_t> id = as_integer(e);
    if (!id) wrong_type(param, "an array of token ids", v);
    if (*id < 0 || *id >= vocab_size) {
      throw bad_request("token id " + std::to_string(*id) + " in '" + param + "' is outside the vocabulary [0, " +
                            std::to_string(vocab_size) + ")",
                        param);
    }
    ids.push_back(static_cast<int32_t>(*id));
  }
  return ids;
}

void check_prompt_bytes(std::span<const std::string_view> parts, size_t added_tokens, const ModelInfo& model,
                        const char* prompt_param) {
  const size_t at_least = model.tokenizer->min_token_count(parts) + added_tokens;
  if (at_least < static_cast<size_t>(model.max_model_len)) return;
  size_t bytes = 0;
  for (std::string_view part : parts) bytes += part.size();
  throw bad_request(
      "This model's maximum context length is " + std::to_string(model.max_model_len) + " tokens. However, the " +
          prompt_param + " (" + std::to_string(bytes) + " bytes) is at least " + std::to_string(at_least) +
          " tokens (no token of this model stands for more than " + std::to_string(model.tokenizer->max_token_bytes()) +
          " bytes). Please reduce the length of the " + prompt_param + ".",
      prompt_param, "context_length_exceeded");
}

size_t added_special_tokens(const Tokenizer& tok, bool add_special) {
  if (!add_special) return 0;
  return (tok.add_bos() ? 1 : 0) + (tok.add_eos() ? 1 : 0);
}

int32_t checked_max_tokens(size_t prompt_len, const CommonParams& p, const ModelInfo& model, int64_t default_max,
                           const char* prompt_param) {
  const int64_t ctx = model.max_model_len;
  const auto len = static_cast<int64_t>(prompt_len);
  if (len == 0) throw bad_request(std::string("'") + prompt_param + "' has no tokens", prompt_param);
  const int64_t max_tokens = p.max_tokens.value_or(default_max < 0 ? ctx - len : default_max);
  if (len >= ctx || len + max_tokens > ctx) {
    throw bad_request("This model's maximum context length is " + std::to_string(ctx) +
                          " tokens. However, you requested " + std::to_string(len + max_tokens) + " tokens (" +
                          std::to_string(len) + " in the " + prompt_param + ", " + std::to_string(max_tokens) +
                          " for the completion). Please reduce the length of the " + prompt_param + " or completion.",
                      // The prompt alone fills the context: it is what to shorten.
                      p.max_tokens && len < ctx ? "max_tokens" : prompt_param, "context_length_exceeded");
  }
  return static_cast<int32_t>(max_tokens);
}

namespace {

void validate_sampling(const SamplingParams& s, int32_t vocab_size) {
  try {
    s.validate(vocab_size);
  } catch (const Error& e) {
    // "SamplingParams.<field> ..." names the field.
    std::string msg = e.what();
    std::optional<std::string> param;
    const std::string prefix = "SamplingParams.";
    if (msg.rfind(prefix, 0) == 0) {
      param = msg.substr(prefix.size(), msg.find(' ') - prefix.size());
      msg = "'" + *param + "'" + msg.substr(prefix.size() + param->size());  // the API's name, not ours
    }
    throw bad_request(msg, param);
  }
}

}  // namespace

void fan_out(GenerationPlan* plan, const CommonParams& p, const ModelInfo& model, int64_t default_max_tokens,
             const char* prompt_param) {
  validate_sampling(p.sampling, model.tokenizer->vocab_size());
  plan->stream = p.stream;
  plan->include_usage = p.include_usage;
  plan->n = p.n;
  plan->best_of = p.best_of > 0 ? p.best_of : p.n;
  plan->speculative = model.speculative && p.num_speculative_tokens != 0;
  const size_t total = plan->prompts.size() * static_cast<size_t>(plan->best_of);
  if (total > static_cast<size_t>(model.max_sequences_per_request)) {
    const bool by_best_of = plan->best_of > plan->n;  // best_of sets the sequences per prompt
    throw bad_request(std::string("prompts x ") + (by_best_of ? "best_of" : "n") + " = " + std::to_string(total) +
                          " sequences; at most " + std::to_string(model.max_sequences_per_request) + " per request",
                      by_best_of ? "best_of" : "n");
  }
  plan->requests.clear();
  for (size_t pi = 0; pi < plan->prompts.size(); ++pi) {
    const PromptPlan& prompt = plan->prompts[pi];
    const int32_t max_tokens = checked_max_tokens(prompt.token_ids.size(), p, model, default_max_tokens, prompt_param);
    for (int32_t j = 0; j < plan->best_of; ++j) {
      EngineRequest r;
      r.request_id = plan->id + "-" + std::to_string(plan->requests.size());
      r.prompt_token_ids = prompt.token_ids;
      r.sampling = p.sampling;
      r.sampling.logprobs = plan->logprobs;
      if (p.sampling.seed) r.sampling.seed = *p.sampling.seed + static_cast<uint64_t>(j);
      r.max_tokens = max_tokens;
      r.stop = p.stop;
      r.stop_token_ids = p.stop_token_ids;
      r.ignore_eos = p.ignore_eos;
      r.priority = p.priority;
      r.cache_salt = p.cache_salt;
      r.num_speculative_tokens = p.num_speculative_tokens;
      if (plan->best_of > 1) {  // the prompt is computed once and its blocks shared
        r.parallel_group = plan->id + "-p" + std::to_string(pi);
        r.parallel_group_size = plan->best_of;
      }
      r.need_cumulative_logprob = plan->best_of > plan->n;
      plan->requests.push_back(std::move(r));
    }
  }
}

double json_logprob(float logprob) {
  if (std::isnan(logprob) || logprob < -9999.0f) return -9999.0;
  return logprob;
}

Usage plan_usage(const GenerationPlan& plan, const std::vector<ChoiceResult>& choices) {
  Usage u;
  for (const PromptPlan& p : plan.prompts) u.prompt_tokens += static_cast<int64_t>(p.token_ids.size());
  for (const ChoiceResult& c : choices) u.completion_tokens += static_cast<int64_t>(c.token_ids.size());
  u.completion_tokens += plan.discarded_completion_tokens;
  u.cached_tokens = plan.cached_tokens;
  if (plan.speculative) {
    u.accepted_prediction_tokens = 0;
    for (const ChoiceResult& c : choices) u.accepted_prediction_tokens += c.num_accepted_draft_tokens;
  }
  return u;
}

ResponseJson usage_json(const Usage& u) {
  ResponseJson j = {{"prompt_tokens", u.prompt_tokens},
                    {"completion_tokens", u.completion_tokens},
                    {"total_tokens", u.prompt_tokens + u.completion_tokens},
                    {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  if (u.accepted_prediction_tokens >= 0) {
    j["completion_tokens_details"] = {{"accepted_prediction_tokens", u.accepted_prediction_tokens}};
  }
  return j;
}

std::vector<ChoiceResult> select_best_of(GenerationPlan& plan, std::vector<ChoiceResult> all) {
  const auto per_prompt = static_cast<size_t>(plan.best_of);
  // Prompt tokens served from the prefix cache: the least any sequence of the prompt reused
  // (the one that computed it; the others share its blocks).
  plan.cached_tokens = 0;
  for (size_t p = 0; p * per_prompt < all.size(); ++p) {
    int32_t least = all[p * per_prompt].num_cached_tokens;
    for (size_t j = 1; j < per_prompt && p * per_prompt + j < all.size(); ++j) {
      least = std::min(least, all[p * per_prompt + j].num_cached_tokens);
    }
    plan.cached_tokens += least;
  }
  if (plan.best_of <= plan.n) return all;
  std::vector<ChoiceResult> kept;
  for (size_t p = 0; p * per_prompt < all.size(); ++p) {
    std::vector<size_t> order(per_prompt);
    for (size_t j = 0; j < per_prompt; ++j) order[j] = p * per_prompt + j;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return all[a].cumulative_logprob > all[b].cumulative_logprob; });
    for (size_t j = 0; j < per_prompt; ++j) {
      if (j < static_cast<size_t>(plan.n)) {
        kept.push_back(std::move(all[order[j]]));
      } else {
        plan.discarded_completion_tokens += static_cast<int64_t>(all[order[j]].token_ids.size());
      }
    }
  }
  return kept;
}

std::string error_body(const ApiError& e) {
  ResponseJson err = {{"message", e.what()}, {"type", e.type()}, {"param", nullptr}, {"code", nullptr}};
  if (e.param()) err["param"] = *e.param();
  if (e.code()) err["code"] = *e.code();
  return dump_json(ResponseJson{{"error", std::move(err)}});
}

namespace {

// 400 when `body` nests arrays / objects deeper than kMaxJsonDepth. A linear scan of the bytes
// that tracks [ and { outside strings (a backslash escapes the next byte inside a string), run
// before nlohmann parses: its parser, dump() and the error paths recurse once per level, so a
// 100k-deep array would overflow the stack. Malformed input is left to the parser.
void check_json_depth(std::string_view body) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        throw bad_request("JSON nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

}  // namespace

nlohmann::json parse_json_body(const std::string& body) {
  check_json_depth(body);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann quotes the last token read, which can be a whole multi-MB string: keep it short.
    std::string what = e.what();
    if (what.size() > 200) what = what.substr(0, 197) + "...";
    throw bad_request("malformed JSON body: " + what);
  }
  if (!j.is_object()) throw bad_request("the request body must be a JSON object");
  return j;
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string dump_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string random_id(const std::string& prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 2; ++i) {
    uint64_t x = rng();
    for (int k = 0; k < 16; ++k, x >>= 4) id.push_back(kHex[x & 15]);
  }
  return id;
}

}  // namespace pagellm::server
