// Test helpers: run `pagellm serve` as a child process on an ephemeral port, and a minimal
// blocking HTTP/1.1 client over POSIX sockets (independent of the server's Beast code).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/sse.h"

namespace pagellm::test {

struct HttpResult {
  int status = 0;                              // 0: no response (connection failed or timed out)
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
};

inline std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Decodes a chunked body; a truncated one yields what arrived.
inline std::string dechunk(const std::string& raw) {
  std::string out;
  size_t pos = 0;
  while (pos < raw.size()) {
    const size_t eol = raw.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const size_t n = std::stoul(raw.substr(pos, eol - pos), nullptr, 16);
    if (n == 0) break;
    out += raw.substr(eol + 2, n);
    pos = eol + 2 + n + 2;
  }
  return out;
}

// Parses one complete response (status line, headers, body by Content-Length or chunked or to
// the end). Returns the bytes consumed, or 0 if `raw` does not hold a complete response.
inline size_t parse_response(const std::string& raw, HttpResult* r, bool to_eof) {
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return 0;
  r->status = std::stoi(raw.substr(9, 3));
  r->headers.clear();
  size_t pos = raw.find("\r\n") + 2;
  while (pos < head_end) {
    const size_t eol = raw.find("\r\n", pos);
    const std::string line = raw.substr(pos, eol - pos);
    const size_t colon = line.find(':');
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    r->headers[lower(line.substr(0, colon))] = value;
    pos = eol + 2;
  }
  const size_t body_start = head_end + 4;
  if (r->headers.contains("content-length")) {
    const size_t n = std::stoul(r->headers["content-length"]);
    if (raw.size() < body_start + n) return 0;
    r->body = raw.substr(body_start, n);
    return body_start + n;
  }
  if (lower(r->headers["transfer-encoding"]) == "chunked") {
    const size_t end = raw.find("\r\n0\r\n\r\n", body_start);
    const bool empty_body = raw.compare(body_start, 5, "0\r\n\r\n") == 0;
    if (!empty_body && end == std::string::npos && !to_eof) return 0;
    r->body = dechunk(raw.substr(body_start));
    return empty_body ? body_start + 5 : (end == std::string::npos ? raw.size() : end + 7);
  }
  r->body = raw.substr(body_start);
  return raw.size();
}

// A connected socket to 127.0.0.1:port with send/receive timeouts; -1 on failure.
inline int connect_to(int port, double timeout_s = 30) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{static_cast<time_t>(timeout_s), static_cast<suseconds_t>((timeout_s - static_cast<int>(timeout_s)) * 1e6)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Reads until EOF, error or timeout.
inline std::string recv_all(int fd) {
  std::string out;
  char buf[16384];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

inline std::string request_text(const std::string& method, const std::string& path, const std::string& body,
                                const std::vector<std::string>& headers, bool close_conn = true) {
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (const std::string& h : headers) req += h + "\r\n";
  if (!body.empty() || method == "POST") {
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  if (close_conn) req += "Connection: close\r\n";
  return req + "\r\n" + body;
}

// One request on its own connection (Connection: close).
inline HttpResult http(int port, const std::string& method, const std::string& path, const std::string& body = "",
                       const std::vector<std::string>& headers = {}, double timeout_s = 60) {
  HttpResult r;
  const int fd = connect_to(port, timeout_s);
  if (fd < 0) return r;
  if (send_all(fd, request_text(method, path, body, headers))) parse_response(recv_all(fd), &r, /*to_eof=*/true);
  close(fd);
  return r;
}

// `n` copies of one request sent at once, each on its own connection; results in send order.
inline std::vector<HttpResult> http_concurrently(int port, int n, const std::string& method, const std::string& path,
                                                 const std::string& body, double timeout_s = 120) {
  std::vector<HttpResult> results(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] { results[static_cast<size_t>(i)] = http(port, method, path, body, {}, timeout_s); });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

// Every result is a 200 or a 429 rate_limit_exceeded with Retry-After: 1, and there are both.
inline void expect_served_or_rate_limited(const std::vector<HttpResult>& results) {
  int ok = 0, limited = 0;
  for (const HttpResult& r : results) {
    if (r.status == 200) ++ok;
    if (r.status != 429) continue;
    ++limited;
    EXPECT_EQ(r.headers.count("retry-after") ? r.headers.at("retry-after") : "", "1");
    EXPECT_NE(r.body.find("\"rate_limit_exceeded\""), std::string::npos) << r.body;
  }
  EXPECT_EQ(ok + limited, static_cast<int>(results.size()));
  EXPECT_GE(ok, 1);
  EXPECT_GE(limited, 1);
}

// `pagellm serve ... --port 0`; the port comes from the "serving model ... on http://H:P" line.
class ServerProcess {
 public:
  // model_path: the GGUF to serve (default: the bundled stories260K). rlimit_nofile > 0: the
  // child's RLIMIT_NOFILE, soft and hard (a hard descriptor limit the server cannot lift).
  explicit ServerProcess(std::vector<std::string> args, std::string model_path = "", int64_t rlimit_nofile = 0) {
    if (model_path.empty()) model_path = std::string(PAGELLM_SOURCE_DIR) + "/models/stories260K-f32.gguf";
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ == 0) {
      if (rlimit_nofile > 0) {
        const rlimit rl{static_cast<rlim_t>(rlimit_nofile), static_cast<rlim_t>(rlimit_nofile)};
        setrlimit(RLIMIT_NOFILE, &rl);
      }
      dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      std::vector<std::string> argv = {
          PAGELLM_BINARY,        "serve",      "-m", model_path, "--port", "0", "--threads", "1",
          "--served-model-name", "stories260K"};
      argv.insert(argv.end(), args.begin(), args.end());
      std::vector<char*> cargv;
      for (std::string& s : argv) cargv.push_back(s.data());
      cargv.push_back(nullptr);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
    close(fds[1]);
    err_fd_ = fds[0];
    read_port();
    reader_ = std::thread([this] {
      char buf[4096];
      for (ssize_t n; (n = read(err_fd_, buf, sizeof buf)) > 0;) {
        std::lock_guard<std::mutex> lock(tail_mu_);
        tail_.append(buf, static_cast<size_t>(n));
        if (tail_.size() > 16384) tail_.erase(0, tail_.size() - 16384);
      }
    });
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (reader_.joinable()) reader_.join();
    close(err_fd_);
  }
  int port() const { return port_; }
  const std::string& log() const { return log_; }
  pid_t pid() const { return pid_; }

  // SIGTERM, then the exit status (-1: killed after timeout_s or by a signal).
  int stop(double timeout_s = 20) {
    kill(pid_, SIGTERM);
    return wait_exit(timeout_s);
  }
  int wait_exit(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        pid_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code != 0) {  // say why: the signal, and the server's last words (sanitizer reports included)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::lock_guard<std::mutex> lock(tail_mu_);
      std::fprintf(stderr, "pagellm serve exited with status %d (signal %d); its stderr ends with:\n%s\n", code,
                   WIFSIGNALED(status) ? WTERMSIG(status) : 0, tail_.c_str());
    }
    return code;
  }

 private:
  void read_port() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    char buf[1024];
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{err_fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = read(err_fd_, buf, sizeof buf);
      if (n <= 0) break;
      log_.append(buf, static_cast<size_t>(n));
      const size_t at = log_.find(" on http://");
      const size_t eol = at == std::string::npos ? at : log_.find('\n', at);
      if (eol != std::string::npos) {
        port_ = std::stoi(log_.substr(log_.find(':', at + 11) + 1));
        return;
      }
    }
    throw std::runtime_error("server did not start:\n" + log_);
  }

  pid_t pid_ = -1;
  int err_fd_ = -1;
  int port_ = 0;
  std::string log_;
  std::mutex tail_mu_;
  std::string tail_;  // last 16 KiB of the server's stderr after start-up
  std::thread reader_;
};

// /metrics as name{labels} -> value, plus the first sample under each bare name.
inline std::map<std::string, double> read_metrics(int port) {
  std::map<std::string, double> m;
  const HttpResult r = http(port, "GET", "/metrics");
  size_t pos = 0;
  while (pos < r.body.size()) {
    const size_t eol = r.body.find('\n', pos);
    const std::string line = r.body.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    const std::string key = line.substr(0, sp);
    const double v = std::stod(line.substr(sp + 1));
    m[key] = v;
    m.emplace(key.substr(0, key.find('{')), v);  // first sample under the bare name
  }
  return m;
}

// The concatenated text deltas of an SSE body, with the finish_reason of each choice.
struct Streamed {
  std::string text;
  std::vector<std::string> finish_reasons;
  bool done = false;
  nlohmann::json usage;
};
inline Streamed collect(const std::string& body, bool chat) {
  Streamed s;
  for (const std::string& data : server::parse_sse_data(body)) {
    if (data == "[DONE]") {
      s.done = true;
      continue;
    }
    const nlohmann::json j = nlohmann::json::parse(data);
    if (j.contains("usage") && !j["usage"].is_null()) s.usage = j["usage"];
    for (const nlohmann::json& c : j["choices"]) {
      if (chat)
        s.text += c["delta"].value("content", "");
      else
        s.text += c["text"].get<std::string>();
      if (!c["finish_reason"].is_null()) s.finish_reasons.push_back(c["finish_reason"]);
    }
  }
  return s;
}

}  // namespace pagellm::test
