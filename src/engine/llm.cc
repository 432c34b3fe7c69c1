#include "engine/llm.h"

#include <algorithm>
#include <chrono>
#include <new>

#include "core/error.h"
#include "core/system_memory.h"
#include "engine/engine_core.h"
#include "engine/model_runner.h"
#include "engine/utf8_stream.h"
#include "format/hf_dir.h"

namespace pagellm {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool all_full_attention(const LlamaModel& m) {
  const std::vector<int64_t>& w = m.kv_shape(GgmlType::F32).sliding_window;
  return std::all_of(w.begin(), w.end(), [](int64_t x) { return x == 0; });
}

// The model of `file`; an error about a Hugging Face directory's GGUF view also gives the
// config.json fields and safetensors tensors it names.
std::unique_ptr<LlamaModel> load_model(const GgufFile& file, ThreadPool* pool,
                                       kernels::Isa isa = kernels::default_isa()) {
  try {
    return std::make_unique<LlamaModel>(file, pool, isa);
  } catch (const Error& e) {
    if (file.version() != 0) throw;
    throw Error(std::string(e.what()) + hf_names_in(e.what()));
  }
}

}  // namespace

LoadedModel load_model_and_tokenizer(const GgufFile& file, const std::string& path, ThreadPool* pool,
                                     kernels::Isa isa) {
  LoadedModel m;
  m.model = load_model(file, pool, isa);
  try {
    m.tokenizer = Tokenizer::from_gguf(file);
  } catch (const Error& e) {
    // GgufFile's own errors (a missing or mistyped key) name the file already; the tokenizer's
    // checks do not.
    const std::string what = e.what();
    if (what.find("'" + path + "'") != std::string::npos) throw;
    throw Error("model '" + path + "': " + what);
  }
  if (m.tokenizer->vocab_size() != m.model->config().vocab_size) {
    throw Error("model '" + path + "': tokenizer has " + std::to_string(m.tokenizer->vocab_size()) +
                " tokens but token_embd has " + std::to_string(m.model->config().vocab_size) + " rows");
  }
  m.warnings = m.tokenizer->load_warnings();
  if (const GgufValue* t = file.find("tokenizer.chat_template"); t != nullptr && t->type != GgufValueType::STRING) {
    m.warnings.push_back(std::string("tokenizer.chat_template is a ") + gguf_type_name(t->type) +
                         ", not a string; ignored (chat requests get the fallback ChatML template)");
  } else {
    m.chat_template = file.get_string_opt("tokenizer.chat_template").value_or("");
  }
  return m;
}

void LLM::load_draft(const LlamaModel& target, ThreadPool* pool) {
  const std::string& path = config_.speculative_model;
  std::unique_ptr<Tokenizer> draft_tokenizer;
  try {  // a bad draft file's error says it is the draft
    draft_file_ = open_model_file(path);
    draft_model_ = load_model(*draft_file_, pool);
    draft_tokenizer = Tokenizer::from_gguf(*draft_file_);
  } catch (const Error& e) {
    throw Error("--speculative-model '" + path + "': " + e.what());
  }
  for (const std::string& w : draft_tokenizer->load_warnings()) load_warnings_.push_back("--speculative-model: " + w);
  // Drafts are token ids: both models must give every id the same text. (What the draft's
  // loader read past, e.g. an unknown token type, may be why; the error says it.)
  std::string read_past;
  for (const std::string& w : draft_tokenizer->load_warnings()) read_past += "; the draft's " + w;
  const int32_t vocab = tokenizer_->vocab_size();
  if (draft_tokenizer->vocab_size() != vocab || draft_model_->config().vocab_size != vocab) {
    throw Error("--speculative-model '" + path + "': its vocabulary differs from the model's (" +
                std::to_string(draft_tokenizer->vocab_size()) + " tokens and " +
                std::to_string(draft_model_->config().vocab_size) + " embedding rows, the model " +
                std::to_string(vocab) + "); a draft must share the tokenizer" + read_past);
  }
  for (int32_t id = 0; id < vocab; ++id) {
    const std::string mine = tokenizer_->token_to_piece(id), draft = draft_tokenizer->token_to_piece(id);
    if (mine == draft) continue;
    std::string msg = "--speculative-model '" + path + "': its vocabulary differs from the model's at token ";
    msg += std::to_string(id) + " (text '";
    msg += draft_tokenizer->token_text(id);
    msg += "' gives '" + draft + "', the model's '";
    msg += tokenizer_->token_text(id);
    msg += "' gives '" + mine + "'); a draft must share the tokenizer";
    msg += read_past;
    throw Error(msg);
  }
  // The draft's K/V share the target's block tables: one KV cache group, never released by a
  // sliding window, in both models.
  if (!all_full_attention(target) || !all_full_attention(*draft_model_)) {
    throw Error(
        "--speculative-model: a draft model needs a target and a draft whose layers all use full attention "
        "(sliding-window layers, e.g. Gemma 3, are not supported with a draft model)");
  }
}

LLM::LLM(const EngineConfig& config) : config_(config) {
  config_.validate();
  auto pool =
      std::make_unique<ThreadPool>(config_.num_threads > 0 ? config_.num_threads : ThreadPool::default_num_threads());
  file_ = open_model_file(config_.model_path);
  LoadedModel loaded = load_model_and_tokenizer(*file_, config_.model_path, pool.get());
  std::unique_ptr<LlamaModel> model = std::move(loaded.model);
  tokenizer_ = std::move(loaded.tokenizer);
  load_warnings_ = std::move(loaded.warnings);
  chat_template_ = std::move(loaded.chat_template);
  if (!config_.speculative_model.empty()) load_draft(*model, pool.get());
  const int32_t num_blocks = plan_kv_cache(config_, model->config(), draft_model_ ? &draft_model_->config() : nullptr);
  const KvCacheGeometry geometry{num_blocks, config_.block_size, config_.kv_dtype};
  const int64_t kv_bytes = int64_t{num_blocks} * config_.block_size *
                           (kv_bytes_per_token(model->config(), config_.kv_dtype) +
                            (draft_model_ ? kv_bytes_per_token(draft_model_->config(), config_.kv_dtype) : 0));
  // The pool is zero-filled at once: one larger than the machine or its cgroup (a container) can
  // give would be killed filling it, with no message. (The weights are loaded by now: what they
  // take is no longer available.)
  const int64_t buffers =
      runner_buffer_bytes(config_, model->config(), num_blocks, draft_model_ ? &draft_model_->config() : nullptr);
  if (const std::optional<MemoryLimit> bound = memory_bound_exceeded(kv_bytes + buffers)) {
    throw Error("the KV cache (" + std::to_string(num_blocks) + " blocks of " + std::to_string(config_.block_size) +
                " tokens, " + format_mib(kv_bytes) + ") and the runner's buffers (" + format_mib(buffers) + ") need " +
                format_mib(kv_bytes + buffers) + ", but " + bound->source + " is " + format_mib(bound->bytes) +
                "; give a smaller KV cache with --kv-cache-memory");
  }
  try {
    if (draft_model_) draft_runner_ = std::make_unique<ModelRunner>(*draft_model_, geometry);
    runner_ = std::make_unique<ModelRunner>(std::move(pool), std::move(model), geometry);
  } catch (const std::bad_alloc&) {  // (the weights are mapped or allocated by now: this is the pool)
    throw Error("cannot allocate the KV cache: " + std::to_string(num_blocks) + " blocks of " +
                std::to_string(config_.block_size) + " tokens, " + std::to_string(kv_bytes >> 20) +
                " MiB; give a smaller one with --kv-cache-memory, or use --kv-dtype f16");
  }
  kv_manager_ = std::make_unique<KvCacheManager>(num_blocks, config_.block_size, config_.enable_prefix_caching,
                                                 runner_->kv_cache().layout().group_sliding_window);
}

int64_t LLM::max_model_len() const {
  return max_tokens_per_request(kv_manager_->group_sliding_window(), kv_cache().block_size(), kv_cache().num_blocks(),
                                model().config().max_position_embeddings, config_.max_num_batched_tokens);
}

std::string kv_cache_limit_warning(const LLM& llm) {
  const int64_t context = llm.model().config().max_position_embeddings;
  if (llm.max_model_len() >= context) return "";
  return "warning: the KV cache holds " + std::to_string(llm.max_model_len()) + " tokens, less than the model's " +
         "context of " + std::to_string(context) + ": requests are limited to " + std::to_string(llm.max_model_len()) +
         " tokens (prompt + max_tokens); --kv-cache-memory sets its size";
}

GenerateResult LLM::generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                             const std::function<void(std::string_view)>& on_text) {
  GenerateResult res;
  res.prompt_token_ids = prompt;
  res.finish_reason = "length";
  res.timings.prompt_tokens = static_cast<int64_t>(prompt.size());
  EngineRequest req;
  req.request_id = "generate";
  req.prompt_token_ids = prompt;
  req.sampling = opt.sampling;
  req.max_tokens = std::max(opt.max_tokens, 1);  // clamped by the engine to the context
  req.ignore_eos = opt.ignore_eos;
  SchedulerLimits limits = config_.scheduler_limits();
  limits.max_num_seqs = 1;
  EngineCore core(*this, limits);
  core.add_request(req);  // the engine validates (prompt, context, KV cache, sampling)
  // The request leaves the engine, freeing its blocks, however generate returns.
  struct AbortOnExit {
    EngineCore& core;
    ~AbortOnExit() { core.abort_request("generate"); }
  } abort_on_exit{core};
  if (opt.max_tokens <= 0) return res;

  Utf8Stream utf8;
  const auto t0 = std::chrono::steady_clock::now();
  auto t_first = t0;
  for (bool finished = false; !finished;) {
    const bool after_first = !res.token_ids.empty();
    for (const EngineCoreOutput& out : core.step()) {
      if (after_first) ++res.timings.decode_steps;
      res.timings.num_accepted_draft_tokens = out.num_accepted_draft_tokens;
      for (int32_t tok : out.new_token_ids) {
        if (res.token_ids.empty()) {
          t_first = std::chrono::steady_clock::now();
          res.timings.prompt_seconds = std::chrono::duration<double>(t_first - t0).count();
        }
        res.token_ids.push_back(tok);
        if (!opt.ignore_eos && tokenizer_->is_eog(tok)) continue;  // EOS ends the text, is not in it
        const std::string piece = tokenizer_->token_to_piece(tok);
        res.text += piece;
        const std::string delta = utf8.push(piece);
        if (on_text && !delta.empty()) on_text(delta);
      }
      if (!out.finished) continue;
      if (out.finish_reason == "error") throw Error(out.error);
      res.finish_reason = out.finish_reason;
      finished = true;
    }
  }
  res.timings.decode_tokens = static_cast<int64_t>(res.token_ids.size()) - 1;
  res.timings.spec = core.counters().spec;
  res.timings.decode_seconds = seconds_since(t_first);
  const std::string tail = utf8.flush();
  if (on_text && !tail.empty()) on_text(tail);
  return res;
}

}  // namespace pagellm
