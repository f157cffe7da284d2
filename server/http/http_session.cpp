#include "server/http/http_session.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>

#include "server/admission.h"
#include "server/http/openai_request.h"

namespace specpipe::server::http {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using nlohmann::json;

constexpr size_t kHeaderLimit = 16 * 1024;

std::string response_head(int status, const char* content_type, std::optional<size_t> content_length, bool chunked,
                          bool keep_alive, const std::string& extra) {
  std::string head = fmt::format("HTTP/1.1 {} {}\r\nServer: specpipe\r\nContent-Type: {}\r\n", status,
                                 std::string(bhttp::obsolete_reason(static_cast<bhttp::status>(status))), content_type);
  if (content_length) head += fmt::format("Content-Length: {}\r\n", *content_length);
  if (chunked) head += "Transfer-Encoding: chunked\r\n";
  if (!keep_alive) head += "Connection: close\r\n";
  return head + extra + "\r\n";
}

}  // namespace

HttpSession::HttpSession(net::ip::tcp::socket socket, GatewayState& state)
    : socket_(std::move(socket)), state_(state), deadline_(socket_.get_executor()) {}

void HttpSession::start() { read_request(); }

// ---- reading ---------------------------------------------------------------------------

void HttpSession::read_request() {
  if (closed_) return;
  parser_.emplace();
  parser_->body_limit(static_cast<uint64_t>(state_.config.server.max_message_bytes));
  parser_->header_limit(kHeaderLimit);
  reading_ = true;
  timed_out_ = false;
  arm_deadline();
  bhttp::async_read_header(socket_, buffer_, *parser_,
                           [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void HttpSession::on_header(beast::error_code ec) {
  if (ec) return read_failed(ec);
  // curl and others wait for this before sending a body over 1 KiB.
  if (beast::iequals(parser_->get()[bhttp::field::expect], "100-continue")) {
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    beast::error_code wec;
    net::write(socket_, net::buffer(kContinue), wec);
    if (wec) return read_failed(wec);
  }
  bhttp::async_read(socket_, buffer_, *parser_,
                    [self = shared_from_this()](beast::error_code ec2, size_t) { self->on_body(ec2); });
}

void HttpSession::on_body(beast::error_code ec) {
  if (ec) return read_failed(ec);
  reading_ = false;
  deadline_.cancel();
  Request request = parser_->release();
  route(request);
}

void HttpSession::read_failed(beast::error_code ec) {
  reading_ = false;
  deadline_.cancel();
  keep_alive_ = false;
  const bool partial = parser_ && parser_->got_some();
  route_ = "(read)";
  arrived_ = Clock::now();
  if (timed_out_) {
    if (!partial) return close();  // an idle keep-alive connection: nothing to answer
    return respond_error(408, "timeout",
                         fmt::format("the request was not received within {} ms", state_.config.server.http_timeout_ms));
  }
  if (ec == bhttp::error::body_limit)
    return respond_error(413, "too_large", fmt::format("the body exceeds the limit of {} bytes (server.max_message_bytes)",
                                                       state_.config.server.max_message_bytes));
  if (ec == bhttp::error::header_limit)
    return respond_error(431, "too_large", fmt::format("the request head exceeds {} bytes", kHeaderLimit));
  if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
      ec == net::error::operation_aborted || !partial)
    return close();
  respond_error(400, "malformed_http", fmt::format("malformed HTTP request: {}", ec.message()));
}

void HttpSession::arm_deadline() {
  deadline_.expires_after(std::chrono::milliseconds(state_.config.server.http_timeout_ms));
  deadline_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec) self->on_deadline();
  });
}

void HttpSession::on_deadline() {
  if (deadline_.expiry() > std::chrono::steady_clock::now()) return;  // re-armed after it fired
  if (reading_) {
    timed_out_ = true;
    beast::error_code ec;
    socket_.cancel(ec);  // the read completes with operation_aborted: read_failed answers 408
  } else if (writing_ || lingering_) {
    client_gone();  // a client that does not take its response within the limit
  }
}

// ---- routing ---------------------------------------------------------------------------

void HttpSession::route(const Request& request) {
  arrived_ = Clock::now();
  keep_alive_ = request.keep_alive();
  http10_ = request.version() < 11;
  std::string_view path(request.target().data(), request.target().size());
  path = path.substr(0, path.find('?'));
  const bool get = request.method() == bhttp::verb::get;
  const bool post = request.method() == bhttp::verb::post;
  route_ = std::string(path);
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (!post) return respond_error(405, "method_not_allowed", fmt::format("{} takes POST", path));
    return start_completion(request, path == "/v1/completions" ? ApiKind::completion : ApiKind::chat);
  }
  if (path == "/health" || path == "/v1/models" || path == "/metrics") {
    if (!get) return respond_error(405, "method_not_allowed", fmt::format("{} takes GET", path));
  } else {
    route_ = "(other)";  // unknown paths share one metrics label
    return respond_error(404, "not_found", fmt::format("no route {} (see docs/HTTP.md)", path));
  }
  if (path == "/health") {
    const bool stopping = state_.stopping;
    json j = {{"status", stopping ? "shutting_down" : "ok"}, {"model", state_.model_name},
              {"drafter", to_string(state_.config.drafter.type)}, {"inflight", state_.inflight.load()}};
    return respond(stopping ? 503 : 200, j.dump());
  }
  if (path == "/v1/models") {
    json model = {{"id", state_.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "specpipe"}};
    return respond(200, json{{"object", "list"}, {"data", json::array({model})}}.dump());
  }
  EngineSnapshot snapshot{state_.engine.stats(), state_.engine.kv_occupancy(), state_.engine.strategy_metrics()};
  respond(200, state_.metrics.render(snapshot, state_.inflight.load()), "text/plain; version=0.0.4; charset=utf-8");
}

void HttpSession::respond(int status, const std::string& body, const char* content_type, const std::string& extra) {
  const bool keep = keep_alive_ && !http10_;
  send(response_head(status, content_type, body.size(), false, keep, extra) + body);
  state_.metrics.request_done(route_, status, std::chrono::duration<double>(Clock::now() - arrived_).count());
  response_done();
}

void HttpSession::respond_error(int status, const std::string& code, const std::string& message) {
  respond(status, error_body({status, code, message, ""}), "application/json",
          status == 429 ? "Retry-After: 1\r\n" : std::string());
}

// ---- writing ---------------------------------------------------------------------------

void HttpSession::send(std::string bytes) {
  if (closed_) return;
  outbox_.push_back(std::move(bytes));
  write_next();
}

void HttpSession::response_done() {
  if (keep_alive_ && !http10_)
    next_after_write_ = true;
  else
    close_after_write_ = true;
  write_next();
}

void HttpSession::write_next() {
  if (writing_ || closed_) return;
  if (outbox_.empty()) {
    if (close_after_write_) return watching_ ? close() : linger_close();
    if (next_after_write_) {
      next_after_write_ = false;
      if (watching_) {
        resume_after_watch_ = true;  // the watch read ends with operation_aborted, then reads on
        beast::error_code ec;
        socket_.cancel(ec);
      } else {
        read_request();
      }
    }
    return;
  }
  writing_ = true;
  ++state_.writing;
  deadline_.expires_after(std::chrono::milliseconds(state_.config.server.http_timeout_ms));
  deadline_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec) self->on_deadline();
  });
  net::async_write(socket_, net::buffer(outbox_.front()),
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_written(ec); });
}

void HttpSession::on_written(beast::error_code ec) {
  writing_ = false;
  --state_.writing;
  deadline_.cancel();
  if (ec) return client_gone();
  if (!outbox_.empty()) outbox_.pop_front();
  write_next();
}

/// Half-close, then read what the client still sends for a moment before closing: closing
/// with unread bytes would reset the connection and could destroy the response in flight.
void HttpSession::linger_close() {
  if (closed_) return;
  lingering_ = true;
  beast::error_code ec;
  socket_.shutdown(net::ip::tcp::socket::shutdown_send, ec);
  if (ec) return close();
  deadline_.expires_after(std::chrono::seconds(1));
  deadline_.async_wait([self = shared_from_this()](beast::error_code e) {
    if (!e) self->on_deadline();
  });
  drain();
}

void HttpSession::drain() {
  socket_.async_read_some(net::buffer(scratch_), [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec) return self->close();
    self->drain();
  });
}

void HttpSession::close() {
  if (closed_) return;
  closed_ = true;
  outbox_.clear();
  beast::error_code ec;
  deadline_.cancel();
  socket_.shutdown(net::ip::tcp::socket::shutdown_both, ec);
  socket_.close(ec);
}

void HttpSession::client_gone() {
  if (gone_) return;
  gone_ = true;
  if (active_) {
    state_.engine.cancel(engine_id_);  // its completion still arrives: on_complete settles the count
    state_.metrics.cancelled_by_disconnect();
  }
  close();
}

}  // namespace specpipe::server::http
