#include "scv_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "scv_errors.h"

namespace specpipe::scv {
namespace {

using nlohmann::json;

constexpr const char* kKnownKeys =
    "prior_acceptance, prior_weight, probe_interval, probe_rounds, max_gamma, min_gain, memory_rounds, switch_gain, "
    "costs_by_gamma, single_switch_gain, probe_backoff_batch, measure_rounds";

std::string show(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

[[noreturn]] void refuse(const std::string& key, const std::string& why) {
  throw ConfigError(key, "scv config: key '" + key + "': " + why);
}

/// "a string", "an array", "null", ...: for error messages.
std::string kind_of(const json& value) {
  if (value.is_null()) return "null";
  return std::string(value.is_array() || value.is_object() ? "an " : "a ") + value.type_name();
}

double number(const std::string& key, const json& value, const char* range) {
  if (!value.is_number()) refuse(key, std::string("must be ") + range + ", got " + kind_of(value));
  return value.get<double>();
}

/// A number in [lo, hi] (or (lo, hi] when lo_open).
double real_in(const std::string& key, const json& value, double lo, double hi, bool lo_open, const char* range) {
  const double v = number(key, value, range);
  if (!std::isfinite(v) || v < lo || (lo_open && v == lo) || v > hi)
    refuse(key, std::string("must be ") + range + ", got " + show(v));
  return v;
}

int32_t integer_in(const std::string& key, const json& value, int32_t lo, int32_t hi, const char* range) {
  const double v = number(key, value, range);
  if (v != std::floor(v) || v < lo || v > hi) refuse(key, std::string("must be ") + range + ", got " + show(v));
  return static_cast<int32_t>(v);
}

/// Parses `text` as one JSON object (empty or all-whitespace text: an empty one). `keys`
/// gets its top-level keys in document order, repeats included; a repeat's value is
/// dropped, so `root` holds each key's first value.
json parse_object(std::string_view text, std::vector<std::string>& keys) {
  if (text.find_first_not_of(" \t\n\r") == std::string_view::npos) return json::object();
  const json::parser_callback_t note_keys = [&keys](int depth, json::parse_event_t event, json& parsed) {
    if (event != json::parse_event_t::key || depth != 1) return true;
    const auto& key = parsed.get_ref<const std::string&>();
    const bool first = std::find(keys.begin(), keys.end(), key) == keys.end();
    keys.push_back(key);
    return first;
  };
  json root;
  try {
    root = json::parse(text, note_keys);
  } catch (const json::exception& e) {
    throw ConfigError("", std::string("scv config: not a JSON object: ") + e.what());
  }
  if (!root.is_object()) throw ConfigError("", "scv config: not a JSON object: got " + kind_of(root));
  return root;
}

}  // namespace

ScvConfig parse_scv_config(std::string_view text, int32_t model_max_gamma) {
  std::vector<std::string> keys;
  const json root = parse_object(text, keys);
  ScvConfig config;
  config.max_gamma = model_max_gamma;
  bool max_gamma_given = false;
  for (auto it = keys.begin(); it != keys.end(); ++it) {
    const std::string& key = *it;
    if (std::find(keys.begin(), it, key) != it) refuse(key, "given twice");
    const json& value = root.at(key);
    if (key == "prior_acceptance") {
      config.prior_acceptance = real_in(key, value, 0, 1, false, "a number in [0, 1]");
    } else if (key == "prior_weight") {
      config.prior_weight = real_in(key, value, 0, 1e12, true, "a number > 0");
    } else if (key == "probe_interval") {
      config.probe_interval = integer_in(key, value, 1, 1 << 30, "an integer >= 1");
    } else if (key == "probe_rounds") {
      config.probe_rounds = integer_in(key, value, 1, 1 << 30, "an integer >= 1");
    } else if (key == "max_gamma") {
      const std::string range = "an integer in [0, " + std::to_string(std::min(model_max_gamma, kGammaLimit)) +
                                "] (the model's max_gamma " + std::to_string(model_max_gamma) + ", SCV's limit " +
                                std::to_string(kGammaLimit) + ")";
      config.max_gamma = integer_in(key, value, 0, std::min(model_max_gamma, kGammaLimit), range.c_str());
      max_gamma_given = true;
    } else if (key == "min_gain") {
      config.min_gain = real_in(key, value, 0, 1e12, false, "a number >= 0");
    } else if (key == "memory_rounds") {
      config.memory_rounds = integer_in(key, value, 1, 1 << 30, "an integer >= 1");
    } else if (key == "switch_gain") {
      config.switch_gain = real_in(key, value, 0, 1e12, false, "a number >= 0");
    } else if (key == "single_switch_gain") {
      config.single_switch_gain = real_in(key, value, 0, 1e12, false, "a number >= 0");
    } else if (key == "probe_backoff_batch") {
      config.probe_backoff_batch = integer_in(key, value, 0, 1 << 30, "an integer >= 0");
    } else if (key == "measure_rounds") {
      config.measure_rounds = integer_in(key, value, 0, 1 << 30, "an integer >= 0");
    } else if (key == "costs_by_gamma") {
      if (!value.is_boolean()) refuse(key, "must be true or false, got " + kind_of(value));
      config.costs_by_gamma = value.get<bool>();
    } else {
      refuse(key, std::string("unknown (known keys: ") + kKnownKeys + ")");
    }
  }
  if (!max_gamma_given && model_max_gamma > kGammaLimit)
    refuse("max_gamma", "the model's max_gamma " + std::to_string(model_max_gamma) + " exceeds SCV's limit " +
                            std::to_string(kGammaLimit) + "; set max_gamma in the config");
  return config;
}

}  // namespace specpipe::scv
