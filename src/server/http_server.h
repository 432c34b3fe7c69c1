// A small asynchronous HTTP/1.1 server (Boost.Beast over Asio; RFC 9112): keep-alive, a request
// body limit, Expect: 100-continue, HEAD (the GET response's headers, no body), chunked streaming
// responses, notice of a client that goes away mid-request, and a cap on open connections below
// the process's descriptor limit (the idlest keep-alive connection is closed to make room). A
// fixed number of I/O threads serves every connection: one strand per connection, no thread per
// connection. Beast stays inside http_server.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pagellm::server {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;         // "GET", "POST", "HEAD", ...
  std::string target;         // as sent, e.g. "/v1/models?x=1"
  std::string path;           // target without the query
  std::string authorization;  // the Authorization header, or ""
  std::string content_type;   // the Content-Type header, or ""
  std::string host;           // the Host header, or ""; an absolute-form target's authority
  int host_headers = 0;       // how many Host headers came (RFC 9112: exactly one in HTTP/1.1)
  unsigned version = 11;      // 10 or 11
  std::string origin;         // the Origin header (sent by browsers), or ""
  bool has_body = false;      // the request framed a body (Content-Length or chunked), even empty
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HeaderList headers;  // extra headers (Retry-After, Allow, ...)
};

// One request/response on a connection. Every method except post() must be called on the
// exchange's strand (post() runs a function there); calls after the exchange ended (response
// complete or client gone) are ignored, so callers need not track that.
class Exchange {
 public:
  virtual ~Exchange() = default;
  // A complete response.
  virtual void respond(HttpResponse response) = 0;
  // Starts a 200 text/event-stream response (chunked on HTTP/1.1); then write()s, then finish().
  virtual void start_stream() = 0;
  virtual void write(std::string data) = 0;
  virtual void finish_stream() = 0;
  // `callback` runs (on the strand) if the client disconnects before the response is complete.
  virtual void on_disconnect(std::function<void()> callback) = 0;
  // Thread-safe: runs fn on the exchange's strand.
  virtual void post(std::function<void()> fn) = 0;
  // Whether a response can still be sent (the client is there and nothing final was sent yet).
  virtual bool is_open() const = 0;
  // Headers added to the response that follows (respond() or start_stream()), e.g. CORS ones.
  virtual void set_response_headers(HeaderList headers) = 0;
};

// Called on the connection's strand for every complete request.
using RequestHandler = std::function<void(HttpRequest request, std::shared_ptr<Exchange> exchange)>;

class HttpServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    uint16_t port = 8000;              // 0: an ephemeral port (see port())
    int64_t max_body_bytes = 1 << 20;  // larger bodies get 413 and the connection is closed
    int io_threads = 2;
    // Seconds for a request's headers to arrive (also the keep-alive idle time; past it the
    // connection is closed), then as long again for its body (past it: 408, then closed).
    double idle_timeout_seconds = 60;
    // Most connections open at once; 0: the descriptor limit (RLIMIT_NOFILE, soft) less
    // kReservedFds for everything else the process opens. Beyond it the idlest connection that
    // waits for a request is closed; if none is idle the new one gets 503 and is closed.
    int64_t max_connections = 0;
    // Most bytes of request bodies being received at once, by their Content-Length (a chunked
    // body counts as max_body_bytes); 0: max(512 MiB, 16 x max_body_bytes). A body that does not
    // fit gets 503 + Retry-After before it is read, so slow uploads cannot grow the process
    // beyond it (without it: open connections x max_body_bytes).
    int64_t max_body_bytes_in_flight = 0;
    // Every response status sent, including the server's own 400 / 413 (for metrics).
    std::function<void(int status)> on_status;
  };

  // Binds and listens. Throws pagellm::Error when the address cannot be bound.
  HttpServer(Options options, RequestHandler handler);
  ~HttpServer();  // stop()s

  // Descriptors left to the rest of the process when max_connections is derived from the limit.
  static constexpr int64_t kReservedFds = 64;

  uint16_t port() const;            // the bound port
  int64_t max_connections() const;  // the cap in force
  void start();                     // starts accepting on io_threads threads
  void stop_accepting();            // closes the listening socket; open connections keep being served
  // Waits until no exchange is in progress (read but not completely answered), or the timeout.
  // Returns whether it became idle.
  bool wait_idle(double timeout_seconds);
  void stop();  // stops the I/O threads and closes every connection

  struct Impl;  // defined in http_server.cc (its sessions use it)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagellm::server
