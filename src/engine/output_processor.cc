#include "engine/output_processor.h"

#include "tokenizer/tokenizer.h"

namespace pagellm {

void OutputProcessor::add_request(const std::string& id, std::vector<std::string> stop) {
  states_.insert_or_assign(id, IncrementalDetokenizer(std::move(stop)));
}

RequestOutput OutputProcessor::process(EngineCoreOutput core_out, const StopInEngine& stop_in_engine) {
  RequestOutput out;
  static_cast<EngineCoreOutput&>(out) = std::move(core_out);
  auto it = states_.find(out.request_id);
  if (it == states_.end()) return out;
  IncrementalDetokenizer& detok = it->second;
  // The core's "stop" with new tokens: the last token is EOS or a stop token id, never text.
  size_t num_text_tokens = out.new_token_ids.size();
  if (out.finished && out.finish_reason == "stop" && num_text_tokens > 0) --num_text_tokens;
  std::optional<std::string> stop_hit;
  for (size_t i = 0; i < num_text_tokens && !stop_hit; ++i) {
    IncrementalDetokenizer::Delta d = detok.push(tokenizer_.token_to_piece(out.new_token_ids[i]));
    out.delta_text += d.text;
    if (d.stop_hit) {
      stop_hit = std::move(d.stop_hit);
      out.new_token_ids.resize(i + 1);
      if (out.new_logprobs.size() > i + 1) out.new_logprobs.resize(i + 1);
    }
  }
  if (stop_hit) {
    if (!out.finished) {
      std::optional<EngineCoreOutput> last = stop_in_engine(out.request_id, *stop_hit);
      out.finished = true;
      if (last) {
        out.num_prompt_tokens = last->num_prompt_tokens;
        out.num_generated_tokens = last->num_generated_tokens;
        out.num_cached_tokens = last->num_cached_tokens;
        out.cumulative_logprob = last->cumulative_logprob;
        out.times = last->times;
      }
    }
    // Also when the core finished it by max_tokens on this very token: the stop string wins.
    out.finish_reason = "stop";
    out.stop_reason = std::move(stop_hit);
  } else if (out.finished) {
    out.delta_text += detok.flush();  // text held back for a stop string that never completed
  }
  if (out.finished) states_.erase(it);
  return out;
}

}  // namespace pagellm
