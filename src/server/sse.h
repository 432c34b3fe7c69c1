// Server-Sent Events framing for streamed completions (WHATWG HTML, "Server-sent events"; the
// OpenAI streaming format): each chunk is one event `data: <json>\n\n`, and the stream ends with
// `data: [DONE]\n\n`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagellm::server {

// "data: " + compact JSON (invalid UTF-8 replaced by U+FFFD) + "\n\n". JSON has no raw newline.
std::string sse_event(const nlohmann::json& chunk);
std::string sse_event(const nlohmann::ordered_json& chunk);  // keeps the chunk's field order
// "data: [DONE]\n\n".
std::string sse_done();

// The `data` payloads of the complete events in `stream`, in order; a trailing partial event is
// left out. Lines other than "data:" (comments, event:, id:) are ignored; multi-line data is
// joined by "\n" (the SSE rule). For clients and tests.
std::vector<std::string> parse_sse_data(std::string_view stream);

}  // namespace pagellm::server
