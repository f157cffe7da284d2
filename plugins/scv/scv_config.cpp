#include "scv_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "flat_json.h"
#include "scv_errors.h"

namespace specpipe::scv {
namespace {

constexpr const char* kKnownKeys =
    "prior_acceptance, prior_weight, probe_interval, max_gamma, min_gain, memory_rounds";

std::string show(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

[[noreturn]] void refuse(const std::string& key, const std::string& why) {
  throw ConfigError(key, "scv config: key '" + key + "': " + why);
}

double number(const JsonMember& m, const char* range) {
  if (m.kind != JsonMember::Kind::number)
    refuse(m.key, std::string("must be ") + range + ", got " + json_kind_name(m.kind));
  return m.number;
}

/// A number in [lo, hi] (or (lo, hi] when lo_open).
double real_in(const JsonMember& m, double lo, double hi, bool lo_open, const char* range) {
  const double v = number(m, range);
  if (!std::isfinite(v) || v < lo || (lo_open && v == lo) || v > hi) refuse(m.key, std::string("must be ") + range + ", got " + show(v));
  return v;
}

int32_t integer_in(const JsonMember& m, int32_t lo, int32_t hi, const char* range) {
  const double v = number(m, range);
  if (v != std::floor(v) || v < lo || v > hi) refuse(m.key, std::string("must be ") + range + ", got " + show(v));
  return static_cast<int32_t>(v);
}

}  // namespace

ScvConfig parse_scv_config(std::string_view json, int32_t model_max_gamma) {
  std::vector<JsonMember> members;
  try {
    members = parse_json_object(json);
  } catch (const JsonSyntaxError& e) {
    throw ConfigError("", std::string("scv config: not a JSON object: ") + e.what());
  }
  ScvConfig config;
  config.max_gamma = model_max_gamma;
  bool max_gamma_given = false;
  for (size_t i = 0; i < members.size(); ++i) {
    const JsonMember& m = members[i];
    for (size_t j = 0; j < i; ++j)
      if (members[j].key == m.key) refuse(m.key, "given twice");
    if (m.key == "prior_acceptance") {
      config.prior_acceptance = real_in(m, 0, 1, false, "a number in [0, 1]");
    } else if (m.key == "prior_weight") {
      config.prior_weight = real_in(m, 0, 1e12, true, "a number > 0");
    } else if (m.key == "probe_interval") {
      config.probe_interval = integer_in(m, 1, 1 << 30, "an integer >= 1");
    } else if (m.key == "max_gamma") {
      const std::string range = "an integer in [0, " + std::to_string(std::min(model_max_gamma, kGammaLimit)) +
                                "] (the model's max_gamma " + std::to_string(model_max_gamma) + ", SCV's limit " +
                                std::to_string(kGammaLimit) + ")";
      config.max_gamma = integer_in(m, 0, std::min(model_max_gamma, kGammaLimit), range.c_str());
      max_gamma_given = true;
    } else if (m.key == "min_gain") {
      config.min_gain = real_in(m, 0, 1e12, false, "a number >= 0");
    } else if (m.key == "memory_rounds") {
      config.memory_rounds = integer_in(m, 1, 1 << 30, "an integer >= 1");
    } else {
      refuse(m.key, std::string("unknown (known keys: ") + kKnownKeys + ")");
    }
  }
  if (!max_gamma_given && model_max_gamma > kGammaLimit)
    refuse("max_gamma", "the model's max_gamma " + std::to_string(model_max_gamma) + " exceeds SCV's limit " +
                            std::to_string(kGammaLimit) + "; set max_gamma in the config");
  return config;
}

}  // namespace specpipe::scv
