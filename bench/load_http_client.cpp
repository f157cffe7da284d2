#include "bench/load_http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace specpipe::bench {
namespace {

/// A blocking keep-alive connection that reads the chunked SSE stream of one response.
class Connection {
 public:
  explicit Connection(const std::string& address) {
    const size_t colon = address.rfind(':');
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
    inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr);
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ok_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  }
  ~Connection() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return ok_; }

  bool send(const std::string& bytes) { return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()); }

  /// Bytes up to and including `delimiter` (consumed), or "" when the connection ends.
  std::string read_through(const std::string& delimiter) {
    size_t at;
    while ((at = buffer_.find(delimiter)) == std::string::npos)
      if (!fill()) return {};
    std::string out = buffer_.substr(0, at + delimiter.size());
    buffer_.erase(0, at + delimiter.size());
    return out;
  }
  std::string read_exactly(size_t n) {
    while (buffer_.size() < n)
      if (!fill()) return {};
    std::string out = buffer_.substr(0, n);
    buffer_.erase(0, n);
    return out;
  }

 private:
  bool fill() {
    char chunk[16384];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }
  int fd_ = -1;
  bool ok_ = false;
  std::string buffer_;
};

}  // namespace

void http_client(const std::string& address, const std::vector<std::vector<int32_t>>& prompts, int index, int count,
                 int max_tokens, Samples& out) {
  Connection c(address);
  std::vector<double> ttft, itl;
  int64_t tokens = 0, done = 0, errors = 0;
  for (int r = 0; r < count && c.ok(); ++r) {
    const nlohmann::json req = {{"prompt", prompts[static_cast<size_t>(index + r) % prompts.size()]},
                                {"max_tokens", max_tokens}, {"ignore_eos", true}, {"stream", true}};
    const std::string body = req.dump();
    StreamClock clock{Clock::now(), {}, true};
    if (!c.send(fmt::format("POST /v1/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                            "Content-Length: {}\r\n\r\n{}",
                            body.size(), body))) {
      ++errors;
      break;
    }
    const std::string head = c.read_through("\r\n\r\n");
    if (head.rfind("HTTP/1.1 200", 0) != 0) {
      ++errors;
      break;
    }
    bool finished = false;
    for (;;) {  // one SSE event per chunk
      const std::string size_line = c.read_through("\r\n");
      if (size_line.empty()) break;
      const size_t size = std::stoul(size_line, nullptr, 16);
      const std::string event = c.read_exactly(size + 2);
      if (size == 0) break;
      if (event.rfind("data: [DONE]", 0) == 0) {
        finished = true;
        continue;
      }
      const auto j = nlohmann::json::parse(event.substr(6, size - 8));
      const auto ext = j.find("specpipe");
      if (ext == j.end() || !ext->contains("tokens")) continue;  // the final chunk
      const size_t n = (*ext)["tokens"].size();
      clock.delta(n, Clock::now(), ttft, itl);
      tokens += static_cast<int64_t>(n);
    }
    if (finished) ++done;
    else ++errors;
  }
  out.add(ttft, itl, tokens, done, errors);
}

}  // namespace specpipe::bench
