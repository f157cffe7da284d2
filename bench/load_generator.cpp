// Load generator for the ZeroMQ endpoint: starts `specpipe serve`'s engine and endpoint
// in this process on a loopback port, then runs N concurrent DEALER clients (one thread
// each) that stream requests back to back. Reports requests/s, tokens/s, time to first
// token and inter-token latency (p50/p99) for plain and speculative decoding at each
// concurrency. Run: build/bench/load_generator [--clients 1,8,32] (docs/BENCHMARKS.md).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>
#include <zmq.hpp>

#include "actors/engine.h"
#include "kernels/cpu/thread_pool.h"
#include "model/load_model.h"
#include "server/endpoint.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double ms_since(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

struct Samples {
  std::mutex mutex;
  std::vector<double> ttft_ms, itl_ms;
  int64_t tokens = 0, requests = 0, errors = 0;
};

/// One client: `count` streaming requests, one after another.
void client(zmq::context_t& ctx, const std::string& address, const std::vector<std::vector<int32_t>>& prompts,
            int index, int count, int max_tokens, Samples& out) {
  zmq::socket_t socket(ctx, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, 300000);
  socket.connect(address);
  std::vector<double> ttft, itl;
  int64_t tokens = 0, done = 0, errors = 0;
  for (int r = 0; r < count; ++r) {
    const std::string id = fmt::format("{}-{}", index, r);
    const json req = {{"v", 1}, {"id", id}, {"type", "generate"},
                      {"prompt_ids", prompts[static_cast<size_t>(index + r) % prompts.size()]},
                      {"max_tokens", max_tokens}, {"ignore_eos", true}, {"stream", true}};
    const Clock::time_point sent = Clock::now();
    socket.send(zmq::buffer(req.dump()), zmq::send_flags::none);
    Clock::time_point last = sent;
    bool first = true;
    for (;;) {
      zmq::message_t msg;
      if (!socket.recv(msg)) {
        ++errors;
        break;
      }
      const json reply = json::parse(msg.to_string());
      const Clock::time_point now = Clock::now();
      if (reply["type"] == "delta") {
        const size_t n = reply["tokens"].size();
        if (first) ttft.push_back(ms_since(sent, now));
        else
          for (size_t i = 0; i < n; ++i) itl.push_back(ms_since(last, now) / static_cast<double>(n));
        first = false;
        last = now;
        tokens += static_cast<int64_t>(n);
        continue;
      }
      if (reply["type"] == "final") ++done;
      else ++errors;
      break;
    }
  }
  std::lock_guard lock(out.mutex);
  out.ttft_ms.insert(out.ttft_ms.end(), ttft.begin(), ttft.end());
  out.itl_ms.insert(out.itl_ms.end(), itl.begin(), itl.end());
  out.tokens += tokens;
  out.requests += done;
  out.errors += errors;
}

json run_level(const std::string& address, const std::vector<std::vector<int32_t>>& prompts, int clients,
               int per_client, int max_tokens) {
  zmq::context_t ctx(1);
  Samples s;
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] { client(ctx, address, prompts, c, per_client, max_tokens, s); });
  for (auto& t : threads) t.join();
  const double seconds = ms_since(t0, Clock::now()) / 1000.0;
  return {{"clients", clients},
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
  CLI::App app{"load generator for the specpipe ZeroMQ endpoint"};
  std::vector<int> levels = {1, 8, 32};
  int requests_per_client = 4, max_tokens = 64, gamma = 4;
  std::string prompts_file = std::string(SPECPIPE_SOURCE_DIR) + "/bench/prompts/public.jsonl";
  std::string json_out;
  app.add_option("--clients", levels, "concurrency levels")->delimiter(',')->capture_default_str();
  app.add_option("--requests", requests_per_client, "requests per client")->capture_default_str();
  app.add_option("--max-tokens", max_tokens, "tokens per request")->capture_default_str();
  app.add_option("--gamma", gamma, "drafts per round (speculative)")->capture_default_str();
  app.add_option("--prompts", prompts_file, "JSONL with prompt_ids")->capture_default_str();
  app.add_option("--json", json_out, "write the JSON report here");
  CLI11_PARSE(app, argc, argv);

  const auto prompts = load_prompts(prompts_file);
  json report = json::array();
  std::printf("%-12s %7s %9s %10s %10s %10s %10s %10s\n", "mode", "clients", "req/s", "tok/s", "TTFT p50", "TTFT p99",
              "ITL p50", "ITL p99");
  for (const bool speculative : {false, true}) {
    specpipe::PipelineConfig config;
    config.drafter.type = speculative ? specpipe::DrafterKind::model : specpipe::DrafterKind::none;
    config.drafter.gamma = gamma;
    config.kv.tokens = 65536;
    config.server.endpoint = "tcp://127.0.0.1:*";
    config.server.max_inflight = 1024;
    specpipe::actors::Engine engine(config);
    specpipe::server::Endpoint endpoint(engine, config);
    std::thread loop([&] { endpoint.run(); });
    for (int level : levels) {
      json r = run_level(endpoint.address(), prompts, level, requests_per_client, max_tokens);
      r["mode"] = speculative ? fmt::format("spec g{}", gamma) : "plain";
      std::printf("%-12s %7d %9.2f %10.1f %9.1fms %9.1fms %9.2fms %9.2fms\n", r["mode"].get<std::string>().c_str(), level,
                  r["requests_per_s"].get<double>(), r["tokens_per_s"].get<double>(), r["ttft_p50_ms"].get<double>(),
                  r["ttft_p99_ms"].get<double>(), r["itl_p50_ms"].get<double>(), r["itl_p99_ms"].get<double>());
      std::fflush(stdout);
      report.push_back(r);
    }
    endpoint.stop();
    loop.join();
  }
  const json doc = {{"max_tokens", max_tokens}, {"requests_per_client", requests_per_client},
                    {"threads", specpipe::cpu::num_threads()}, {"results", report}};
  if (!json_out.empty()) std::ofstream(json_out) << doc.dump(2) << "\n";
  else std::printf("%s\n", doc.dump().c_str());
  return 0;
}
