// Loads the hello example plugin, built out of tree against the installed SDK
// (out_of_tree_hello.sh), with the engine's own loader, and drives it the way the
// scheduler does: PluginLibrary::load -> PluginInstance -> PluginVerifyPlanner.
//   hello_load_test <libspecpipe_hello.so> [<pipeline.yaml declaring it>]
// Exit code 0 when every check passes.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "pipeline/pipeline_config.h"
#include "pipeline/plugin_instance.h"
#include "pipeline/plugin_library.h"
#include "pipeline/verify_planner.h"
#include "test_model_desc.h"

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "check failed: %s\n", what.c_str());
  ++failures;
}

/// The message of the Error that creating an instance with `config` throws ("" if none).
std::string refusal(const std::shared_ptr<const specpipe::PluginLibrary>& lib, const std::string& slot,
                    const nlohmann::json& config) {
  try {
    specpipe::PluginInstance instance(lib, slot, sdk_test_model_desc(), config, nullptr);
  } catch (const specpipe::Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void run(const std::string& path, const std::string& yaml) {
  using namespace specpipe;
  const auto lib = PluginLibrary::load(path);
  check(lib->name() == "hello", "name is hello, got " + lib->name());
  check(lib->fills("verify_plan") && !lib->fills("kv_write"), "fills verify_plan only");
  check(std::string(lib->table().version) == "1.0.0", "version 1.0.0");
  check(lib->table().describe_metrics != nullptr, "describe_metrics present");
  check(lib->table().verify_plan->observe && lib->table().verify_plan->forget, "observe and forget present");

  auto instance =
      std::make_shared<PluginInstance>(lib, "verify_plan", sdk_test_model_desc(), nlohmann::json{{"gamma", 3}}, nullptr);
  PluginVerifyPlanner planner(instance);
  check(planner.name() == "hello", "planner name");
  const std::vector<PlanSequence> seqs = {{11, 4, 5, 10}, {12, 4, 2, 10}, {13, 4, 0, 10}};
  std::vector<int32_t> gamma(seqs.size(), -7);
  planner.plan(seqs, PlanCosts{}, gamma);
  check(gamma == std::vector<int32_t>({3, 2, 0}), "plan gives min(gamma 3, max_gamma)");
  planner.observe(std::vector<PlanObservation>{{11, 3, 2}, {12, 2, 2}});
  planner.forget(13);
  const nlohmann::json m = planner.metrics();
  check(m.value("gamma", -1) == 3, "metrics gamma: " + m.dump());
  check(m.value("plan_calls", -1) == 1, "metrics plan_calls: " + m.dump());
  check(m.value("sequences_planned", -1) == 3, "metrics sequences_planned: " + m.dump());
  check(m.value("planned_drafts", -1) == 5, "metrics planned_drafts: " + m.dump());
  check(m.value("proposed", -1) == 5 && m.value("accepted", -1) == 4, "metrics proposed/accepted: " + m.dump());
  check(m.value("forgotten", -1) == 1, "metrics forgotten: " + m.dump());
  check(m.contains("host") && m["host"].value("disabled", true) == false, "host: not disabled: " + m.dump());
  check(!instance->disabled() && instance->fallbacks().empty(), "no fallback");

  // Refusals come back through the SDK's trampolines as create's status and message.
  const std::string out_of_range = refusal(lib, "verify_plan", {{"gamma", 99}});
  check(contains(out_of_range, "create refused") && contains(out_of_range, "hello: gamma 99 is out of range"),
        "gamma 99 refused: " + out_of_range);
  const std::string not_int = refusal(lib, "verify_plan", {{"gamma", "x"}});
  check(contains(not_int, "gamma must be an integer"), "gamma \"x\" refused: " + not_int);
  const std::string unknown = refusal(lib, "verify_plan", {{"gama", 1}});
  check(contains(unknown, "unknown key 'gama'"), "unknown key refused: " + unknown);
  const std::string wrong_slot = refusal(lib, "kv_write", nlohmann::json::object());
  check(contains(wrong_slot, "does not fill slot kv_write"), "kv_write refused: " + wrong_slot);
  check(refusal(lib, "verify_plan", nullptr).empty(), "an empty config takes the default gamma");

  if (!yaml.empty()) {
    // The example pipeline file resolves `path: hello` through $SPECPIPE_PLUGIN_PATH.
    const PipelineConfig c = load_pipeline_config(yaml);
    check(c.slots.verify_plan == "hello", "yaml: slots.verify_plan.type is hello");
    check(c.plugins.size() == 1 && c.plugins[0].name == "hello", "yaml: one plugin, hello");
    if (c.plugins.size() == 1) {
      check(nlohmann::json::parse(c.plugins[0].config_json) == nlohmann::json{{"gamma", 3}},
            "yaml: config {gamma: 3}, got " + c.plugins[0].config_json);
      check(PluginLibrary::load(c.plugins[0].path)->name() == "hello", "yaml: path resolves to hello");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <plugin.so> [<pipeline.yaml>]\n", argv[0]);
    return 2;
  }
  try {
    run(argv[1], argc > 2 ? argv[2] : "");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  if (failures) {
    std::fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("hello plugin: loaded and checked\n");
  return 0;
}
