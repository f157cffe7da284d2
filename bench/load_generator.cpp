// Load generator for the ZeroMQ endpoint and the HTTP gateway: starts `specpipe serve`'s
// engine, endpoint and gateway in this process on loopback ports, then runs N concurrent
// clients (one thread each: a DEALER socket, or a keep-alive HTTP connection reading
// server-sent events) that stream requests back to back. Reports requests/s, tokens/s,
// time to first token and inter-token latency (p50/p99) for plain and speculative
// decoding at each concurrency and transport; with several transports they alternate on
// the same engine. Run: build/bench/load_generator [--clients 1,8,32] [--transport
// zmq,http] [--curve] (docs/BENCHMARKS.md). --curve: the ZeroMQ endpoint with CURVE, each
// client with its own key pair. --endpoint ADDR drives a running `specpipe serve` instead
// (one mode, named by --label; tools/gpu/serve_load.sh), and --record-tokens adds every
// request's prompt index and greedy token ids to the JSON, to check outputs under load.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <mutex>
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

/// What the clients streamed, request by request (--record-tokens): the prompt's index in
/// the prompt file and the token ids, for comparing outputs under load with runs alone.
struct Outputs {
  std::mutex mutex;
  json requests = json::array();
  void add(json r) {
    std::lock_guard lock(mutex);
    requests.push_back(std::move(r));
  }
};

/// One client: `count` streaming requests, one after another.
void client(zmq::context_t& ctx, const std::string& address, const specpipe::server::ClientCurve& curve,
            const std::vector<std::vector<int32_t>>& prompts, int index, int count, int max_tokens, Samples& out,
            Outputs* outputs) {
  zmq::socket_t socket(ctx, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, 300000);
  specpipe::server::apply_client_curve(socket, curve);
  socket.connect(address);
  std::vector<double> ttft, itl;
  int64_t tokens = 0, done = 0, errors = 0;
  for (int r = 0; r < count; ++r) {
    const std::string id = fmt::format("{}-{}", index, r);
    const size_t prompt = static_cast<size_t>(index + r) % prompts.size();
    std::vector<int32_t> ids;
    const json req = {{"v", 1}, {"id", id}, {"type", "generate"},
                      {"prompt_ids", prompts[prompt]},
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
        if (outputs)
          for (const auto& t : reply["tokens"]) ids.push_back(t.get<int32_t>());
        continue;
      }
      const bool final = reply["type"] == "final";
      if (final) ++done;
      else ++errors;
      if (outputs) {
        // The server's per-request times (sums over the rounds the request was in): where a
        // mode's round goes (tools/gpu/serve_load_report.py's breakdown).
        json times;
        if (final && reply.contains("stats"))
          for (const char* key : {"prefill_ms", "draft_ms", "verify_ms", "commit_ms", "messaging_ms", "queued_ms", "wall_ms"})
            if (reply["stats"].contains(key)) times[key] = reply["stats"][key];
        outputs->add({{"client", index}, {"request", r}, {"prompt", prompt}, {"ok", final}, {"tokens", ids},
                      {"rounds", final && reply.contains("stats") ? reply["stats"].value("rounds", json()) : json()},
                      {"times", times}, {"error", final ? json() : reply}});
      }
      break;
    }
  }
  out.add(ttft, itl, tokens, done, errors);
}

/// The server's strategy metrics (the endpoint's `stats` reply, "strategies"; null if it
/// does not answer within 10 s): taken before and after a level with --endpoint, so a
/// strategy's counters (SCV's drafting and probe rounds) can be told per level.
json strategy_metrics(zmq::context_t& ctx, const std::string& address) {
  zmq::socket_t socket(ctx, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, 10000);
  socket.connect(address);
  socket.send(zmq::buffer(json{{"v", 1}, {"id", "strategies"}, {"type", "stats"}}.dump()), zmq::send_flags::none);
  zmq::message_t msg;
  if (!socket.recv(msg)) return json();
  const json reply = json::parse(msg.to_string(), nullptr, false);
  return reply.is_object() && reply.contains("strategies") ? reply["strategies"] : json();
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
               const std::vector<std::vector<int32_t>>& prompts, int clients, int per_client, int max_tokens,
               bool record = false) {
  zmq::context_t ctx(1);
  Samples s;
  Outputs outputs;
  const double cpu0 = process_cpu_seconds();
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      if (transport == "http") specpipe::bench::http_client(address, prompts, c, per_client, max_tokens, s);
      else client(ctx, address, keys.for_client(c), prompts, c, per_client, max_tokens, s, record ? &outputs : nullptr);
    });
  for (auto& t : threads) t.join();
  const double seconds = ms_since(t0, Clock::now()) / 1000.0;
  const double cpu = process_cpu_seconds() - cpu0;
  json r = {{"clients", clients},
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
  if (record) r["outputs"] = std::move(outputs.requests);
  return r;
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
  std::string endpoint, label = "external";
  bool record = false;
  int warmup = -1;
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
  app.add_option("--endpoint", endpoint,
                 "drive this running `specpipe serve` (ZeroMQ) instead of an engine in this process: one mode");
  app.add_option("--label", label, "the mode's name in the report (with --endpoint)")->capture_default_str();
  app.add_flag("--record-tokens", record, "add each request's prompt index and token ids to the JSON (ZeroMQ)");
  app.add_option("--warmup", warmup, "clients of the unreported warm-up run, one request each (default: the largest level)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  if (!endpoint.empty() && (curve || transports != std::vector<std::string>{"zmq"})) {
    std::fprintf(stderr, "--endpoint drives a ZeroMQ endpoint without CURVE: drop --curve and --transport\n");
    return 2;
  }
  if (warmup < 0) warmup = *std::max_element(levels.begin(), levels.end());

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
  // Every level of one mode on one server: the unreported warm-up, then the levels.
  auto run_levels = [&](const std::string& mode, const std::string& zmq_address, const std::string& http_address) {
    // Warm-up, not reported: the first requests of an engine pay page faults, thread
    // start-up and cold caches (on a device: CUDA graph captures), which would favour
    // whichever transport or level runs second.
    if (warmup > 0)
      for (const std::string& via : transports)
        run_level(via, via == "http" ? http_address : zmq_address, keys, prompts, warmup, 1, max_tokens);
    zmq::context_t stats_ctx(1);
    json strategies = endpoint.empty() ? json() : strategy_metrics(stats_ctx, zmq_address);
    for (int level : levels)
      for (int rep = 0; rep < repeat; ++rep)
        for (const std::string& via : transports) {
          json r = run_level(via, via == "http" ? http_address : zmq_address, keys, prompts, level,
                             requests_per_client, max_tokens, record && via == "zmq");
          if (!endpoint.empty()) {
            r["strategies_before"] = strategies;
            strategies = strategy_metrics(stats_ctx, zmq_address);
            r["strategies_after"] = strategies;
          }
          r["mode"] = mode;
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
  };
  if (!endpoint.empty()) run_levels(label, endpoint, "");
  for (const bool speculative : {false, true}) {
    if (!endpoint.empty()) break;
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
    specpipe::server::Endpoint endpoint_server(engine, config);
    specpipe::server::http::Gateway gateway(engine, config);
    std::thread loop([&] { endpoint_server.run(); });
    run_levels(speculative ? fmt::format("spec g{}", gamma) : "plain", endpoint_server.address(), gateway.address());
    gateway.shutdown(std::chrono::milliseconds(0));
    endpoint_server.stop();
    loop.join();
  }
  const json doc = {{"max_tokens", max_tokens}, {"requests_per_client", requests_per_client},
                    {"threads", specpipe::cpu::num_threads()}, {"results", report}};
  if (!json_out.empty()) std::ofstream(json_out) << doc.dump(2) << "\n";
  else std::printf("%s\n", doc.dump().c_str());
  return 0;
}
