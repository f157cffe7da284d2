#include "tests/server/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>

#include "core/error.h"

namespace specpipe::test {

HttpConnection::HttpConnection(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr) != 1) fail(ErrorCode::io, "bad address {}", address);
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    fail(ErrorCode::io, "cannot connect to {}", address);
}

HttpConnection::~HttpConnection() { close(); }

void HttpConnection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void HttpConnection::send_raw(const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server closed: the test reads what it answered
    sent += static_cast<size_t>(n);
  }
}

void HttpConnection::send(const std::string& method, const std::string& path, const std::string& body) {
  send_raw(fmt::format("{} {} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
                       method, path, body.size(), body));
}

bool HttpConnection::fill(int timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  if (fd_ < 0 || ::poll(&p, 1, timeout_ms) <= 0) return false;
  char buf[16384];
  const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
  if (n <= 0) return false;
  pending_.append(buf, static_cast<size_t>(n));
  return true;
}

bool HttpConnection::read_until(const std::string& text, int timeout_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (pending_.find(text) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !fill(static_cast<int>(left.count()))) return false;
  }
  return true;
}

bool HttpConnection::closed_by_peer(int timeout_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return true;
  }
}

HttpResponse HttpConnection::read_response(int timeout_ms) {
  HttpResponse r;
  if (!read_until("\r\n\r\n", timeout_ms)) return r;
  const size_t head_end = pending_.find("\r\n\r\n");
  const std::string head = pending_.substr(0, head_end);
  pending_.erase(0, head_end + 4);
  r.status = std::stoi(head.substr(9, 3));
  for (size_t pos = head.find("\r\n"); pos != std::string::npos;) {
    const size_t next = head.find("\r\n", pos + 2);
    const std::string line = head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      r.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
    }
    pos = next;
  }
  if (r.headers.count("content-length")) {
    const size_t length = std::stoul(r.headers["content-length"]);
    while (pending_.size() < length && fill(timeout_ms)) {
    }
    r.body = pending_.substr(0, length);
    pending_.erase(0, std::min(length, pending_.size()));
  } else if (r.headers["transfer-encoding"] == "chunked") {
    for (;;) {
      if (!read_until("\r\n", timeout_ms)) break;
      const size_t eol = pending_.find("\r\n");
      const size_t size = std::stoul(pending_.substr(0, eol), nullptr, 16);
      while (pending_.size() < eol + 2 + size + 2 && fill(timeout_ms)) {
      }
      r.body += pending_.substr(eol + 2, size);
      pending_.erase(0, std::min(pending_.size(), eol + 2 + size + 2));
      if (size == 0) break;
    }
  } else {
    while (fill(timeout_ms)) {
    }
    r.body = std::move(pending_);
    pending_.clear();
  }
  return r;
}

HttpResponse http_call(const std::string& address, const std::string& method, const std::string& path,
                       const std::string& body) {
  HttpConnection c(address);
  c.send(method, path, body);
  return c.read_response();
}

std::vector<nlohmann::json> sse_events(const std::string& body, bool* done) {
  std::vector<nlohmann::json> events;
  if (done) *done = false;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    const std::string data = body.substr(pos + 6, end - pos - 6);
    if (data == "[DONE]") {
      if (done) *done = true;
    } else {
      events.push_back(nlohmann::json::parse(data));
    }
    pos = end;
  }
  return events;
}

}  // namespace specpipe::test
