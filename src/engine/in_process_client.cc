#include "engine/in_process_client.h"

#include <filesystem>

#include "core/error.h"
#include "engine/generation_defaults.h"

namespace pagellm {

InProcessEngineClient::InProcessEngineClient(std::unique_ptr<LLM> llm) : engine_(std::move(llm)) {
  const LLM& m = engine_.llm();
  const std::filesystem::path path(m.config().model_path);
  facts_.model_name = m.file()
                          .get_string_opt("general.name")
                          .value_or(path.extension() == ".gguf" ? path.stem().string() : path.filename().string());
  facts_.vocab_size = m.tokenizer().vocab_size();
  facts_.max_model_len = engine_.max_model_len();
  facts_.chat_template = m.chat_template();
  facts_.speculative = m.config().speculative();
  try {
    facts_.default_sampling = generation_defaults(m.file());
  } catch (const Error& e) {
    facts_.default_sampling_error = e.what();
  }
}

}  // namespace pagellm
