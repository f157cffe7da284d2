#include "scv_counters.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace specpipe::scv {
namespace {

/// printf would follow the host's LC_NUMERIC and could write "0,5".
void append_real(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, ec == std::errc() ? end : buf);
}

void field(std::string& out, const char* name) {
  if (out.size() > 1) out += ',';
  out += '"';
  out += name;
  out += "\":";
}

}  // namespace

void ScvCounters::record_round(std::span<const int32_t> gamma) {
  ++rounds;
  sequence_rounds += gamma.size();
  max_windows_per_pass = std::max(max_windows_per_pass, static_cast<int32_t>(gamma.size()));
  for (int32_t g : gamma) {
    ++gamma_hist[static_cast<size_t>(g)];
    if (g == 0) ++speculation_off;
  }
}

std::string metrics_json(const ScvCounters& c, const LiveMetrics& live) {
  std::string out = "{";
  auto integer = [&](const char* name, auto v) {
    field(out, name);
    out += std::to_string(v);
  };
  auto real = [&](const char* name, double v) {
    field(out, name);
    append_real(out, v);
  };
  integer("rounds", c.rounds);
  field(out, "gamma_hist");
  out += '[';
  for (size_t g = 0; g < c.gamma_hist.size(); ++g) {
    if (g) out += ',';
    out += std::to_string(c.gamma_hist[g]);
  }
  out += ']';
  real("windows_per_pass", c.rounds ? static_cast<double>(c.sequence_rounds) / static_cast<double>(c.rounds) : 0.0);
  integer("max_windows_per_pass", c.max_windows_per_pass);
  integer("speculation_off", c.speculation_off);
  integer("speculation_off_sequences_now", live.speculation_off_sequences_now);
  integer("probes", c.probes);
  real("mean_acceptance_estimate", live.mean_acceptance_estimate);
  real("batch_acceptance_estimate", live.batch_acceptance_estimate);
  integer("tracked_sequences", live.tracked_sequences);
  integer("unmeasured_rounds", c.unmeasured_rounds);
  integer("budget_exceeded_rounds", c.budget_exceeded_rounds);
  integer("outcomes_observed", c.outcomes_observed);
  real("mean_predicted_speedup",
       c.predicted_rounds ? c.predicted_speedup_sum / static_cast<double>(c.predicted_rounds) : 1.0);
  out += '}';
  return out;
}

}  // namespace specpipe::scv
