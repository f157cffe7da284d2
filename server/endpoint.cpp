#include "server/endpoint.h"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <set>
#include <zmq.hpp>

#include "core/error.h"
#include "server/admission.h"
#include "server/bind_policy.h"
#include "server/curve_keys.h"
#include "server/handshake_monitor.h"
#include "server/protocol.h"
#include "server/zap_handler.h"

namespace specpipe::server {
namespace {

using Clock = std::chrono::steady_clock;

/// The kernel's send buffer of each connection (SO_SNDBUF; Linux doubles it). ZeroMQ's
/// heartbeats travel in line with the replies, so a PING reaches a client only after
/// everything the kernel holds ahead of it. Left to autotuning, that buffer grew to 4 MB on
/// loopback, 2 MB of it unsent: a live client reading a backlog at under ~0.4 MB/s answered
/// no PING within the 5 s timeout and was dropped as dead, with its replies (the
/// slow-reader test's stall under ASan, stop 31). At 64 KB a client that reads ~30 KB a
/// second stays connected; what does not fit waits in the endpoint's backlog instead.
/// Throughput is one buffer per round trip: ~2.6 MB/s at 50 ms, far above a token stream.
constexpr int kSendBufferBytes = 64 * 1024;

/// The ZAP handler that admits `curve.allowed_clients`, after checking this libzmq can do
/// CURVE; made before the ROUTER socket binds.
std::unique_ptr<ZapHandler> make_zap_handler(zmq::context_t& context, const CurveConfig& curve) {
  if (!curve.enabled()) return nullptr;
  if (!curve_available())
    fail(ErrorCode::unsupported, "server.curve: this libzmq was built without CURVE (zmq_has(\"curve\") is 0)");
  std::set<std::string> allowed;
  for (size_t i = 0; i < curve.allowed_clients.size(); ++i)
    allowed.insert(load_curve_key(curve.allowed_clients[i], KeyKind::public_key,
                                  fmt::format("server.curve.allowed_clients[{}]", i)));
  if (allowed.empty()) fail(ErrorCode::invalid_argument, "server.curve.allowed_clients: no key given: no client could connect");
  return std::make_unique<ZapHandler>(context, std::move(allowed));
}

}  // namespace

struct Endpoint::Impl {
  /// A reply waiting for the socket thread. A member rather than a type of the anonymous
  /// namespace: a field of Impl (external linkage) may not have an internal-linkage type
  /// once this file is compiled inside a unity source (GCC's -Wsubobject-linkage).
  struct Outgoing {
    std::string peer;       // ROUTER identity of the connection
    bool delimiter;         // the peer is a REQ socket: replies need the empty frame
    std::string request;    // the client's id
    std::string payload;
    bool final;             // the request is over
  };

  actors::Engine& engine;
  PipelineConfig config;
  zmq::context_t context{1};
  std::unique_ptr<ZapHandler> zap;  // CURVE only; bound before `socket` exists
  zmq::socket_t socket{context, zmq::socket_type::router};
  HandshakeMonitor handshakes{context, socket};
  int wake_fd = -1;
  std::atomic<bool> stop_requested{false};

  std::mutex mutex;                 // guards outbox (filled by sinks on actor threads)
  std::deque<Outgoing> outbox;

  /// A request in the pipeline, keyed by (peer, client id).
  struct Inflight {
    RequestId engine_id;
    bool delimiter;
    std::string client;  // whose per-client count it holds (client_of)
    bool cancelled = false;
  };
  std::map<std::pair<std::string, std::string>, Inflight> inflight;
  /// Generate requests in flight per client (server.max_inflight_per_client).
  std::map<std::string, int32_t> per_client;
  int64_t client_limit_refusals = 0;

  Impl(actors::Engine& e, const PipelineConfig& c)
      : engine(e), config(c), zap(make_zap_handler(context, c.server.curve)) {
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd < 0) fail(ErrorCode::io, "endpoint: cannot create an eventfd");
    if (zap) {
      socket.set(zmq::sockopt::curve_server, 1);
      socket.set(zmq::sockopt::curve_secretkey,
                 load_curve_key(c.server.curve.secret_key, KeyKind::secret_key, "server.curve.secret_key"));
      socket.set(zmq::sockopt::zap_domain, "specpipe");
    }
    socket.set(zmq::sockopt::router_mandatory, 1);  // sends to a vanished peer fail: we cancel
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::heartbeat_ivl, std::max(1, c.server.heartbeat_timeout_ms / 5));
    socket.set(zmq::sockopt::heartbeat_timeout, c.server.heartbeat_timeout_ms);
    socket.set(zmq::sockopt::sndbuf, kSendBufferBytes);  // before bind: accepted connections take it
    // A hard cap far above the protocol limit: beyond it ZeroMQ drops the connection
    // before buffering the message at all; below it we answer too_large.
    socket.set(zmq::sockopt::maxmsgsize, std::max<int64_t>(c.server.max_message_bytes * 16, 1 << 20));
  }
  ~Impl() { ::close(wake_fd); }

  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd, &one, sizeof one);
  }

  void post(Outgoing o) {
    {
      std::lock_guard lock(mutex);
      outbox.push_back(std::move(o));
    }
    wake();
  }

  /// What became of one send: on the wire (queued in the peer's pipe), the peer's pipe at
  /// its high-water mark (a slow reader: try again later), or no such peer any more.
  enum class Sent { ok, full, gone };

  Sent send(const std::string& peer, bool delimiter, const std::string& payload) {
    try {
      // With router_mandatory the first frame is where a full pipe or a vanished peer
      // shows (EAGAIN / EHOSTUNREACH); the frames after it of one message always go.
      if (!socket.send(zmq::buffer(peer), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return Sent::full;
      if (delimiter) socket.send(zmq::message_t{}, zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      socket.send(zmq::buffer(payload), zmq::send_flags::dontwait);
      return Sent::ok;
    } catch (const zmq::error_t& e) {
      if (e.num() == EHOSTUNREACH) return Sent::gone;
      if (e.num() == EAGAIN) return Sent::full;
      throw;
    }
  }

  /// The connection is gone: its streaming requests are cancelled so their KV is freed.
  void peer_gone(const std::string& peer) {
    for (auto& [key, f] : inflight)
      if (key.first == peer && !f.cancelled) {
        f.cancelled = true;
        engine.cancel(f.engine_id);
      }
  }

  /// Replies a connected peer could not take yet, per peer, in order. A full pipe is a slow
  /// reader, not a lost one. Before this, cppzmq's EAGAIN (an empty result, not an
  /// exception) went unseen: the payload frame then left alone, the ROUTER took it for an
  /// address and discarded it, and a live client waited for a reply that never came. What
  /// a peer cannot take waits here until it can, or until ZeroMQ drops the connection
  /// (heartbeat timeout, close): then the send says `gone`. Bounded by the requests in
  /// flight and their max_tokens.
  std::map<std::string, std::deque<Outgoing>> backlog;

  /// Sends `o` now unless its peer's pipe is full (false: `o` stays the caller's to
  /// retry). A final ends the request's bookkeeping only once it has left: its
  /// per-client share is held until then.
  bool send_now(const Outgoing& o) {
    const Sent sent = send(o.peer, o.delimiter, o.payload);
    if (sent == Sent::full) return false;
    if (sent == Sent::gone) peer_gone(o.peer);
    if (o.final) finished(o.peer, o.request);
    return true;
  }

  /// Sends `o` after what already waits for its peer.
  void deliver(Outgoing o) {
    auto waiting = backlog.find(o.peer);
    if (waiting != backlog.end()) waiting->second.push_back(std::move(o));
    else if (!send_now(o)) backlog[o.peer].push_back(std::move(o));
  }

  /// Another try for every peer with a backlog, oldest reply first.
  void retry_backlog() {
    for (auto it = backlog.begin(); it != backlog.end();) {
      std::deque<Outgoing>& queue = it->second;
      while (!queue.empty() && send_now(queue.front())) queue.pop_front();
      it = queue.empty() ? backlog.erase(it) : std::next(it);
    }
  }

  void flush_outbox() {
    uint64_t counter;
    [[maybe_unused]] ssize_t n = ::read(wake_fd, &counter, sizeof counter);
    std::deque<Outgoing> batch;
    {
      std::lock_guard lock(mutex);
      batch.swap(outbox);
    }
    retry_backlog();
    for (Outgoing& o : batch) deliver(std::move(o));
  }

  void finished(const std::string& peer, const std::string& request) {
    auto it = inflight.find({peer, request});
    if (it == inflight.end()) return;
    auto count = per_client.find(it->second.client);
    if (count != per_client.end() && --count->second == 0) per_client.erase(count);
    inflight.erase(it);
  }

  /// Who a message is from, for per-client limits: with CURVE the public key the ZAP
  /// handler admitted (every connection of one key counts together), else the connection.
  std::string client_of(const std::string& peer, const zmq::message_t& payload) const {
    if (!zap) return peer;
    const char* key = zmq_msg_gets(payload.handle(), "User-Id");
    return key ? std::string("curve:") + key : peer;
  }

  nlohmann::json security_json() const {
    return {{"curve", zap != nullptr},
            {"handshakes_succeeded", handshakes.succeeded()},
            {"refused_keys", zap ? zap->refused() : 0},
            {"failed_handshakes", handshakes.failed_protocol() + handshakes.failed_other()},
            {"client_limit_refusals", client_limit_refusals}};
  }

  void reply(const std::string& peer, bool delimiter, const std::string& payload) {
    deliver({peer, delimiter, std::string(), payload, false});
  }

  void handle(const std::string& peer, const std::string& client, bool delimiter, std::string_view bytes) {
    auto parsed = parse_request(bytes, config.defaults, static_cast<size_t>(config.server.max_message_bytes));
    if (auto* rej = std::get_if<Rejection>(&parsed)) return reply(peer, delimiter, error_reply(rej->id, rej->code, rej->message));
    Request& r = std::get<Request>(parsed);
    switch (r.type) {
      case RequestType::health: {
        nlohmann::json j = {{"v", kProtocolVersion}, {"id", r.id}, {"type", "health"},
                            {"status", stop_requested ? "shutting_down" : "ok"}, {"model", config.models.target},
                            {"drafter", to_string(config.drafter.type)}, {"inflight", inflight.size()},
                            {"protocol", kProtocolVersion}};
        return reply(peer, delimiter, j.dump());
      }
      case RequestType::stats: {
        nlohmann::json j = {{"v", kProtocolVersion}, {"id", r.id}, {"type", "stats"},
                            {"stats", stats_json(engine.stats())}, {"kv", kv_json(engine.kv_occupancy())},
                            {"draft_kv", kv_json(engine.draft_kv_occupancy())}, {"inflight", inflight.size()},
                            {"strategies", engine.strategy_metrics()}, {"security", security_json()}};
        return reply(peer, delimiter, j.dump());
      }
      case RequestType::cancel: {
        auto it = inflight.find({peer, r.target});
        if (it == inflight.end())
          return reply(peer, delimiter, error_reply(r.id, "not_found", fmt::format("no request '{}' in flight", r.target)));
        it->second.cancelled = true;
        engine.cancel(it->second.engine_id);
        return reply(peer, delimiter, cancelled_reply(r.id, r.target));
      }
      case RequestType::generate: return generate(peer, client, delimiter, r);
    }
  }

  void generate(const std::string& peer, const std::string& client, bool delimiter, Request& r) {
    if (stop_requested) return reply(peer, delimiter, error_reply(r.id, "shutting_down", "the server is shutting down"));
    if (inflight.count({peer, r.id}))
      return reply(peer, delimiter, error_reply(r.id, "duplicate_id", fmt::format("request '{}' is already in flight", r.id)));
    // Before the global limit: one client at its share is told so, not that the server is full.
    if (auto it = per_client.find(client); it != per_client.end() && it->second >= config.server.max_inflight_per_client) {
      ++client_limit_refusals;
      return reply(peer, delimiter,
                   error_reply(r.id, "client_limit",
                               fmt::format("this client has {} requests in flight (server.max_inflight_per_client); "
                                           "retry when one ends",
                                           it->second)));
    }
    if (static_cast<int32_t>(inflight.size()) >= config.server.max_inflight)
      return reply(peer, delimiter, error_reply(r.id, "overloaded",
                                                fmt::format("{} requests in flight; retry later", inflight.size())));
    if (auto refused = prepare_prompt(engine, r.prompt_text, r.spec))
      return reply(peer, delimiter, error_reply(r.id, "bad_request", *refused));
    const std::string id = r.id;
    const bool stream = r.stream;
    auto sink = std::make_shared<actors::CallbackSink>(
        [this, peer, delimiter, id, stream](const actors::TokenDelta& d) {
          if (stream && !d.tokens.empty()) post({peer, delimiter, id, delta_reply(id, d), false});
          else if (stream && !d.text.empty()) post({peer, delimiter, id, delta_reply(id, d), false});
        },
        [this, peer, delimiter, id](const actors::Completion& c) { post({peer, delimiter, id, final_reply(id, c), true}); });
    inflight[{peer, id}] = {0, delimiter, client};
    ++per_client[client];
    inflight[{peer, id}].engine_id = engine.submit(std::move(r.spec), sink);
  }

  void receive() {
    std::vector<zmq::message_t> frames;
    while (true) {
      frames.clear();
      zmq::message_t frame;
      if (!socket.recv(frame, zmq::recv_flags::dontwait)) return;
      frames.push_back(std::move(frame));
      while (frames.back().more()) {
        zmq::message_t next;
        if (!socket.recv(next)) break;
        frames.push_back(std::move(next));
      }
      // DEALER: [identity, payload]; REQ: [identity, empty, payload].
      if (frames.size() < 2) continue;
      const std::string peer = frames[0].to_string();
      const bool delimiter = frames.size() >= 3 && frames[1].size() == 0;
      const zmq::message_t& payload = frames.back();
      handle(peer, client_of(peer, payload), delimiter,
             std::string_view(static_cast<const char*>(payload.data()), payload.size()));
    }
  }
};

Endpoint::Endpoint(actors::Engine& engine, const PipelineConfig& config) {
  check_endpoint_bind_policy(config.server);
  impl_ = std::make_unique<Impl>(engine, config);
  try {
    impl_->socket.bind(config.server.endpoint);
  } catch (const zmq::error_t& e) {
    fail(ErrorCode::io, "server.endpoint {}: cannot bind: {}", config.server.endpoint, e.what());
  }
  address_ = impl_->socket.get(zmq::sockopt::last_endpoint);
}

Endpoint::~Endpoint() = default;

void Endpoint::stop() {
  impl_->stop_requested.store(true);
  impl_->wake();
}

void Endpoint::run() {
  Impl& m = *impl_;
  const auto grace = std::chrono::milliseconds(m.config.server.shutdown_grace_ms);
  std::optional<Clock::time_point> deadline;
  bool cancelled_all = false;
  for (;;) {
    // The ZAP handler (CURVE) last: the poll watches only the sockets that exist.
    zmq::pollitem_t items[] = {{m.socket.handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, m.wake_fd, ZMQ_POLLIN, 0},
                               {m.handshakes.socket().handle(), 0, ZMQ_POLLIN, 0},
                               {m.zap ? m.zap->socket().handle() : nullptr, 0, ZMQ_POLLIN, 0}};
    try {
      // A backlog (a slow reader) is retried every few milliseconds: ROUTER has no per-peer POLLOUT.
      zmq::poll(items, m.zap ? 4 : 3, std::chrono::milliseconds(deadline ? 20 : m.backlog.empty() ? 1000 : 5));
      if (items[3].revents & ZMQ_POLLIN) m.zap->handle();
      if (items[2].revents & ZMQ_POLLIN) m.handshakes.handle();
      if (items[0].revents & ZMQ_POLLIN) m.receive();
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;  // a signal (SIGINT/SIGTERM) interrupted the wait
    }
    m.flush_outbox();
    if (m.stop_requested && !deadline) {
      spdlog::info("server: shutting down, {} requests in flight", m.inflight.size());
      deadline = Clock::now() + grace;
    }
    if (deadline) {
      if (m.inflight.empty() && m.backlog.empty()) break;
      if (!cancelled_all && Clock::now() >= *deadline) {
        for (auto& [key, f] : m.inflight) m.engine.cancel(f.engine_id);
        cancelled_all = true;
      }
      // A client that stopped reading holds its replies in the backlog (and, if one is a
      // final, its request in `inflight`) for as long as its connection lives: it gets one
      // more grace period, then the server leaves without it.
      if (cancelled_all && Clock::now() >= *deadline + grace) {
        size_t waiting = 0;
        for (const auto& [peer, queue] : m.backlog) waiting += queue.size();
        spdlog::warn("server: {} replies to {} clients not read within the grace period; leaving them", waiting,
                     m.backlog.size());
        break;
      }
    }
  }
  // The last finals were handed to ZeroMQ just now and may still sit in its queues: closing
  // with linger 0 (as the socket runs, so a vanished peer never holds a close) discarded
  // them, and a client waited for ever for its final (CI, stop 33). They get a grace period
  // to reach their clients when the Endpoint closes the socket.
  m.socket.set(zmq::sockopt::linger, m.config.server.shutdown_grace_ms);
}

}  // namespace specpipe::server
