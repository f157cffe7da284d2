// Load generator for the ZeroMQ endpoint and the HTTP gateway: starts `specpipe serve`'s
// engine, endpoint and gateway in this process on loopback ports, then runs N concurrent
// clients (one thread each: a DEALER socket, or a keep-alive HTTP connection reading
// server-sent events) that stream requests back to back. Reports requests/s, tokens/s,
// time to first token and inter-token latency (p50/p99) for plain and speculative
// decoding at each concurrency and transport; with several transports they alternate on
// the same engine. Run: build/bench/load_generator [--clients 1,8,32] [--transport
// zmq,http] [--curve] (docs/BENCHMARKS.md). --curve: the ZeroMQ endpoint with CURVE, each
// client with its own key pair.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <thread>
#include <zmq.hpp>

#include "actors/engine.h"
#include "bench/load_http_client.h"
#include "bench/load_samples.h"
#include "kernels/cpu/thread_pool.h"
#include "model/load_model.h"
#include "server/curve_keys.h"
#include "server/endpoint.h"
#include "server/http/gateway.h"

namespace {

using nlohmann::json;
using specpipe::bench::Clock;
using specpipe::bench::ms_since;
using specpipe::bench::Samples;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

/// One client: `count` streaming requests, one after another.
void client(zmq::context_t& ctx, const std::string& address, const specpipe::server::ClientCurve& curve,
            const std::vector<std::vector<int32_t>>& prompts, int index, int count, int max_tokens, Samples& out) {
  zmq::socket_t socket(ctx, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, 300000);
  specpipe::server::apply_client_curve(socket, curve);
  socket.connect(address);
  std::vector<double> ttft, itl;
  int64_t tokens = 0, done = 0, errors = 0;
  for (int r = 0; r < count; ++r) {
    const std::string id = fmt::format("{}-{}", index, r);
    const json req = {{"v", 1}, {"id", id}, {"type", "generate"},
                      {"prompt_ids", prompts[static_cast<size_t>(index + r) % prompts.size()]},
                      {"max_tokens", max_tokens}, {"ignore_eos", true}, {"stream", true}};
    specpipe::bench::StreamClock clock{Clock::now(), {}, true};
    socket.send(zmq::buffer(req.dump()), zmq::send_flags::none);
    for (;;) {
      zmq::message_t msg;
      if (!socket.recv(msg)) {
        ++errors;
        break;
      }
      const json reply = json::parse(msg.to_string());
      if (reply["type"] == "delta") {
        const size_t n = reply["tokens"].size();
        clock.delta(n, Clock::now(), ttft, itl);
        tokens += static_cast<int64_t>(n);
        continue;
      }
      if (reply["type"] == "final") ++done;
      else ++errors;
      break;
    }
  }
  out.add(ttft, itl, tokens, done, errors);
}

/// User + system CPU time of this process: engine, endpoint, gateway and clients. Less
/// sensitive than wall time to other work on a shared machine.
double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/// Keys of a CURVE run: the server's pair and one per client (empty: no CURVE).
struct CurveKeys {
  specpipe::server::CurveKeyPair server;
  std::vector<specpipe::server::CurveKeyPair> clients;
  specpipe::server::ClientCurve for_client(int c) const {
    if (clients.empty()) return {};
    return {server.public_key, clients[static_cast<size_t>(c) % clients.size()].secret_key};
  }
};

json run_level(const std::string& transport, const std::string& address, const CurveKeys& keys,
               const std::vector<std::vector<int32_t>>& prompts, int clients, int per_client, int max_tokens) {
  zmq::context_t ctx(1);
  Samples s;
  const double cpu0 = process_cpu_seconds();
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      if (transport == "http") specpipe::bench::http_client(address, prompts, c, per_client, max_tokens, s);
      else client(ctx, address, keys.for_client(c), prompts, c, per_client, max_tokens, s);
    });
  for (auto& t : threads) t.join();
  const double seconds = ms_since(t0, Clock::now()) / 1000.0;
  const double cpu = process_cpu_seconds() - cpu0;
  return {{"clients", clients},
          {"cpu_seconds", cpu},
          {"cpu_us_per_token", s.tokens ? cpu * 1e6 / static_cast<double>(s.tokens) : 0.0},
          {"requests", s.requests},
          {"errors", s.errors},
          {"requests_per_s", static_cast<double>(s.requests) / seconds},
          {"tokens_per_s", static_cast<double>(s.tokens) / seconds},
          {"ttft_p50_ms", percentile(s.ttft_ms, 0.5)},
          {"ttft_p99_ms", percentile(s.ttft_ms, 0.99)},
          {"itl_p50_ms", percentile(s.itl_ms, 0.5)},
          {"itl_p99_ms", percentile(s.itl_ms, 0.99)},
          {"seconds", seconds}};
}

std::vector<std::vector<int32_t>> load_prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<std::vector<int32_t>> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line)["prompt_ids"].get<std::vector<int32_t>>());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"load generator for the specpipe ZeroMQ endpoint and HTTP gateway"};
  std::vector<int> levels = {1, 8, 32};
  std::vector<std::string> transports = {"zmq"};
  int requests_per_client = 4, max_tokens = 64, gamma = 4, repeat = 1;
  bool plain = true, curve = false;
  std::string prompts_file = std::string(SPECPIPE_SOURCE_DIR) + "/bench/prompts/public.jsonl";
  std::string json_out;
  app.add_option("--clients", levels, "concurrency levels")->delimiter(',')->capture_default_str();
  app.add_option("--requests", requests_per_client, "requests per client")->capture_default_str();
  app.add_option("--max-tokens", max_tokens, "tokens per request")->capture_default_str();
  app.add_option("--gamma", gamma, "drafts per round (speculative)")->capture_default_str();
  app.add_option("--prompts", prompts_file, "JSONL with prompt_ids")->capture_default_str();
  app.add_option("--json", json_out, "write the JSON report here");
  app.add_option("--transport", transports, "zmq and/or http (alternating on one engine)")
      ->delimiter(',')
      ->check(CLI::IsMember({"zmq", "http"}))
      ->capture_default_str();
  app.add_option("--repeat", repeat, "runs of each transport per level, alternating")->capture_default_str();
  app.add_option("--plain", plain, "also run plain decoding (false: speculative only)")->capture_default_str();
  app.add_flag("--curve", curve, "ZeroMQ with CURVE authentication, a key pair per client");
  CLI11_PARSE(app, argc, argv);

  const auto prompts = load_prompts(prompts_file);
  CurveKeys keys;
  if (curve) {
    keys.server = specpipe::server::make_curve_key_pair();
    for (int c = 0; c < *std::max_element(levels.begin(), levels.end()); ++c)
      keys.clients.push_back(specpipe::server::make_curve_key_pair());
  }
  json report = json::array();
  std::printf("%-12s %-5s %7s %9s %10s %10s %10s %10s %10s %10s\n", "mode", "via", "clients", "CPU us/tok", "req/s", "tok/s", "TTFT p50", "TTFT p99",
              "ITL p50", "ITL p99");
  for (const bool speculative : {false, true}) {
    if (!speculative && !plain) continue;
    specpipe::PipelineConfig config;
    config.drafter.type = speculative ? specpipe::DrafterKind::model : specpipe::DrafterKind::none;
    config.drafter.gamma = gamma;
    config.kv.tokens = 65536;
    config.server.endpoint = "tcp://127.0.0.1:*";
    config.server.max_inflight = 1024;
    config.server.http = "127.0.0.1:0";
    if (curve) {
      config.server.curve.secret_key = keys.server.secret_key;
      for (const auto& k : keys.clients) config.server.curve.allowed_clients.push_back(k.public_key);
    }
    specpipe::actors::Engine engine(config);
    specpipe::server::Endpoint endpoint(engine, config);
    specpipe::server::http::Gateway gateway(engine, config);
    std::thread loop([&] { endpoint.run(); });
    // Warm-up, not reported: the first requests of an engine pay page faults, thread
    // start-up and cold caches, which would favour whichever transport runs second.
    for (const std::string& via : transports)
      run_level(via, via == "http" ? gateway.address() : endpoint.address(), keys, prompts,
                *std::max_element(levels.begin(), levels.end()), 1, max_tokens);
    for (int level : levels)
      for (int rep = 0; rep < repeat; ++rep)
        for (const std::string& via : transports) {
          json r = run_level(via, via == "http" ? gateway.address() : endpoint.address(), keys, prompts, level,
                             requests_per_client, max_tokens);
          r["mode"] = speculative ? fmt::format("spec g{}", gamma) : "plain";
          r["transport"] = via == "zmq" && curve ? "zmq+curve" : via;
          std::printf("%-12s %-5s %7d %10.1f %9.2f %10.1f %9.1fms %9.1fms %9.2fms %9.2fms%s\n",
                      r["mode"].get<std::string>().c_str(), via.c_str(), level, r["cpu_us_per_token"].get<double>(),
                      r["requests_per_s"].get<double>(),
                      r["tokens_per_s"].get<double>(), r["ttft_p50_ms"].get<double>(), r["ttft_p99_ms"].get<double>(),
                      r["itl_p50_ms"].get<double>(), r["itl_p99_ms"].get<double>(),
                      r["errors"].get<int64_t>() ? fmt::format("  ({} errors)", r["errors"].get<int64_t>()).c_str() : "");
          std::fflush(stdout);
          report.push_back(r);
        }
    gateway.shutdown(std::chrono::milliseconds(0));
    endpoint.stop();
    loop.join();
  }
  const json doc = {{"max_tokens", max_tokens}, {"requests_per_client", requests_per_client},
                    {"threads", specpipe::cpu::num_threads()}, {"results", report}};
  if (!json_out.empty()) std::ofstream(json_out) << doc.dump(2) << "\n";
  else std::printf("%s\n", doc.dump().c_str());
  return 0;
}
