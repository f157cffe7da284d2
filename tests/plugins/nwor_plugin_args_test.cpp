// The NWOR plugin refusing what it cannot use: config errors at create(), and hooks
// given malformed arguments, which must return SPECPIPE_ERR_INVALID_ARGUMENT with a
// message, write nothing and never crash.
#include <functional>

#include "nwor_test_host.h"

namespace nwor_test {
namespace {

using NworPluginArgsTest = NworFixture;

TEST_F(NworPluginArgsTest, ConfigErrorsNameTheKey) {
  const struct {
    const char* config;
    const char* mentions;
  } cases[] = {
      {R"({"max_row": 4})", "max_row'"},
      {R"({"max_rows": 4, "gamma": 2})", "gamma"},
      {R"({"max_rows": 0})", "max_rows"},
      {R"({"max_rows": -3})", "max_rows"},
      {R"({"max_rows": 2.5})", "max_rows"},
      {R"({"max_rows": 4.0})", "max_rows"},
      {R"({"max_rows": "8"})", "max_rows"},
      {R"({"max_rows": true})", "max_rows"},
      {R"({"max_rows": null})", "max_rows"},
      {R"({"max_rows": 4294967296})", "max_rows"},
      {R"({"max_rows": 18446744073709551615})", "max_rows"},
      {R"({"enabled": 1})", "enabled"},
      {R"({"enabled": "yes"})", "enabled"},
      {R"([1, 2])", "object"},
      {R"(7)", "object"},
      {R"({"max_rows": )", "JSON"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.config);
    EXPECT_EQ(try_create(c.config), SPECPIPE_ERR_CONFIG);
    EXPECT_EQ(instance_, nullptr);
    EXPECT_NE(std::string(error_).find(c.mentions), std::string::npos) << error_;
    EXPECT_EQ(host_.live_allocations, 0);
  }
}

TEST_F(NworPluginArgsTest, ValidConfigsAndDefaults) {
  for (const char* config : {static_cast<const char*>(nullptr), "", "{}", "null", R"({"enabled": true})"}) {
    ASSERT_EQ(try_create(config), SPECPIPE_OK) << (config ? config : "NULL") << ": " << error_;
    EXPECT_EQ(metrics()["max_rows"], kDefaultRows);
    EXPECT_EQ(metrics()["enabled"], true);
  }
  create(R"({"max_rows": 7, "enabled": true})");
  EXPECT_EQ(metrics()["max_rows"], 7);
}

TEST_F(NworPluginArgsTest, CreateRefusesABadHostOrModel) {
  EXPECT_EQ(table().create(nullptr, &model_, "{}", &instance_, error_, sizeof error_), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(table().create(&host_api_, nullptr, "{}", &instance_, error_, sizeof error_), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(table().create(&host_api_, &model_, "{}", nullptr, error_, sizeof error_), SPECPIPE_ERR_INVALID_ARGUMENT);
  specpipe_host_api no_write = host_api_;
  no_write.write_slots = nullptr;
  EXPECT_EQ(table().create(&no_write, &model_, "{}", &instance_, error_, sizeof error_), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error_).find("write_slots"), std::string::npos) << error_;
  specpipe_model_desc bad = model_;
  bad.kv_dim = 0;
  EXPECT_EQ(table().create(&host_api_, &bad, "{}", &instance_, error_, sizeof error_), SPECPIPE_ERR_INVALID_ARGUMENT);
  bad = model_;
  bad.kv_dim = kKvDim + 1;  // != num_kv_heads * head_dim
  EXPECT_EQ(table().create(&host_api_, &bad, "{}", &instance_, error_, sizeof error_), SPECPIPE_ERR_INVALID_ARGUMENT);
  bad = model_;
  bad.max_batch = 0;  // no default for max_rows ...
  EXPECT_EQ(table().create(&host_api_, &bad, "{}", &instance_, error_, sizeof error_), SPECPIPE_ERR_CONFIG);
  EXPECT_EQ(table().create(&host_api_, &bad, R"({"max_rows": 8})", &instance_, error_, sizeof error_), SPECPIPE_OK)
      << "... unless the config gives one: " << error_;
  table().destroy(instance_);
  instance_ = nullptr;
  host_.fail_alloc = true;
  EXPECT_EQ(try_create("{}"), SPECPIPE_ERR_CAPACITY);
  EXPECT_NE(std::string(error_).find("allocate"), std::string::npos) << error_;
  EXPECT_EQ(instance_, nullptr);
}

TEST_F(NworPluginArgsTest, MalformedWindowsAreRefusedAndChangeNothing) {
  create();
  std::mt19937 rng(31);
  Round good = Round::make({2, 2}, rng);
  char* e = error_;
  const size_t es = sizeof error_;
  EXPECT_EQ(hooks().begin(instance_, nullptr, 2, e, es), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hooks().begin(instance_, good.windows.data(), -1, e, es), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hooks().begin(instance_, good.windows.data(), 0, e, es), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hooks().begin(nullptr, good.windows.data(), 2, e, es), SPECPIPE_ERR_INVALID_ARGUMENT);
  const std::vector<std::function<void(std::vector<specpipe_window>&)>> breakers = {
      [](auto& w) { w[1].n = 0; },
      [](auto& w) { w[0].n = -3; },
      [](auto& w) { w[1].slots = nullptr; },
      [](auto& w) { w[1].sequence = w[0].sequence; },
  };
  for (size_t i = 0; i < breakers.size(); ++i) {
    std::vector<specpipe_window> windows = good.windows;
    breakers[i](windows);
    error_[0] = '\0';
    EXPECT_EQ(hooks().begin(instance_, windows.data(), 2, e, es), SPECPIPE_ERR_INVALID_ARGUMENT) << "case " << i;
    EXPECT_NE(error_[0], '\0') << "case " << i;
  }
  std::vector<int64_t> negative{3, -1};
  std::vector<int64_t> shared{5, 9};
  std::vector<int64_t> shared_with_other{9, 6};
  std::vector<specpipe_window> windows = {{1, 2, negative.data()}};
  EXPECT_EQ(hooks().begin(instance_, windows.data(), 1, e, es), SPECPIPE_ERR_INVALID_ARGUMENT);
  windows = {{1, 2, shared.data()}, {2, 2, shared_with_other.data()}};
  EXPECT_EQ(hooks().begin(instance_, windows.data(), 2, e, es), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error_).find("slot 9"), std::string::npos) << error_;
  // None of these started a round.
  ASSERT_EQ(begin(good), SPECPIPE_OK) << error_;
  EXPECT_EQ(metrics()["rounds_staged"], 1);
  EXPECT_EQ(host_.write_calls, 0);
}

TEST_F(NworPluginArgsTest, MalformedLayerRowsAreRefusedAndDropTheRound) {
  create();
  std::mt19937 rng(37);
  Round r = Round::make({2, 1}, rng);
  EXPECT_EQ(stage(r, 0), SPECPIPE_ERR_INVALID_ARGUMENT) << "no round begun";
  EXPECT_EQ(hooks().stage(nullptr, nullptr, nullptr, error_, sizeof error_), SPECPIPE_ERR_INVALID_ARGUMENT);

  int64_t k_shape[2], v_shape[2];
  std::vector<float> big(64 * kKvDim);
  const std::vector<std::function<specpipe_layer_rows(DLTensor&, DLTensor&)>> breakers = {
      [](DLTensor& k, DLTensor& v) { return specpipe_layer_rows{-1, &k, &v}; },
      [](DLTensor& k, DLTensor& v) { return specpipe_layer_rows{kLayers, &k, &v}; },
      [](DLTensor&, DLTensor& v) { return specpipe_layer_rows{0, nullptr, &v}; },
      [](DLTensor& k, DLTensor&) { return specpipe_layer_rows{0, &k, nullptr}; },
      [](DLTensor& k, DLTensor& v) { k.shape[0] = 2; return specpipe_layer_rows{0, &k, &v}; },
      [](DLTensor& k, DLTensor& v) { v.shape[1] = kKvDim - 1; return specpipe_layer_rows{0, &k, &v}; },
      [](DLTensor& k, DLTensor& v) { k.dtype.bits = 16; return specpipe_layer_rows{0, &k, &v}; },
      [](DLTensor& k, DLTensor& v) { k.dtype.code = kDLInt; return specpipe_layer_rows{0, &k, &v}; },
      [](DLTensor& k, DLTensor& v) { k.ndim = 3; return specpipe_layer_rows{0, &k, &v}; },
      [](DLTensor& k, DLTensor& v) { k.shape = nullptr; return specpipe_layer_rows{0, &k, &v}; },
      [](DLTensor& k, DLTensor& v) { v.data = nullptr; return specpipe_layer_rows{0, &k, &v}; },
      [](DLTensor& k, DLTensor& v) { k.device = DLDevice{kDLCUDA, 0}; return specpipe_layer_rows{0, &k, &v}; },
      [](DLTensor& k, DLTensor& v) {
        static int64_t strides[2] = {1, kKvDim};  // column-major
        k.strides = strides;
        return specpipe_layer_rows{0, &k, &v};
      },
  };
  for (size_t i = 0; i < breakers.size(); ++i) {
    ASSERT_EQ(begin(r), SPECPIPE_OK) << "case " << i << ": " << error_;
    DLTensor k = rows_tensor(r.k[0], r.total_rows, k_shape);
    DLTensor v = rows_tensor(r.v[0], r.total_rows, v_shape);
    const specpipe_layer_rows rows = breakers[i](k, v);
    error_[0] = '\0';
    EXPECT_EQ(hooks().stage(instance_, &rows, nullptr, error_, sizeof error_), SPECPIPE_ERR_INVALID_ARGUMENT)
        << "case " << i;
    EXPECT_NE(error_[0], '\0') << "case " << i;
  }
  // Staging a layer twice in one round.
  ASSERT_EQ(begin(r), SPECPIPE_OK) << error_;
  ASSERT_EQ(stage(r, 1), SPECPIPE_OK) << error_;
  EXPECT_EQ(stage(r, 1), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error_).find("already staged"), std::string::npos) << error_;
  EXPECT_EQ(metrics()["fallbacks"]["stage_failed"], static_cast<int64_t>(breakers.size()) + 1);
  EXPECT_EQ(host_.write_calls, 0);
}

TEST_F(NworPluginArgsTest, MalformedVerdictsAreRefusedBeforeAnyWrite) {
  create();
  std::mt19937 rng(41);
  Round r = Round::make({3, 2}, rng);
  EXPECT_EQ(commit(verdicts(r, {1, 1})), SPECPIPE_ERR_INVALID_ARGUMENT) << "no round begun";
  const int64_t unknown = r.sequences[0] + r.sequences[1];
  const std::vector<std::pair<const char*, std::function<specpipe_status(std::vector<specpipe_window_verdict>&)>>>
      cases = {
          {"NULL verdicts", [&](auto&) { return hooks().commit(instance_, nullptr, 2, nullptr, error_, sizeof error_); }},
          {"negative count", [&](auto& v) { return hooks().commit(instance_, v.data(), -1, nullptr, error_, sizeof error_); }},
          {"one verdict missing", [&](auto& v) { return hooks().commit(instance_, v.data(), 1, nullptr, error_, sizeof error_); }},
          {"accepted 0", [&](auto& v) { v[0].accepted = 0; return commit(v); }},
          {"accepted > n", [&](auto& v) { v[1].accepted = 3; return commit(v); }},
          {"negative accepted", [&](auto& v) { v[1].accepted = -2; return commit(v); }},
          {"unknown sequence", [&](auto& v) { v[1].sequence = unknown; return commit(v); }},
          {"two verdicts, one sequence", [&](auto& v) { v[1].sequence = v[0].sequence; return commit(v); }},
          {"NULL instance", [&](auto& v) { return hooks().commit(nullptr, v.data(), 2, nullptr, error_, sizeof error_); }},
      };
  for (const auto& [name, call] : cases) {
    ASSERT_EQ(begin(r), SPECPIPE_OK) << name << ": " << error_;
    stage_all(r);
    std::vector<specpipe_window_verdict> v = verdicts(r, {3, 2});
    error_[0] = '\0';
    EXPECT_EQ(call(v), SPECPIPE_ERR_INVALID_ARGUMENT) << name;
    EXPECT_NE(error_[0], '\0') << name;
    hooks().abort(instance_);  // after a NULL instance the round is still staged
  }
  EXPECT_NE(std::string(error_).find("NULL"), std::string::npos) << error_;
  // Committing before every layer was staged.
  ASSERT_EQ(begin(r), SPECPIPE_OK);
  ASSERT_EQ(stage(r, 0), SPECPIPE_OK);
  ASSERT_EQ(stage(r, 1), SPECPIPE_OK);
  EXPECT_EQ(commit(verdicts(r, {1, 1})), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error_).find("layer 2"), std::string::npos) << error_;
  EXPECT_EQ(host_.write_calls, 0);
  EXPECT_EQ(metrics()["fallbacks"]["commit_failed"], static_cast<int64_t>(cases.size()));
}

TEST_F(NworPluginArgsTest, ErrorBuffersAreOptionalAndAlwaysTerminated) {
  create();
  EXPECT_EQ(hooks().begin(instance_, nullptr, 1, nullptr, 0), SPECPIPE_ERR_INVALID_ARGUMENT);
  char tiny[8];
  std::memset(tiny, 'x', sizeof tiny);
  EXPECT_EQ(hooks().begin(instance_, nullptr, 1, tiny, sizeof tiny), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::strlen(tiny), sizeof tiny - 1);
  EXPECT_EQ(std::string(tiny), "nwor: b");
}

}  // namespace
}  // namespace nwor_test
