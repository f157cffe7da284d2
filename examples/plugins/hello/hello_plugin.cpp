// hello: the smallest real specpipe plugin. It fills the `verify_plan` slot with a fixed
// gamma taken from its config, {"gamma": N}, and counts what it sees. Written with the
// C++ helpers of specpipe/plugin.hpp: the class below never touches the C ABI directly.
#include <specpipe/plugin.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

namespace {

using specpipe::sdk::Error;
using specpipe::sdk::HostApi;
using specpipe::sdk::Span;

class HelloPlanner {
 public:
  static constexpr const char* plugin_name = "hello";
  static constexpr const char* plugin_version = "1.0.0";

  /// config_json is the plugin's block from the pipeline file, as a JSON object:
  /// {"gamma": N} with N in [0, model.max_gamma] (default 2). Anything else is refused
  /// with SPECPIPE_ERR_CONFIG, which the host reports as "create refused: <message>".
  HelloPlanner(const HostApi& host, const specpipe_model_desc& model, std::string_view config_json) {
    nlohmann::json config;
    try {
      config = nlohmann::json::parse(config_json.empty() ? std::string_view("{}") : config_json);
    } catch (const nlohmann::json::exception& e) {
      throw Error(SPECPIPE_ERR_CONFIG, std::string("config is not JSON: ") + e.what());
    }
    if (!config.is_object()) throw Error(SPECPIPE_ERR_CONFIG, "config must be a JSON object");
    for (const auto& item : config.items())
      if (item.key() != "gamma") throw Error(SPECPIPE_ERR_CONFIG, "unknown key '" + item.key() + "' (known: gamma)");
    if (config.contains("gamma")) {
      const nlohmann::json& g = config["gamma"];
      if (!g.is_number_integer()) throw Error(SPECPIPE_ERR_CONFIG, "gamma must be an integer, got " + g.dump());
      const int64_t value = g.get<int64_t>();
      if (value < 0 || value > model.max_gamma)
        throw Error(SPECPIPE_ERR_CONFIG,
                    "gamma " + std::to_string(value) + " is out of range [0, " + std::to_string(model.max_gamma) + "]");
      gamma_ = static_cast<int32_t>(value);
    }
    // The host prefixes "plugin hello: " to what the plugin logs.
    host.log(HostApi::Level::info, "gamma " + std::to_string(gamma_) + " for every sequence");
  }

  /// Required for verify_plan: gamma[i] in [0, sequences[i].max_gamma].
  void plan(Span<const specpipe_plan_sequence> sequences, const specpipe_plan_costs& /*costs*/, Span<int32_t> gamma) {
    ++plan_calls_;
    for (size_t i = 0; i < sequences.size(); ++i) {
      gamma[i] = std::clamp(gamma_, 0, std::max(0, sequences[i].max_gamma));
      planned_drafts_ += gamma[i];
    }
    sequences_planned_ += static_cast<int64_t>(sequences.size());
  }

  /// Optional: the outcome of the last round.
  void observe(Span<const specpipe_plan_observation> observations) {
    for (const specpipe_plan_observation& o : observations) {
      proposed_ += o.proposed;
      accepted_ += o.accepted;
    }
  }

  /// Optional: a sequence ended.
  void forget(int64_t /*sequence*/) { ++forgotten_; }

  /// Optional: describe_metrics, a JSON object.
  std::string metrics() const {
    return nlohmann::json{{"gamma", gamma_},
                          {"plan_calls", plan_calls_},
                          {"sequences_planned", sequences_planned_},
                          {"planned_drafts", planned_drafts_},
                          {"proposed", proposed_},
                          {"accepted", accepted_},
                          {"forgotten", forgotten_}}
        .dump();
  }

 private:
  int32_t gamma_ = 2;
  int64_t plan_calls_ = 0, sequences_planned_ = 0, planned_drafts_ = 0;
  int64_t proposed_ = 0, accepted_ = 0, forgotten_ = 0;
};

}  // namespace

// The one exported symbol: specpipe_plugin_entry, returning HelloPlanner's table.
SPECPIPE_SDK_PLUGIN_ENTRY(HelloPlanner)
