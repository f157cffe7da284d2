// HttpSession's completion requests: admission, the engine's sink, and the response,
// whole or as server-sent events (docs/HTTP.md). Runs on the gateway's thread; the sink
// posts every delta and completion there.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <boost/asio/post.hpp>

#include "server/admission.h"
#include "server/http/http_session.h"

namespace specpipe::server::http {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;

int engine_error_status(const std::string& code) {
  if (code == "overloaded") return 429;
  if (code == "bad_request" || code == "out_of_capacity") return 400;
  if (code == "shutting_down") return 503;
  return 500;
}

/// The engine's sink for one request: posts its deltas and completion onto the gateway's
/// thread. It lets go of the session with the completion, so a sink the scheduler drops
/// later (possibly after the gateway is gone) never owns the session, whose socket and
/// timer must be destroyed on the gateway's thread before its io_context. Called in order
/// on the scheduler's thread (actors/response_sink.h).
class SessionSink final : public actors::ResponseSink {
 public:
  SessionSink(std::shared_ptr<HttpSession> session, net::any_io_executor executor)
      : session_(std::move(session)), executor_(std::move(executor)) {}
  void on_delta(const actors::TokenDelta& d) override {
    if (session_) net::post(executor_, [s = session_, d] { s->on_delta(d); });
  }
  void on_complete(const actors::Completion& c) override {
    if (session_) net::post(executor_, [s = std::move(session_), c] { s->on_complete(c); });
  }

 private:
  std::shared_ptr<HttpSession> session_;
  net::any_io_executor executor_;
};

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

void HttpSession::start_completion(const Request& request, ApiKind kind) {
  if (state_.stopping) return respond_error(503, "shutting_down", "the server is shutting down");
  const ApiContext context{state_.config.defaults, state_.chat_template, state_.model_name, state_.config.models.target};
  auto parsed = parse_api_request(kind, request.body(), context);
  if (auto* error = std::get_if<ApiError>(&parsed)) {
    return respond(error->status, error_body(*error));
  }
  ApiRequest& r = std::get<ApiRequest>(parsed);
  if (auto refused = prepare_prompt(state_.engine, r.prompt_text, r.spec))
    return respond(400, error_body({400, "bad_request", *refused, kind == ApiKind::chat ? "messages" : "prompt"}));
  if (state_.inflight.fetch_add(1) >= state_.config.server.max_inflight) {
    state_.inflight.fetch_sub(1);
    return respond_error(429, "overloaded",
                         fmt::format("{} requests in flight (server.max_inflight); retry later", state_.config.server.max_inflight));
  }
  response_id_ = state_.next_response_id++;
  header_ = {kind, fmt::format("{}-{}", kind == ApiKind::completion ? "cmpl" : "chatcmpl", response_id_),
             state_.model_name, unix_seconds()};
  streaming_ = r.stream;
  include_usage_ = r.include_usage;
  stream_started_ = false;
  first_text_seen_ = false;
  active_ = true;
  engine_id_ = state_.engine.submit(std::move(r.spec), std::make_shared<SessionSink>(shared_from_this(), socket_.get_executor()));
  {
    std::lock_guard lock(state_.active_mutex);
    state_.active[response_id_] = engine_id_;
  }
  watch_disconnect();
}

void HttpSession::on_delta(const actors::TokenDelta& delta) {
  if (delta.tokens.empty() && delta.text.empty()) return;
  if (!first_text_seen_) {
    first_text_seen_ = true;
    state_.metrics.first_token(std::chrono::duration<double>(Clock::now() - arrived_).count());
  }
  if (!streaming_ || gone_ || closed_) return;
  stream_event(delta_chunk(header_, delta, !stream_started_));
}

void HttpSession::on_complete(const actors::Completion& c) {
  active_ = false;
  state_.inflight.fetch_sub(1);
  {
    std::lock_guard lock(state_.active_mutex);
    state_.active.erase(response_id_);
  }
  state_.metrics.tokens(c.stats.prompt_tokens, static_cast<int64_t>(c.tokens.size()));
  const double seconds = std::chrono::duration<double>(Clock::now() - arrived_).count();
  if (gone_ || closed_) {
    state_.metrics.request_done(route_, 499, seconds);  // nginx's "client closed request"
    return;
  }
  if (c.reason == FinishReason::error) {
    const std::string code = c.error_code.empty() ? "internal" : c.error_code;
    const int status = engine_error_status(code);
    if (!stream_started_) return respond_error(status, code, c.error);
    stream_event(error_body({status, code, c.error, ""}));  // the 200 head is gone: the error is an event
  } else if (!streaming_) {
    return respond(200, completion_body(header_, c));
  } else {
    stream_event(final_chunk(header_, c));
    if (include_usage_) stream_event(usage_chunk(header_, c));
  }
  end_stream();
  state_.metrics.request_done(route_, 200, seconds);
  response_done();
}

void HttpSession::stream_event(const std::string& json_text) {
  if (!stream_started_) {
    stream_started_ = true;
    // HTTP/1.0 has no chunked encoding: the stream then ends with the connection.
    std::string head = fmt::format("HTTP/1.1 200 OK\r\nServer: specpipe\r\nContent-Type: text/event-stream\r\n"
                                   "Cache-Control: no-cache\r\n{}\r\n",
                                   http10_ ? "Connection: close\r\n" : "Transfer-Encoding: chunked\r\n");
    if (!keep_alive_ && !http10_) head.insert(head.size() - 2, "Connection: close\r\n");
    send(std::move(head));
  }
  const std::string event = sse_event(json_text);
  send(http10_ ? event : fmt::format("{:x}\r\n{}\r\n", event.size(), event));
}

void HttpSession::end_stream() {
  static const std::string kDone = "data: [DONE]\n\n";
  send(http10_ ? kDone : fmt::format("{:x}\r\n{}\r\n0\r\n\r\n", kDone.size(), kDone));
}

void HttpSession::watch_disconnect() {
  if (watching_ || closed_ || !active_) return;
  watching_ = true;
  socket_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
    self->watching_ = false;
    if (!ec) {
      self->buffer_.commit(n);  // a pipelined next request: the next read parses it
      if (self->buffer_.size() < kWatchLimit) self->watch_disconnect();
    } else if (ec != net::error::operation_aborted) {
      self->client_gone();
      return;
    }
    if (self->resume_after_watch_) {
      self->resume_after_watch_ = false;
      self->read_request();
    }
  });
}

}  // namespace specpipe::server::http
