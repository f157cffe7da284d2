// SCV (slot verify_plan) through the real libspecpipe_scv.so, as a host loads it: the
// table and the entry's ABI check, plan / observe / forget round trips and the metrics,
// config errors, invalid inputs, and gammas within bounds for random inputs.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/plugin_library.h"
#include "scv_test_costs.h"
#include "specpipe/plugin.h"

namespace scv_test {
namespace {

struct LogHost {
  std::vector<std::pair<int32_t, std::string>> lines;
  specpipe_host_api api() {
    specpipe_host_api a{};
    a.abi_version = SPECPIPE_PLUGIN_ABI_VERSION;
    a.struct_size = sizeof(specpipe_host_api);
    a.host = this;
    a.log = [](void* host, int32_t level, const char* message) {
      static_cast<LogHost*>(host)->lines.emplace_back(level, message);
    };
    return a;
  }
};

specpipe_model_desc model_desc(int32_t max_gamma = 8) {
  specpipe_model_desc m{};
  m.struct_size = sizeof(m);
  m.num_layers = 2;
  m.num_kv_heads = 2;
  m.head_dim = 4;
  m.kv_dim = 8;
  m.block_size = 16;
  m.max_gamma = max_gamma;
  m.max_batch = 64;
  m.device = DLDevice{kDLCPU, 0};
  return m;
}

specpipe_plan_costs abi_costs(double draft, double base, double token, int32_t budget = 0) {
  specpipe_plan_costs c{};
  c.struct_size = sizeof(c);
  c.draft_step_ms = draft;
  c.verify_base_ms = base;
  c.verify_token_ms = token;
  c.token_budget = budget;
  return c;
}

class ScvPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    lib_ = specpipe::PluginLibrary::load(SCV_PLUGIN_PATH);
    ASSERT_TRUE(lib_->fills("verify_plan"));
    ASSERT_FALSE(lib_->fills("kv_write"));
  }
  void TearDown() override {
    for (void* i : instances_) table().destroy(i);
  }
  const specpipe_plugin_table& table() const { return lib_->table(); }
  const specpipe_verify_plan_hooks& hooks() const { return *table().verify_plan; }

  /// create() with `config`; the status, and the message in error_.
  specpipe_status create(const char* config, void** out, int32_t model_max_gamma = 8) {
    const specpipe_model_desc m = model_desc(model_max_gamma);
    error_[0] = '\0';
    const specpipe_status s = table().create(&api_, &m, config, out, error_, sizeof error_);
    if (s == SPECPIPE_OK) instances_.push_back(*out);
    return s;
  }
  void* instance(const char* config = "{}") {
    void* i = nullptr;
    EXPECT_EQ(create(config, &i), SPECPIPE_OK) << error_;
    return i;
  }
  nlohmann::json metrics(void* i) {
    std::string buffer(4096, '\0');
    const size_t need = table().describe_metrics(i, buffer.data(), buffer.size());
    EXPECT_LE(need, buffer.size());
    buffer.resize(std::strlen(buffer.c_str()));
    EXPECT_EQ(need, buffer.size() + 1);
    return nlohmann::json::parse(buffer);
  }
  specpipe_status plan(void* i, const std::vector<specpipe_plan_sequence>& s, const specpipe_plan_costs& c, Gammas& g) {
    g.assign(s.size(), -1);
    error_[0] = '\0';
    return hooks().plan(i, s.data(), static_cast<int32_t>(s.size()), &c, g.data(), error_, sizeof error_);
  }

  std::shared_ptr<const specpipe::PluginLibrary> lib_;
  LogHost host_;
  specpipe_host_api api_ = host_.api();
  std::vector<void*> instances_;
  char error_[512] = {};
};

TEST_F(ScvPlugin, TableDescribesTheSlotAndEntryRefusesOtherAbis) {
  EXPECT_STREQ(table().name, "scv");
  ASSERT_NE(table().verify_plan, nullptr);
  EXPECT_NE(hooks().observe, nullptr);
  EXPECT_NE(hooks().forget, nullptr);
  EXPECT_EQ(table().kv_write, nullptr);
  void* handle = dlopen(SCV_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr);
  auto entry = reinterpret_cast<specpipe_plugin_entry_fn>(dlsym(handle, SPECPIPE_PLUGIN_ENTRY_SYMBOL));
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry(SPECPIPE_PLUGIN_ABI_VERSION + 1), nullptr);
  // The loader keeps its own copy of the table (SDK 1.1: a 1.0 plugin's shorter table is
  // padded with NULLs), so compare what the entry hands out with that copy field by field.
  const specpipe_plugin_table* own = entry(SPECPIPE_PLUGIN_ABI_VERSION);
  ASSERT_NE(own, nullptr);
  EXPECT_STREQ(own->name, table().name);
  EXPECT_EQ(own->verify_plan, table().verify_plan);
  EXPECT_EQ(own->create, table().create);
  dlclose(handle);
}

TEST_F(ScvPlugin, PlanObserveRoundTripAndMetrics) {
  void* scv = instance(R"({"prior_acceptance": 0.9, "prior_weight": 4, "probe_interval": 8})");
  ASSERT_FALSE(host_.lines.empty());  // create() logs its settings
  EXPECT_NE(host_.lines[0].second.find("scv"), std::string::npos);
  const std::vector<specpipe_plan_sequence> s = {seq(10), seq(11), seq(12, 2)};
  Gammas g;
  // Not measured yet: the requested gammas (within each cap).
  ASSERT_EQ(plan(scv, s, abi_costs(0, 0, 0), g), SPECPIPE_OK) << error_;
  EXPECT_EQ(g, (Gammas{4, 4, 2}));
  // Measured, cheap: high acceptance drafts long windows.
  ASSERT_EQ(plan(scv, s, abi_costs(0.02, 1.0, 0.005), g), SPECPIPE_OK) << error_;
  EXPECT_GE(g[0], 5);
  EXPECT_EQ(g[2], 2);
  // Sequence 11 rejects everything for a while: once its estimate has fallen, a draft of
  // its no longer pays for its verify token; the others keep going.
  for (int r = 0; r < 20; ++r) {
    const std::vector<specpipe_plan_observation> o = {{10, g[0], g[0]}, {11, g[1], 0}, {12, g[2], g[2]}};
    hooks().observe(scv, o.data(), static_cast<int32_t>(o.size()));
    ASSERT_EQ(plan(scv, s, abi_costs(0.02, 1.0, 0.1), g), SPECPIPE_OK) << error_;
  }
  EXPECT_GE(g[0], 5);
  EXPECT_EQ(g[1], 0);

  const nlohmann::json m = metrics(scv);
  for (const char* key : {"rounds", "gamma_hist", "windows_per_pass", "speculation_off",
                          "speculation_off_sequences_now", "probes", "mean_acceptance_estimate"})
    EXPECT_TRUE(m.contains(key)) << key << " in " << m.dump();
  EXPECT_EQ(m["rounds"], 22);
  ASSERT_EQ(m["gamma_hist"].size(), 9u);
  uint64_t planned = 0;
  for (const auto& x : m["gamma_hist"]) planned += x.get<uint64_t>();
  EXPECT_EQ(planned, 66u);
  EXPECT_DOUBLE_EQ(m["windows_per_pass"].get<double>(), 3.0);
  EXPECT_EQ(m["speculation_off_sequences_now"], 1);
  EXPECT_GE(m["speculation_off"].get<int>(), 1);
  EXPECT_EQ(m["unmeasured_rounds"], 1);
  EXPECT_GT(m["mean_acceptance_estimate"].get<double>(), 0.5);

  // forget() drops the sequence; the metrics follow.
  hooks().forget(scv, 11);
  EXPECT_EQ(metrics(scv)["speculation_off_sequences_now"], 0);
  EXPECT_EQ(metrics(scv)["tracked_sequences"], 2);
}

TEST_F(ScvPlugin, DescribeMetricsReportsTheSizeItNeeds) {
  void* scv = instance();
  char small[8];
  const size_t need = table().describe_metrics(scv, small, sizeof small);
  EXPECT_GT(need, sizeof small);
  EXPECT_EQ(std::strlen(small), sizeof small - 1);
  EXPECT_EQ(table().describe_metrics(scv, nullptr, 0), need);
}

TEST_F(ScvPlugin, ConfigErrorsNameTheKey) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"({"prior_acceptance": 1.5})", "prior_acceptance"},
      {R"({"prior_acceptance": "high"})", "prior_acceptance"},
      {R"({"prior_weight": 0})", "prior_weight"},
      {R"({"probe_interval": 0})", "probe_interval"},
      {R"({"probe_interval": 2.5})", "probe_interval"},
      {R"({"probe_rounds": 0})", "probe_rounds"},
      {R"({"max_gamma": -1})", "max_gamma"},
      {R"({"max_gamma": 9})", "max_gamma"},  // the model's is 8
      {R"({"min_gain": -0.1})", "min_gain"},
      {R"({"memory_rounds": 0})", "memory_rounds"},
      {R"({"min_gain": null})", "min_gain"},
      {R"({"costs_by_gamma": 1})", "costs_by_gamma"},
      {R"({"single_switch_gain": -1})", "single_switch_gain"},
      {R"({"probe_backoff_batch": 1.5})", "probe_backoff_batch"},
      {R"({"measure_rounds": -1})", "measure_rounds"},
      {R"({"gamma": 4})", "gamma"},
      {R"({"probe_interval": 4, "probe_interval": 8})", "probe_interval"},
      {R"({"gamma": 4, "probe_interval": 4, "probe_interval": 8})", "gamma"},  // document order
      {R"({"x": {"a": [1, {"b": null}], "a": 2}})", "x"},  // nested values: only the key is judged
  };
  for (const auto& [config, key] : cases) {
    void* i = reinterpret_cast<void*>(0x1);
    EXPECT_EQ(create(config, &i), SPECPIPE_ERR_CONFIG) << config;
    EXPECT_EQ(i, nullptr);
    EXPECT_NE(std::string(error_).find(std::string("'") + key + "'"), std::string::npos) << config << " -> " << error_;
  }
  for (const char* bad : {"[1, 2]", "{\"a\": }", "{\"prior_weight\": 2", "{} {}", "{\"a\": 01}", "null", "3"}) {
    void* i = nullptr;
    EXPECT_EQ(create(bad, &i), SPECPIPE_ERR_CONFIG) << bad;
    EXPECT_NE(std::string(error_).find("JSON"), std::string::npos) << error_;
  }
  // A repeated key is judged with its first value before it is refused as repeated.
  void* repeated = nullptr;
  EXPECT_EQ(create(R"({"probe_interval": 0, "probe_interval": 8})", &repeated), SPECPIPE_ERR_CONFIG);
  EXPECT_NE(std::string(error_).find("got 0"), std::string::npos) << error_;
  // Valid configs: empty text, null, nested values are refused only by key.
  void* ok = nullptr;
  EXPECT_EQ(create("", &ok), SPECPIPE_OK) << error_;
  EXPECT_EQ(create(" \n\t ", &ok), SPECPIPE_OK) << error_;
  EXPECT_EQ(create(nullptr, &ok), SPECPIPE_OK) << error_;
  EXPECT_EQ(create(R"( {"max_gamma": 3, "min_gain": 0, "prior_acceptance": 1e-1, "memory_rounds": 4,
                      "costs_by_gamma": false} )", &ok),
            SPECPIPE_OK)
      << error_;
  // A model beyond SCV's limit needs an explicit cap.
  EXPECT_EQ(create("{}", &ok, 100), SPECPIPE_ERR_CONFIG);
  EXPECT_NE(std::string(error_).find("'max_gamma'"), std::string::npos) << error_;
  EXPECT_EQ(create(R"({"max_gamma": 16})", &ok, 100), SPECPIPE_OK) << error_;
}

TEST_F(ScvPlugin, InvalidInputsAreRefused) {
  void* scv = instance();
  const std::vector<specpipe_plan_sequence> s = {seq(1), seq(2)};
  const specpipe_plan_costs c = abi_costs(0.1, 1.0, 0.1);
  Gammas g(2, -1);
  auto call = [&](void* i, const specpipe_plan_sequence* sp, int32_t n, const specpipe_plan_costs* cp, int32_t* gp) {
    error_[0] = '\0';
    return hooks().plan(i, sp, n, cp, gp, error_, sizeof error_);
  };
  EXPECT_EQ(call(scv, s.data(), -1, &c, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error_).find("count"), std::string::npos);
  EXPECT_EQ(call(scv, nullptr, 2, &c, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(call(scv, s.data(), 2, &c, nullptr), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(call(scv, s.data(), 2, nullptr, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(call(nullptr, s.data(), 2, &c, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(call(scv, nullptr, 0, nullptr, nullptr), SPECPIPE_OK);  // nothing to plan
  const std::vector<specpipe_plan_sequence> negative = {seq(1), seq(2, -1)};
  EXPECT_EQ(call(scv, negative.data(), 2, &c, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error_).find("max_gamma"), std::string::npos) << error_;
  EXPECT_EQ(g, Gammas(2, -1));  // nothing written on error
  specpipe_plan_costs nan_costs = c;
  nan_costs.verify_token_ms = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(call(scv, s.data(), 2, &nan_costs, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  specpipe_plan_costs negative_budget = c;
  negative_budget.token_budget = -1;
  EXPECT_EQ(call(scv, s.data(), 2, &negative_budget, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(metrics(scv)["rounds"], 0);  // refused calls change nothing
  // A slightly negative fitted intercept is read as 0, not refused.
  specpipe_plan_costs dip = c;
  dip.verify_base_ms = -0.01;
  EXPECT_EQ(call(scv, s.data(), 2, &dip, g.data()), SPECPIPE_OK) << error_;
  // Round costs by gamma (ABI 1.3): a count with no array, or out of range, is refused.
  specpipe_plan_costs by_gamma = c;
  by_gamma.round_ms_by_gamma_count = 2;
  EXPECT_EQ(call(scv, s.data(), 2, &by_gamma, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error_).find("round_ms_by_gamma"), std::string::npos) << error_;
  const double walls[2] = {0.2, std::numeric_limits<double>::infinity()};
  by_gamma.round_ms_by_gamma = walls;
  EXPECT_EQ(call(scv, s.data(), 2, &by_gamma, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  by_gamma.round_ms_by_gamma_count = -1;
  EXPECT_EQ(call(scv, s.data(), 2, &by_gamma, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  // ... and not read where the host's struct (ABI 1.2) ends before it.
  by_gamma.struct_size = offsetof(specpipe_plan_costs, round_ms_by_gamma);
  EXPECT_EQ(call(scv, s.data(), 2, &by_gamma, g.data()), SPECPIPE_OK) << error_;
  // A host with a smaller (older) costs struct: the missing fields read as 0.
  specpipe_plan_costs old = c;
  old.struct_size = offsetof(specpipe_plan_costs, verify_token_ms);
  EXPECT_EQ(call(scv, s.data(), 2, &old, g.data()), SPECPIPE_OK) << error_;

  // observe() cannot fail: bad calls are logged and ignored.
  hooks().observe(scv, nullptr, 3);
  hooks().observe(scv, nullptr, -1);
  hooks().observe(nullptr, nullptr, 0);
  hooks().forget(nullptr, 1);
  EXPECT_EQ(host_.lines.back().first, 2);

  // create(): NULL out-pointer or model, negative model max_gamma.
  const specpipe_model_desc m = model_desc();
  EXPECT_EQ(table().create(&api_, &m, "{}", nullptr, error_, sizeof error_), SPECPIPE_ERR_INVALID_ARGUMENT);
  void* out = nullptr;
  EXPECT_EQ(table().create(&api_, nullptr, "{}", &out, error_, sizeof error_), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(create("{}", &out, -1), SPECPIPE_ERR_INVALID_ARGUMENT);
  // Without an error buffer, a failure is still a status.
  EXPECT_EQ(table().create(&api_, &m, "{\"x\": 1}", &out, nullptr, 0), SPECPIPE_ERR_CONFIG);
  // Without a host, the plugin still works (it just cannot log).
  EXPECT_EQ(table().create(nullptr, &m, "{}", &out, error_, sizeof error_), SPECPIPE_OK);
  instances_.push_back(out);
}

TEST_F(ScvPlugin, GammasStayWithinBoundsForRandomInputs) {
  std::mt19937 rng(424242);
  std::uniform_real_distribution<double> unit(0, 1);
  void* scv = instance(R"({"max_gamma": 6, "probe_interval": 3})");
  for (int round = 0; round < 2000; ++round) {
    const int32_t n = static_cast<int32_t>(rng() % 40);
    std::vector<specpipe_plan_sequence> s(static_cast<size_t>(n));
    for (auto& x : s)
      x = specpipe_plan_sequence{static_cast<int64_t>(rng() % 64), static_cast<int32_t>(rng() % 12) - 2,
                                 static_cast<int32_t>(rng() % 10), static_cast<int32_t>(rng() % 4096)};
    const bool measured = rng() % 5 != 0;
    const int32_t budget = rng() % 3 == 0 ? static_cast<int32_t>(rng() % 120) : 0;
    const specpipe_plan_costs c = measured ? abi_costs(unit(rng) * 0.5, unit(rng) * 3, unit(rng) * 0.5, budget)
                                           : abi_costs(0, 0, 0, budget);
    Gammas g;
    ASSERT_EQ(plan(scv, s, c, g), SPECPIPE_OK) << error_;
    for (int32_t i = 0; i < n; ++i) {
      ASSERT_GE(g[i], 0);
      ASSERT_LE(g[i], std::min(s[i].max_gamma, 6)) << "round " << round;
    }
    if (budget > 0 && n <= budget) {
      ASSERT_LE(window_tokens(g), budget) << "round " << round;
    }
    if (budget > 0 && n > budget) {
      ASSERT_EQ(g, Gammas(g.size(), 0));
    }
    std::vector<specpipe_plan_observation> o;
    for (int32_t i = 0; i < n; ++i)
      o.push_back({s[i].sequence, g[i], static_cast<int32_t>(rng() % (g[i] + 2)) - (rng() % 7 == 0 ? 2 : 0)});
    hooks().observe(scv, o.data(), static_cast<int32_t>(o.size()));
    if (rng() % 10 == 0) hooks().forget(scv, static_cast<int64_t>(rng() % 64));
  }
  const nlohmann::json m = metrics(scv);
  EXPECT_EQ(m["gamma_hist"].size(), 7u);
  const double a = m["mean_acceptance_estimate"].get<double>();
  EXPECT_GE(a, 0.0);
  EXPECT_LE(a, 1.0);
}

}  // namespace
}  // namespace scv_test
