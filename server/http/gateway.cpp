#include "server/http/gateway.h"

#include <spdlog/spdlog.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>

#include <filesystem>
#include <future>
#include <thread>

#include "core/error.h"
#include "server/http/gateway_state.h"
#include "server/http/http_session.h"

namespace specpipe::server::http {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

/// "HOST:PORT", "[::1]:PORT" -> host, port.
std::pair<std::string, std::string> split_host_port(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) fail(ErrorCode::invalid_argument, "server.http: \"{}\" is not HOST:PORT", address);
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, address.substr(colon + 1)};
}

void wait_until(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline) {
  while (!done() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

}  // namespace

GatewayState::GatewayState(actors::Engine& e, const PipelineConfig& c)
    : engine(e),
      config(c),
      chat_template(ChatTemplate::load(c.models.target)),
      model_name(std::filesystem::path(c.models.target).filename().string()) {}

struct Gateway::Impl {
  GatewayState state;  // first: outlives the io_context and the connections it destroys
  net::io_context io{1};
  net::executor_work_guard<net::io_context::executor_type> work = net::make_work_guard(io);
  tcp::acceptor acceptor{io};
  std::thread thread;
  bool shut = false;

  Impl(actors::Engine& e, const PipelineConfig& c) : state(e, c) {}

  void accept() {
    acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (!acceptor.is_open()) return;
      if (ec) {
        spdlog::warn("http: accept failed: {}", ec.message());  // e.g. out of file descriptors
      } else {
        boost::system::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);  // SSE events go out as they are made
        std::make_shared<HttpSession>(std::move(socket), state)->start();
      }
      accept();
    });
  }

  /// The Asio thread. A handler that throws is logged and the loop goes on: no exception
  /// leaves the gateway.
  void run() {
    for (;;) {
      try {
        io.run();
        return;
      } catch (const std::exception& e) {
        spdlog::error("http: {}", e.what());
      }
    }
  }
};

Gateway::Gateway(actors::Engine& engine, const PipelineConfig& config) : impl_(std::make_unique<Impl>(engine, config)) {
  Impl& m = *impl_;
  const auto [host, port] = split_host_port(config.server.http);
  try {
    tcp::resolver resolver(m.io);
    const tcp::endpoint endpoint = *resolver.resolve(host, port, tcp::resolver::passive).begin();
    // The gateway has no authentication (docs/PROTOCOL.md, "Security"): only this machine
    // may reach it unless the config says otherwise.
    if (!endpoint.address().is_loopback() && !config.server.allow_insecure)
      fail(ErrorCode::invalid_argument,
           "server.http {}: not a loopback address, and the HTTP gateway has no authentication: anyone who reaches "
           "it could generate. Bind 127.0.0.1 (behind an authenticating TLS proxy) or set server.allow_insecure: true",
           config.server.http);
    m.acceptor.open(endpoint.protocol());
    m.acceptor.set_option(net::socket_base::reuse_address(true));
    m.acceptor.bind(endpoint);
    m.acceptor.listen(net::socket_base::max_listen_connections);
    const tcp::endpoint bound = m.acceptor.local_endpoint();
    const std::string shown = bound.address().is_v6() ? "[" + bound.address().to_string() + "]" : bound.address().to_string();
    address_ = shown + ":" + std::to_string(bound.port());
  } catch (const boost::system::system_error& e) {
    fail(ErrorCode::io, "server.http {}: cannot bind: {}", config.server.http, e.what());
  }
  if (!m.state.chat_template.available()) spdlog::info("http: chat completions off: {}", m.state.chat_template.unavailable_reason());
  m.accept();
  m.thread = std::thread([&m] { m.run(); });
}

Gateway::~Gateway() { shutdown(std::chrono::milliseconds(0)); }

int64_t Gateway::inflight() const { return impl_->state.inflight.load(); }

void Gateway::shutdown(std::chrono::milliseconds grace) {
  Impl& m = *impl_;
  if (m.shut) return;
  m.shut = true;
  using Clock = std::chrono::steady_clock;
  m.state.stopping = true;
  net::post(m.io, [&m] {
    boost::system::error_code ignored;
    m.acceptor.close(ignored);
  });
  wait_until([&] { return m.state.inflight == 0; }, Clock::now() + grace);
  {
    std::lock_guard lock(m.state.active_mutex);
    for (const auto& [response, engine_id] : m.state.active) m.state.engine.cancel(engine_id);
  }
  // Cancelled requests still complete (finish_reason "cancelled"); their last events are
  // then written. The bounds only guard against an engine that no longer answers.
  wait_until([&] { return m.state.inflight == 0; }, Clock::now() + std::chrono::seconds(30));
  std::promise<void> flushed;  // every handler posted so far has run (writes begun)
  net::post(m.io, [&flushed] { flushed.set_value(); });
  flushed.get_future().wait_for(std::chrono::seconds(5));
  wait_until([&] { return m.state.writing == 0; }, Clock::now() + std::chrono::seconds(2));
  m.work.reset();
  m.io.stop();
  if (m.thread.joinable()) m.thread.join();
}

}  // namespace specpipe::server::http
