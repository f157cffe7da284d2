#pragma once
/// One HTTP connection of the gateway (internal to server/http/): reads requests with a
/// deadline and body limit, routes them, and writes responses, whole or as a
/// server-sent-event stream. While a completion runs it keeps a read open on the socket,
/// so a client that goes away is noticed at once and its request cancelled (KV freed).
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <array>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "server/http/gateway_state.h"
#include "server/http/openai_response.h"

namespace specpipe::server::http {

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(boost::asio::ip::tcp::socket socket, GatewayState& state);
  void start();

  // The engine's events for the request in flight, run on the gateway's thread (its sink
  // posts them there: http_completion.cpp).
  void on_delta(const actors::TokenDelta& delta);
  void on_complete(const actors::Completion& completion);

 private:
  using Clock = std::chrono::steady_clock;
  using Request = boost::beast::http::request<boost::beast::http::string_body>;

  // Reading a request: the head, an optional 100 Continue, the body; one deadline.
  void read_request();
  void on_header(boost::beast::error_code ec);
  void on_body(boost::beast::error_code ec);
  void read_failed(boost::beast::error_code ec);
  void arm_deadline();
  void on_deadline();

  // Routing and the small endpoints.
  void route(const Request& request);
  void respond(int status, const std::string& body, const char* content_type = "application/json",
               const std::string& extra_headers = {});
  void respond_error(int status, const std::string& code, const std::string& message);

  // A completion request in the engine.
  void start_completion(const Request& request, ApiKind kind);
  void stream_event(const std::string& json);
  void end_stream();
  void watch_disconnect();
  /// Bytes of a pipelined next request buffered while a completion runs; beyond it the
  /// watch stops reading (the client is then noticed at the next write). A member, not a
  /// file-local constant: http_completion.cpp uses it, and builds without unity batching
  /// compile that file alone.
  static constexpr size_t kWatchLimit = 64 * 1024;
  void client_gone();

  // Writing: a queue of byte strings, one async_write at a time, each under the deadline.
  void send(std::string bytes);
  void write_next();
  void on_written(boost::beast::error_code ec);
  void response_done();
  void linger_close();
  void drain();
  void close();

  boost::asio::ip::tcp::socket socket_;
  GatewayState& state_;
  boost::asio::steady_timer deadline_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;

  std::string route_;            // for the metrics
  Clock::time_point arrived_;
  bool reading_ = false;         // a request read is outstanding (the deadline guards it)
  bool timed_out_ = false;
  bool keep_alive_ = true;
  bool http10_ = false;          // HTTP/1.0: no chunked encoding, close after the response
  bool closed_ = false;

  std::deque<std::string> outbox_;
  bool writing_ = false;
  bool close_after_write_ = false;
  bool next_after_write_ = false;  // read the next request once the outbox is empty
  bool resume_after_watch_ = false;  // ... once the disconnect watch read has ended
  bool lingering_ = false;
  std::array<char, 4096> scratch_{};  // what a closing connection still sends

  // The completion in flight.
  bool active_ = false;
  bool streaming_ = false;
  bool stream_started_ = false;   // the 200 head has gone out
  bool first_text_seen_ = false;
  bool include_usage_ = false;
  bool watching_ = false;         // the disconnect watch read is outstanding
  bool gone_ = false;
  int status_ = 200;
  uint64_t response_id_ = 0;
  RequestId engine_id_ = 0;
  ResponseHeader header_;
};

}  // namespace specpipe::server::http
