#pragma once
/// The gateway's Prometheus metrics (GET /metrics, text exposition format 0.0.4): HTTP
/// requests by route and status, latency histograms, tokens, and, read from the engine
/// at scrape time, its speculation counters, KV use and plugin fallbacks.
#include <array>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "kvstore/kv_store.h"
#include "pipeline/spec_stats.h"

namespace specpipe::server::http {

/// A cumulative histogram with fixed bucket bounds in seconds.
class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                     1,     2.5,  5,     10,   30,  60,  300};
  void observe(double seconds);
  /// Appends `name_bucket{labels,le=...}`, `name_sum`, `name_count` lines.
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::array<int64_t, kBounds.size() + 1> counts_{};  // the last: above every bound (+Inf only)
  double sum_ = 0;
  int64_t count_ = 0;
};

/// What the engine reports at scrape time.
struct EngineSnapshot {
  SpecStats stats;               ///< aggregate of finished requests (both endpoints)
  KvOccupancy kv;
  nlohmann::json strategies;     ///< Engine::strategy_metrics()
};

/// Thread-safe.
class Metrics {
 public:
  /// A response went out (for a stream: when it ended) `seconds` after the request arrived.
  void request_done(const std::string& route, int status, double seconds);
  /// A completion request's tokens and its time to first token.
  void tokens(int64_t prompt_tokens, int64_t completion_tokens);
  void first_token(double seconds);
  void cancelled_by_disconnect();

  std::string render(const EngineSnapshot& engine, int64_t inflight) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;  // (route, status)
  std::map<std::string, Histogram> latency_;                 // by route
  Histogram ttft_;
  int64_t prompt_tokens_ = 0, completion_tokens_ = 0, disconnects_ = 0;
};

}  // namespace specpipe::server::http
