// SSE framing and streamed-chunk parsing for `pagellm bench serve` (see bench_serve.h).
#include <nlohmann/json.hpp>

#include "cli/bench_serve.h"
#include "core/error.h"

namespace pagellm::cli {

void SseParser::feed(std::string_view bytes, std::vector<std::string>* events) {
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      line_.append(bytes);
      return;
    }
    line_.append(bytes.substr(0, nl));
    bytes.remove_prefix(nl + 1);
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    take_line(line_, events);
    line_.clear();
  }
}

void SseParser::take_line(std::string_view line, std::vector<std::string>* events) {
  if (line.empty()) {  // end of event
    if (has_data_) events->push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // comment
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  if (field != "data") return;
  std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (has_data_) data_ += '\n';
  data_.append(value);
  has_data_ = true;
}

namespace {

std::optional<int64_t> int_field(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

}  // namespace

StreamChunk parse_stream_chunk(std::string_view json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw Error("stream chunk is not a JSON object: " + std::string(json.substr(0, 200)));
  StreamChunk c;
  auto choices = j.find("choices");
  if (choices != j.end() && choices->is_array() && !choices->empty() && (*choices)[0].is_object()) {
    const nlohmann::json& ch = (*choices)[0];
    auto text = ch.find("text");
    if (text != ch.end() && text->is_string()) c.text = text->get<std::string>();
    auto delta = ch.find("delta");
    if (delta != ch.end() && delta->is_object()) {
      auto content = delta->find("content");
      if (content != delta->end() && content->is_string()) c.text += content->get<std::string>();
    }
  }
  auto usage = j.find("usage");
  if (usage != j.end() && usage->is_object()) {
    c.completion_tokens = int_field(*usage, "completion_tokens");
    c.prompt_tokens = int_field(*usage, "prompt_tokens");
    auto details = usage->find("prompt_tokens_details");
    if (details != usage->end() && details->is_object()) c.cached_tokens = int_field(*details, "cached_tokens");
  }
  auto err = j.find("error");
  if (err != j.end() && !err->is_null()) {
    auto msg = err->is_object() ? err->find("message") : err->end();
    c.error = (msg != err->end() && msg->is_string()) ? msg->get<std::string>() : err->dump();
  }
  return c;
}

}  // namespace pagellm::cli
