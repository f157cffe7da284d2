#pragma once
// A small blocking HTTP/1.1 client over a real loopback socket, for the gateway's tests:
// whole requests or raw bytes (slow, partial, malformed), responses with Content-Length,
// chunked or close-delimited bodies, and server-sent-event bodies split into events.
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace specpipe::test {

struct HttpResponse {
  int status = 0;                              ///< 0: no response (the connection closed)
  std::map<std::string, std::string> headers;  ///< names lower-cased
  std::string body;                            ///< de-chunked
  nlohmann::json json() const { return nlohmann::json::parse(body); }
  /// A header's value ("" when absent); `name` lower-case.
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class HttpConnection {
 public:
  /// Connects to "HOST:PORT". Throws specpipe::Error(io) when it cannot.
  explicit HttpConnection(const std::string& address);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  void send_raw(const std::string& bytes);
  /// A request with Host, Content-Type: application/json and Content-Length.
  void send(const std::string& method, const std::string& path, const std::string& body = {});
  /// The next whole response; status 0 if the connection closes first or nothing arrives
  /// within `timeout_ms`.
  HttpResponse read_response(int timeout_ms = 120000);
  /// Reads until `text` has arrived (true) or the connection ends / times out (false).
  bool read_until(const std::string& text, int timeout_ms = 120000);
  /// True if the server closes the connection within `timeout_ms`.
  bool closed_by_peer(int timeout_ms);
  void close();

 private:
  bool fill(int timeout_ms);  // reads more bytes into pending_; false on close or timeout
  int fd_ = -1;
  std::string pending_;
};

/// One request on a fresh connection.
HttpResponse http_call(const std::string& address, const std::string& method, const std::string& path,
                       const std::string& body = {});
/// The JSON of every `data:` event of an SSE body, `[DONE]` excluded; `done` tells
/// whether the stream ended with it.
std::vector<nlohmann::json> sse_events(const std::string& body, bool* done = nullptr);

}  // namespace specpipe::test
