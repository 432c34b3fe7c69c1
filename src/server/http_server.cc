// HTTP/1.1 connections over Boost.Beast. One Session per connection, all of its handlers on one
// strand. A session alternates between reading a request and one exchange (handler + response);
// during an exchange it keeps one read pending so that a client that goes away is noticed at
// once (bytes a pipelining client sends meanwhile are kept for the next request).
#include "server/http_server.h"

#include <sys/resource.h>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <list>
#include <optional>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "server/api_error.h"

namespace pagellm::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {
constexpr size_t kHeaderLimit = 64 << 10;       // request line + headers, bytes
constexpr size_t kMaxPipelinedBytes = 1 << 20;  // stop watching a connection beyond this
constexpr auto kLingerTime = std::chrono::seconds(2);
}  // namespace

// What the connection cap needs of a session: to be closed when it is the idlest.
class IdleConnection {
 public:
  virtual ~IdleConnection() = default;
  virtual void close_if_idle() = 0;  // thread-safe: posts to the session's strand
};

struct HttpServer::Impl {
  Options options;
  int64_t max_connections = 0;  // resolved at construction
  std::atomic<int64_t> num_connections{0};
  int64_t max_body_bytes_in_flight = 0;  // resolved at construction
  std::atomic<int64_t> body_bytes_in_flight{0};
  // Sessions waiting for a request, longest waiting first. Guarded by idle_mu.
  std::mutex idle_mu;
  std::list<std::weak_ptr<IdleConnection>> idle;
  RequestHandler handler;
  net::io_context ioc;
  tcp::acceptor acceptor{net::make_strand(ioc)};
  net::steady_timer accept_retry{acceptor.get_executor()};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  std::atomic<int64_t> num_busy{0};  // exchanges read but not completely answered

  void do_accept();
  // A new connection is to be opened: make room under max_connections. False when every open
  // connection is busy (the new one is then refused).
  bool make_room();
  void status_sent(int status) const {
    if (options.on_status) options.on_status(status);
  }
};

namespace {

class Session : public IdleConnection, public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, HttpServer::Impl* server) : stream_(std::move(socket)), server_(server) {
    ++server_->num_connections;
  }
  ~Session() override {
    release_body_bytes();
    set_idle(false);
    --server_->num_connections;
  }
  void close_if_idle() override {
    post([self = shared_from_this()] {
      if (self->in_exchange_ || self->closed_) return;
      self->closed_ = true;
      beast::error_code ignored;
      self->stream_.socket().close(ignored);
    });
  }

  void run() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_header(); });
  }
  void post(std::function<void()> fn) { net::post(stream_.get_executor(), std::move(fn)); }

  void respond(uint64_t serial, HttpResponse r);
  void start_stream(uint64_t serial);
  void write(uint64_t serial, std::string data);
  void finish_stream(uint64_t serial);
  void on_disconnect(uint64_t serial, std::function<void()> cb) {
    if (active(serial)) on_disconnect_ = std::move(cb);
  }
  bool active(uint64_t serial) const { return in_exchange_ && serial == serial_ && !response_done_; }
  void set_response_headers(uint64_t serial, HeaderList headers) {
    if (active(serial)) extra_headers_ = std::move(headers);
  }

 private:
  // Enters / leaves the server's list of connections waiting for a request (any thread's view of
  // this session goes through idle_mu).
  void set_idle(bool idle);
  // Reserves the body's bytes against max_body_bytes_in_flight; false when they do not fit.
  bool reserve_body_bytes(int64_t n);
  void release_body_bytes() {
    server_->body_bytes_in_flight -= reserved_;
    reserved_ = 0;
  }
  void read_header();
  void on_header(beast::error_code ec);
  void read_body();
  void dispatch();
  void begin_exchange(bool keep_alive);
  void fail_request(int status, const std::string& message);
  void enqueue(std::string bytes);
  void do_write();
  void on_write(beast::error_code ec);
  void end_exchange();
  void start_watch();
  void on_watch(beast::error_code ec, size_t n);
  void peer_gone();
  void linger_close();
  void discard_until_close();

  beast::tcp_stream stream_;
  net::steady_timer body_timer_{stream_.get_executor()};  // the body's deadline (408 past it)
  bool reading_body_ = false;
  bool body_timed_out_ = false;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpServer::Impl* server_;
  uint64_t serial_ = 0;  // exchange counter; stale Exchange handles compare unequal
  bool in_exchange_ = false;
  bool keep_alive_ = false;
  unsigned version_ = 11;
  bool streaming_ = false;
  bool response_done_ = false;  // the last bytes of the response are queued
  bool closed_ = false;
  bool lingering_ = false;  // half-closed, discarding input until the client closes
  bool watching_ = false;
  bool head_ = false;         // the current request is HEAD: headers only
  int64_t reserved_ = 0;      // body bytes reserved while the body is being received
  HeaderList extra_headers_;  // for the current exchange's response
  std::optional<std::list<std::weak_ptr<IdleConnection>>::iterator> idle_it_;
  std::function<void()> on_disconnect_;
  std::deque<std::string> outbox_;
  bool writing_ = false;
  std::string write_buf_;
  std::array<char, 4096> discard_{};
};

class ExchangeImpl : public Exchange {
 public:
  ExchangeImpl(std::shared_ptr<Session> s, uint64_t serial) : s_(std::move(s)), serial_(serial) {}
  void respond(HttpResponse r) override { s_->respond(serial_, std::move(r)); }
  void start_stream() override { s_->start_stream(serial_); }
  void write(std::string data) override { s_->write(serial_, std::move(data)); }
  void finish_stream() override { s_->finish_stream(serial_); }
  void on_disconnect(std::function<void()> cb) override { s_->on_disconnect(serial_, std::move(cb)); }
  void post(std::function<void()> fn) override { s_->post(std::move(fn)); }
  bool is_open() const override { return s_->active(serial_); }
  void set_response_headers(HeaderList h) override { s_->set_response_headers(serial_, std::move(h)); }

 private:
  std::shared_ptr<Session> s_;
  uint64_t serial_;
};

void Session::set_idle(bool idle) {
  std::lock_guard<std::mutex> lock(server_->idle_mu);
  if (idle && !idle_it_) {
    idle_it_ = server_->idle.insert(server_->idle.end(), weak_from_this());
  } else if (!idle && idle_it_) {
    server_->idle.erase(*idle_it_);
    idle_it_.reset();
  }
}

void Session::read_header() {
  if (closed_) return;
  set_idle(true);
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(static_cast<uint64_t>(server_->options.max_body_bytes));
  stream_.expires_after(std::chrono::milliseconds(static_cast<int64_t>(server_->options.idle_timeout_seconds * 1e3)));
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void Session::on_header(beast::error_code ec) {
  if (ec == http::error::header_limit) {
    return fail_request(431, "request line and headers larger than " + std::to_string(kHeaderLimit) + " bytes");
  }
  if (ec == http::error::body_limit) {
    return fail_request(413, "request body larger than " + std::to_string(server_->options.max_body_bytes) + " bytes");
  }
  if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::operation_aborted ||
      ec == net::error::connection_reset || ec == net::error::eof) {
    closed_ = true;
    beast::error_code ignored;
    stream_.socket().close(ignored);
    return;
  }
  if (ec) return fail_request(400, std::string("malformed HTTP request: ") + ec.message());
  const auto& head = parser_->get();
  if (const auto enc = head[http::field::content_encoding]; !enc.empty() && !beast::iequals(enc, "identity")) {
    return fail_request(415, "Content-Encoding '" + std::string(enc.substr(0, 64)) + "' is not supported");
  }
  const auto expect = head[http::field::expect];
  if (!expect.empty() && !beast::iequals(expect, "100-continue")) {
    return fail_request(417, "Expect '" + std::string(expect.substr(0, 64)) + "' is not supported");
  }
  if (parser_->is_done()) return dispatch();
  const int64_t declared = parser_->content_length() ? static_cast<int64_t>(*parser_->content_length())
                                                     : server_->options.max_body_bytes;  // chunked
  if (!reserve_body_bytes(declared)) {
    return fail_request(503, "too many request bodies are being received at once (" +
                                 std::to_string(server_->max_body_bytes_in_flight) + " bytes); retry later");
  }
  if (beast::iequals(expect, "100-continue")) {
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    net::async_write(stream_, net::buffer(kContinue), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->linger_close();
      self->read_body();
    });
    return;
  }
  read_body();
}

// The body gets its own deadline, answered with 408 (the stream's own timeout would close the
// connection without a word).
void Session::read_body() {
  stream_.expires_never();
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(server_->options.idle_timeout_seconds * 1e3));
  body_timer_.expires_after(timeout);
  body_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || !self->reading_body_ || self->closed_) return;
    self->body_timed_out_ = true;
    beast::error_code ignored;
    // Ends the body read; its handler answers 408. Answering here would start the response's
    // write and the next read while the cancelled read is still pending on the stream (Beast
    // asserts one read at a time: ServeHardening.SlowBodyGets408 aborted under ASan's Debug build).
    self->stream_.socket().cancel(ignored);
  });
  reading_body_ = true;
  http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->reading_body_ = false;
    self->body_timer_.cancel();
    if (self->closed_) return;  // evicted
    if (self->body_timed_out_) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", self->server_->options.idle_timeout_seconds);
      return self->fail_request(408, std::string("the request body did not arrive within ") + secs + " s");
    }
    if (ec == http::error::body_limit) {
      return self->fail_request(
          413, "request body larger than " + std::to_string(self->server_->options.max_body_bytes) + " bytes");
    }
    if (ec == beast::error::timeout || ec == http::error::end_of_stream || ec == net::error::connection_reset ||
        ec == net::error::eof) {
      return self->linger_close();
    }
    if (ec) return self->fail_request(400, std::string("malformed HTTP request: ") + ec.message());
    self->dispatch();
  });
}

void Session::begin_exchange(bool keep_alive) {
  set_idle(false);  // from now on the connection is busy: never evicted by the connection cap
  ++serial_;
  in_exchange_ = true;
  keep_alive_ = keep_alive;
  streaming_ = false;
  response_done_ = false;
  on_disconnect_ = nullptr;
  extra_headers_.clear();
  ++server_->num_busy;
  stream_.expires_never();
}

bool Session::reserve_body_bytes(int64_t n) {
  const int64_t before = server_->body_bytes_in_flight.fetch_add(n);
  if (before > 0 && before + n > server_->max_body_bytes_in_flight) {  // one body always fits
    server_->body_bytes_in_flight -= n;
    return false;
  }
  reserved_ = n;
  return true;
}

void Session::dispatch() {
  release_body_bytes();  // received: from here the WorkQueue's bounds hold it
  http::request<http::string_body> req = parser_->release();
  version_ = req.version();
  begin_exchange(req.keep_alive());
  head_ = req.method() == http::verb::head;
  HttpRequest r;
  r.method = std::string(req.method_string());
  r.target = std::string(req.target());
  r.authorization = std::string(req[http::field::authorization]);
  r.content_type = std::string(req[http::field::content_type]);
  r.host = std::string(req[http::field::host]);
  r.host_headers = static_cast<int>(req.count(http::field::host));
  r.version = req.version();
  // Absolute form (RFC 9112 3.2.2, "http://host:port/path"): the authority replaces Host.
  std::string origin_form = r.target;
  for (const char* scheme : {"http://", "https://"}) {
    if (beast::iequals(beast::string_view(r.target).substr(0, std::strlen(scheme)), scheme)) {
      const size_t start = std::strlen(scheme);
      const size_t slash = r.target.find_first_of("/?", start);
      r.host = r.target.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
      r.host_headers = 1;
      origin_form = slash == std::string::npos ? "/" : r.target.substr(slash);
      if (origin_form.front() == '?') origin_form.insert(0, "/");
    }
  }
  r.path = origin_form.substr(0, origin_form.find('?'));
  r.origin = std::string(req[http::field::origin]);
  r.body = std::move(req.body());
  start_watch();
  server_->handler(std::move(r), std::make_shared<ExchangeImpl>(shared_from_this(), serial_));
}

// A response produced by the HTTP layer itself (413, 400); the connection is closed after it.
void Session::fail_request(int status, const std::string& message) {
  release_body_bytes();
  version_ = parser_ && parser_->is_header_done() ? parser_->get().version() : 11;
  begin_exchange(/*keep_alive=*/false);
  head_ = false;
  HttpResponse r;
  r.status = status;
  r.body = error_body(ApiError(status, message, status == 503 ? "service_unavailable" : "invalid_request_error"));
  if (status == 503) r.headers.emplace_back("Retry-After", "1");
  respond(serial_, std::move(r));
}

void Session::respond(uint64_t serial, HttpResponse r) {
  if (!active(serial) || streaming_) return;
  http::response<http::string_body> res{static_cast<http::status>(r.status), version_};
  res.set(http::field::server, "pagellm");
  res.set(http::field::content_type, r.content_type);
  for (const auto& [name, value] : extra_headers_) res.set(name, value);
  for (const auto& [name, value] : r.headers) res.set(name, value);
  res.keep_alive(keep_alive_);
  res.body() = std::move(r.body);
  res.prepare_payload();
  std::ostringstream os;
  os << res;
  std::string bytes = std::move(os).str();
  if (head_) bytes.resize(bytes.find("\r\n\r\n") + 4);  // the GET headers, Content-Length included
  response_done_ = true;
  server_->status_sent(r.status);
  enqueue(std::move(bytes));
}

void Session::start_stream(uint64_t serial) {
  if (!active(serial) || streaming_) return;
  streaming_ = true;
  if (version_ < 11) keep_alive_ = false;  // no chunked encoding: the end of the body is the close
  std::string h = version_ < 11 ? "HTTP/1.0 200 OK\r\n" : "HTTP/1.1 200 OK\r\n";
  h += "Server: pagellm\r\nContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n";
  h += "X-Accel-Buffering: no\r\n";
  for (const auto& [name, value] : extra_headers_) h.append(name).append(": ").append(value).append("\r\n");
  h += keep_alive_ ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  if (version_ >= 11) h += "Transfer-Encoding: chunked\r\n";
  h += "\r\n";
  enqueue(std::move(h));
}

void Session::write(uint64_t serial, std::string data) {
  if (!active(serial) || !streaming_ || data.empty()) return;  // an empty chunk would end the body
  if (version_ < 11) return enqueue(std::move(data));
  char size[20];
  const int len = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string framed(size, static_cast<size_t>(len));
  framed += data;
  framed += "\r\n";
  enqueue(std::move(framed));
}

void Session::finish_stream(uint64_t serial) {
  if (!active(serial) || !streaming_) return;
  response_done_ = true;
  server_->status_sent(200);
  enqueue(version_ < 11 ? std::string() : std::string("0\r\n\r\n"));
}

void Session::enqueue(std::string bytes) {
  outbox_.push_back(std::move(bytes));
  if (!writing_) do_write();
}

void Session::do_write() {
  write_buf_.clear();
  for (std::string& s : outbox_) write_buf_ += s;
  outbox_.clear();
  writing_ = true;
  net::async_write(stream_, net::buffer(write_buf_),
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_write(ec); });
}

void Session::on_write(beast::error_code ec) {
  writing_ = false;
  if (ec) return peer_gone();
  if (!outbox_.empty()) return do_write();
  if (in_exchange_ && response_done_) end_exchange();
}

void Session::end_exchange() {
  in_exchange_ = false;
  on_disconnect_ = nullptr;
  --server_->num_busy;
  if (!keep_alive_) return linger_close();
  if (watching_) {
    beast::error_code ignored;
    stream_.socket().cancel(ignored);  // on_watch then reads the next request
    return;
  }
  read_header();
}

void Session::start_watch() {
  if (watching_ || closed_ || buffer_.size() >= kMaxPipelinedBytes) return;
  watching_ = true;
  stream_.async_read_some(buffer_.prepare(4096),
                          [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_watch(ec, n); });
}

void Session::on_watch(beast::error_code ec, size_t n) {
  watching_ = false;
  if (lingering_) {
    if (!ec || ec == net::error::operation_aborted) return discard_until_close();
    beast::error_code ignored;
    stream_.socket().close(ignored);
    return;
  }
  if (!ec) {
    buffer_.commit(n);
    if (in_exchange_) return start_watch();
    return read_header();
  }
  if (ec == net::error::operation_aborted && !in_exchange_ && !closed_) return read_header();
  peer_gone();
}

void Session::peer_gone() {
  if (closed_) return;
  closed_ = true;
  beast::error_code ignored;
  stream_.socket().close(ignored);
  if (!in_exchange_) return;
  in_exchange_ = false;
  --server_->num_busy;
  std::function<void()> cb = std::move(on_disconnect_);
  on_disconnect_ = nullptr;
  if (cb) cb();
}

// Half-closes, then discards what the client still sends (an unread body) for a short while, so
// that closing does not reset the connection before the client has read the response.
void Session::linger_close() {
  if (closed_) return;
  closed_ = true;
  lingering_ = true;
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream_.expires_after(kLingerTime);
  if (watching_) {
    stream_.socket().cancel(ignored);  // on_watch continues with discard_until_close()
    return;
  }
  discard_until_close();
}

void Session::discard_until_close() {
  stream_.async_read_some(net::buffer(discard_), [self = shared_from_this()](beast::error_code ec, size_t) {
    if (!ec) return self->discard_until_close();
    beast::error_code ignored;
    self->stream_.socket().close(ignored);
  });
}

}  // namespace

void HttpServer::Impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (ec) {
      // E.g. out of file descriptors: try again shortly instead of spinning.
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](beast::error_code) {
        if (acceptor.is_open()) do_accept();
      });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    if (make_room()) {
      std::make_shared<Session>(std::move(socket), this)->run();
    } else {
      // Every connection is busy: a short 503 written at once (it fits the socket buffer), then close.
      ApiError e(503, "too many open connections (" + std::to_string(max_connections) + "); retry later",
                 "service_unavailable");
      const std::string body = error_body(e);
      const std::string bytes =
          "HTTP/1.1 503 Service Unavailable\r\nServer: pagellm\r\nContent-Type: "
          "application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body;
      socket.non_blocking(true, ignored);
      socket.write_some(net::buffer(bytes), ignored);
      socket.shutdown(tcp::socket::shutdown_send, ignored);
      socket.close(ignored);
      status_sent(503);
    }
    do_accept();
  });
}

bool HttpServer::Impl::make_room() {
  if (num_connections.load() < max_connections) return true;
  std::shared_ptr<IdleConnection> victim;
  {
    std::lock_guard<std::mutex> lock(idle_mu);
    // Entries belong to their sessions (which erase them); one whose session is being destroyed
    // is skipped. The chosen one moves to the back, so it is not chosen again before it closes.
    for (auto it = idle.begin(); it != idle.end(); ++it) {
      victim = it->lock();
      if (!victim) continue;
      idle.splice(idle.end(), idle, it);
      break;
    }
  }
  if (!victim) return false;
  victim->close_if_idle();
  return true;
}

HttpServer::HttpServer(Options options, RequestHandler handler) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->handler = std::move(handler);
  impl_->max_connections = impl_->options.max_connections;
  impl_->max_body_bytes_in_flight = impl_->options.max_body_bytes_in_flight > 0
                                        ? impl_->options.max_body_bytes_in_flight
                                        : std::max<int64_t>(int64_t{512} << 20, 16 * impl_->options.max_body_bytes);
  if (impl_->max_connections <= 0) {
    rlimit rl{};
    const int64_t limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                              ? static_cast<int64_t>(rl.rlim_cur)
                              : int64_t{1} << 20;
    impl_->max_connections = std::max<int64_t>(1, limit > 2 * kReservedFds ? limit - kReservedFds : limit / 2);
  }
  const std::string where = impl_->options.host + ":" + std::to_string(impl_->options.port);
  beast::error_code ec;
  tcp::resolver resolver(impl_->ioc);
  const auto endpoints = resolver.resolve(impl_->options.host, std::to_string(impl_->options.port),
                                          tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) throw Error("cannot resolve " + where + ": " + ec.message());
  const tcp::endpoint ep = endpoints.begin()->endpoint();
  tcp::acceptor& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) throw Error("cannot listen on " + where + ": " + ec.message());
}

HttpServer::~HttpServer() { stop(); }

int64_t HttpServer::max_connections() const { return impl_->max_connections; }

uint16_t HttpServer::port() const {
  beast::error_code ec;
  return impl_->acceptor.local_endpoint(ec).port();
}

void HttpServer::start() {
  impl_->work.emplace(impl_->ioc.get_executor());
  net::post(impl_->acceptor.get_executor(), [impl = impl_.get()] { impl->do_accept(); });
  const int n = std::max(1, impl_->options.io_threads);
  for (int i = 0; i < n; ++i) impl_->threads.emplace_back([impl = impl_.get()] { impl->ioc.run(); });
}

void HttpServer::stop_accepting() {
  std::promise<void> done;
  net::post(impl_->acceptor.get_executor(), [impl = impl_.get(), &done] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    impl->accept_retry.cancel();
    done.set_value();
  });
  if (!impl_->threads.empty()) done.get_future().wait();
}

bool HttpServer::wait_idle(double timeout_seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (impl_->num_busy.load() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

void HttpServer::stop() {
  impl_->work.reset();
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
}

}  // namespace pagellm::server
