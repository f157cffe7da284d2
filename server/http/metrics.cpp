#include "server/http/metrics.h"

#include <fmt/format.h>

namespace specpipe::server::http {
namespace {

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <typename T>
void sample(std::string& out, const char* name, T value, const std::string& labels = {}) {
  out += labels.empty() ? fmt::format("{} {}\n", name, value) : fmt::format("{}{{{}}} {}\n", name, labels, value);
}

/// Label values are route names and slot names of this program; escaping " and \ anyway.
std::string label_value(const std::string& v) {
  std::string out;
  for (char ch : v) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch == '\n' ? 'n' : ch;
  }
  return out;
}

}  // namespace

void Histogram::observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  ++counts_[i];
  sum_ += seconds;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  const std::string sep = labels.empty() ? "" : ",";
  int64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep, kBounds[i], cumulative);
  }
  out += fmt::format("{}_bucket{{{}{}le=\"+Inf\"}} {}\n", name, labels, sep, count_);
  out += labels.empty() ? fmt::format("{}_sum {}\n{}_count {}\n", name, sum_, name, count_)
                        : fmt::format("{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, sum_, name, labels, count_);
}

void Metrics::request_done(const std::string& route, int status, double seconds) {
  std::lock_guard lock(mutex_);
  ++requests_[{route, status}];
  latency_[route].observe(seconds);
}

void Metrics::tokens(int64_t prompt_tokens, int64_t completion_tokens) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += prompt_tokens;
  completion_tokens_ += completion_tokens;
}

void Metrics::first_token(double seconds) {
  std::lock_guard lock(mutex_);
  ttft_.observe(seconds);
}

void Metrics::cancelled_by_disconnect() {
  std::lock_guard lock(mutex_);
  ++disconnects_;
}

std::string Metrics::render(const EngineSnapshot& e, int64_t inflight) const {
  std::lock_guard lock(mutex_);
  std::string out;
  family(out, "specpipe_http_requests_total", "counter", "HTTP requests answered, by route and status code.");
  for (const auto& [key, n] : requests_)
    sample(out, "specpipe_http_requests_total", n, fmt::format("route=\"{}\",code=\"{}\"", label_value(key.first), key.second));
  family(out, "specpipe_http_request_duration_seconds", "histogram",
         "Time from a request's arrival to the end of its response (a stream: its last event).");
  for (const auto& [route, h] : latency_)
    h.render(out, "specpipe_http_request_duration_seconds", fmt::format("route=\"{}\"", label_value(route)));
  family(out, "specpipe_http_time_to_first_token_seconds", "histogram",
         "Completion requests: time from arrival to the first generated text.");
  ttft_.render(out, "specpipe_http_time_to_first_token_seconds", "");
  const SpecStats& s = e.stats;
  // Metrics of one unlabelled sample: name, type, help, value.
  const struct {
    const char* name;
    const char* type;
    const char* help;
    double value;
  } singles[] = {
      {"specpipe_http_inflight_requests", "gauge", "Completion requests of the gateway in the engine now.",
       static_cast<double>(inflight)},
      {"specpipe_http_prompt_tokens_total", "counter", "Prompt tokens of the gateway's completion requests.",
       static_cast<double>(prompt_tokens_)},
      {"specpipe_http_completion_tokens_total", "counter", "Tokens the gateway's completion requests generated.",
       static_cast<double>(completion_tokens_)},
      {"specpipe_http_client_disconnects_total", "counter",
       "Requests cancelled because their client went away before the end.", static_cast<double>(disconnects_)},
      {"specpipe_requests_total", "counter", "Requests the engine finished (every endpoint).",
       static_cast<double>(s.requests)},
      {"specpipe_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
       static_cast<double>(s.prompt_tokens)},
      {"specpipe_cached_prompt_tokens_total", "counter", "Prompt tokens served from the prefix cache.",
       static_cast<double>(s.cached_prompt_tokens)},
      {"specpipe_generated_tokens_total", "counter", "Tokens returned to clients.", static_cast<double>(s.generated)},
      {"specpipe_rounds_total", "counter", "Target verify forwards (a plain decode step counts as one).",
       static_cast<double>(s.rounds)},
      {"specpipe_draft_tokens_proposed_total", "counter", "Draft tokens proposed.", static_cast<double>(s.proposed)},
      {"specpipe_draft_tokens_accepted_total", "counter", "Draft tokens accepted by the target.",
       static_cast<double>(s.accepted)},
      {"specpipe_acceptance_rate", "gauge", "accepted / proposed over finished requests.", s.acceptance_rate()},
      {"specpipe_tokens_per_target_step", "gauge", "(accepted + rounds) / rounds over finished requests.",
       s.tokens_per_step()},
      {"specpipe_draft_failures_total", "counter", "Rounds whose drafter failed and ran without drafts.",
       static_cast<double>(s.draft_failures)},
  };
  for (const auto& m : singles) {
    family(out, m.name, m.type, m.help);
    sample(out, m.name, m.value);
  }
  family(out, "specpipe_accepted_length_rounds_total", "counter", "Rounds that accepted exactly k drafts.");
  for (size_t k = 0; k < s.accepted_hist.size(); ++k)
    sample(out, "specpipe_accepted_length_rounds_total", s.accepted_hist[k], fmt::format("k=\"{}\"", k));

  family(out, "specpipe_kv_blocks", "gauge", "Target KV pool blocks, by state (free counts evictable cached ones).");
  sample(out, "specpipe_kv_blocks", e.kv.total_blocks - e.kv.free_blocks, "state=\"used\"");
  sample(out, "specpipe_kv_blocks", e.kv.free_blocks, "state=\"free\"");
  family(out, "specpipe_kv_usage_ratio", "gauge", "Used / total target KV pool blocks.");
  sample(out, "specpipe_kv_usage_ratio",
         e.kv.total_blocks ? static_cast<double>(e.kv.total_blocks - e.kv.free_blocks) / e.kv.total_blocks : 0.0);
  family(out, "specpipe_kv_sequences", "gauge", "Sequences holding target KV.");
  sample(out, "specpipe_kv_sequences", e.kv.sequences);

  // A plugin slot's host record: {"disabled": bool, "fallbacks": {reason: n}}.
  family(out, "specpipe_plugin_fallbacks_total", "counter", "Plugin calls that failed and fell back to the built-in strategy.");
  family(out, "specpipe_plugin_disabled", "gauge", "1 when a slot's plugin was disabled after a failure.");
  if (e.strategies.is_object())
    for (const auto& [slot, m] : e.strategies.items()) {
      if (!m.is_object() || !m.contains("host") || !m["host"].is_object()) continue;
      const auto& host = m["host"];
      const std::string plugin = label_value(m.value("strategy", ""));
      if (host.contains("fallbacks") && host["fallbacks"].is_object())
        for (const auto& [reason, n] : host["fallbacks"].items())
          sample(out, "specpipe_plugin_fallbacks_total", n.is_number() ? n.get<int64_t>() : 0,
                 fmt::format("slot=\"{}\",plugin=\"{}\",reason=\"{}\"", label_value(slot), plugin, label_value(reason)));
      sample(out, "specpipe_plugin_disabled", host.value("disabled", false) ? 1 : 0,
             fmt::format("slot=\"{}\",plugin=\"{}\"", label_value(slot), plugin));
    }
  return out;
}

}  // namespace specpipe::server::http
