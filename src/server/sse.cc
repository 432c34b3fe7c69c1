#include "server/sse.h"

namespace pagellm::server {

namespace {

template <class Json>
std::string event_of(const Json& chunk) {
  std::string s = "data: ";
  s += chunk.dump(-1, ' ', false, Json::error_handler_t::replace);
  s += "\n\n";
  return s;
}

}  // namespace

std::string sse_event(const nlohmann::json& chunk) { return event_of(chunk); }
std::string sse_event(const nlohmann::ordered_json& chunk) { return event_of(chunk); }

std::string sse_done() { return "data: [DONE]\n\n"; }

std::vector<std::string> parse_sse_data(std::string_view stream) {
  std::vector<std::string> events;
  std::string data;
  bool has_data = false;
  size_t pos = 0;
  while (pos < stream.size()) {
    const size_t eol = stream.find('\n', pos);
    if (eol == std::string_view::npos) break;  // partial line: the event is not complete
    std::string_view line = stream.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {
      if (has_data) events.push_back(data);
      data.clear();
      has_data = false;
      continue;
    }
    if (line.rfind("data:", 0) != 0) continue;
    line.remove_prefix(5);
    if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (has_data) data += '\n';
    data += line;
    has_data = true;
  }
  return events;
}

}  // namespace pagellm::server
