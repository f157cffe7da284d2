// specpipe/plugin.hpp, the C++ helpers for plugin authors, compiled as C++17: the table
// it builds from a class, the exception-to-status trampolines, the error and metrics
// buffer writers, TensorView's checks and the HostApi wrappers. Also: plugin.h's struct
// layout is the same for the C and the C++ compiler (abi_layout.h).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "abi_layout.h"
#include "test_model_desc.h"
#include "specpipe/plugin.hpp"

namespace sdk = specpipe::sdk;

namespace {

// ---- a fake host ------------------------------------------------------------------------

struct FakeHost {
  std::vector<std::pair<int32_t, std::string>> logs;
  int allocs = 0, frees = 0;
  bool alloc_fails = false;
  int64_t rows_written = 0;
  specpipe_host_api api{};

  FakeHost() {
    api.abi_version = SPECPIPE_PLUGIN_ABI_VERSION;
    api.struct_size = sizeof(specpipe_host_api);
    api.host = this;
    api.write_slots = [](void* h, int32_t, const DLTensor* k, const DLTensor*, const int64_t*, int64_t n,
                         specpipe_stream) -> specpipe_status {
      if (!k) return SPECPIPE_ERR_INVALID_ARGUMENT;
      static_cast<FakeHost*>(h)->rows_written += n;
      return SPECPIPE_OK;
    };
    api.alloc_device = [](void* h, size_t bytes) -> void* {
      auto* self = static_cast<FakeHost*>(h);
      if (self->alloc_fails) return nullptr;
      ++self->allocs;
      return ::operator new(bytes);
    };
    api.free_device = [](void* h, void* p) {
      ++static_cast<FakeHost*>(h)->frees;
      ::operator delete(p);
    };
    api.copy = [](void*, void* dst, const void* src, size_t bytes, specpipe_stream) -> specpipe_status {
      std::memcpy(dst, src, bytes);
      return SPECPIPE_OK;
    };
    api.log = [](void* h, int32_t level, const char* message) {
      static_cast<FakeHost*>(h)->logs.emplace_back(level, message);
    };
  }
};

// ---- plugin classes -------------------------------------------------------------------

/// verify_plan with every optional hook; its config string picks a failure.
class Planner {
 public:
  static constexpr const char* plugin_name = "planner";
  static constexpr const char* plugin_version = "2.0";
  Planner(const sdk::HostApi& host, const specpipe_model_desc& model, std::string_view config)
      : host_(host), mode_(config) {
    if (mode_ == "refuse") throw sdk::Error(SPECPIPE_ERR_CONFIG, "gamma must be an integer");
    if (mode_ == "runtime_error") throw std::runtime_error("boom");
    if (mode_ == "bad_alloc") throw std::bad_alloc();
    gamma_ = model.max_gamma / 2;
  }
  specpipe_status plan(sdk::Span<const specpipe_plan_sequence> s, const specpipe_plan_costs&, sdk::Span<int32_t> g) {
    if (mode_ == "decline") throw sdk::Error(SPECPIPE_DECLINED, "not this round");
    if (mode_ == "throw_int") throw 42;
    if (mode_ == "status") return SPECPIPE_DECLINED;
    for (size_t i = 0; i < s.size(); ++i) g[i] = std::min(gamma_, s[i].max_gamma);
    ++calls_;
    return SPECPIPE_OK;
  }
  void observe(sdk::Span<const specpipe_plan_observation> o) {
    if (mode_ == "observe_throws") throw std::runtime_error("cannot observe");
    observed_ += static_cast<int64_t>(o.size());
  }
  std::string metrics() const {
    return "{\"calls\": " + std::to_string(calls_) + ", \"observed\": " + std::to_string(observed_) + "}";
  }

 private:
  sdk::HostApi host_;
  std::string mode_;
  int32_t gamma_ = 0;
  int64_t calls_ = 0, observed_ = 0;
};

/// kv_write: checks its rows with TensorView and writes them at commit through the host.
class Writer {
 public:
  static constexpr const char* plugin_name = "writer";
  static constexpr const char* plugin_version = "0.1";
  Writer(const sdk::HostApi& host, const specpipe_model_desc& model, std::string_view)
      : host_(host), kv_dim_(model.kv_dim), buffer_(host.alloc(64)) {}
  specpipe_status begin(sdk::Span<const specpipe_window> windows) {
    return windows.size() > 2 ? SPECPIPE_DECLINED : SPECPIPE_OK;
  }
  void stage(const specpipe_layer_rows& rows, specpipe_stream) {
    const auto k = sdk::TensorView<const float>::check(rows.k, "k", 2);
    if (k.shape(1) != kv_dim_) throw sdk::Error(SPECPIPE_ERR_INVALID_ARGUMENT, "k: wrong row width");
    staged_ = rows;
  }
  void commit(sdk::Span<const specpipe_window_verdict> verdicts, specpipe_stream stream) {
    const int64_t slots[1] = {0};
    for (size_t i = 0; i < verdicts.size(); ++i)
      sdk::check(host_.write_slots(staged_.layer, *staged_.k, *staged_.v, sdk::Span<const int64_t>(slots, 1), stream),
                 "write_slots");
  }
  void abort() { throw std::runtime_error("abort must not fail, but this one does"); }

 private:
  sdk::HostApi host_;
  int32_t kv_dim_;
  sdk::DeviceBuffer buffer_;
  specpipe_layer_rows staged_{};
};

/// Both slots, no metrics.
class Both {
 public:
  static constexpr const char* plugin_name = "both";
  static constexpr const char* plugin_version = "0";
  Both(const sdk::HostApi&, const specpipe_model_desc&, std::string_view) {}
  void plan(sdk::Span<const specpipe_plan_sequence>, const specpipe_plan_costs&, sdk::Span<int32_t> g) {
    for (int32_t& x : g) x = 0;
  }
  void begin(sdk::Span<const specpipe_window>) {}
  void stage(const specpipe_layer_rows&, specpipe_stream) {}
  void commit(sdk::Span<const specpipe_window_verdict>, specpipe_stream) {}
  void abort() noexcept {}
};

const specpipe_plugin_table& table_of_planner() { return *sdk::plugin_table<Planner>(SPECPIPE_PLUGIN_ABI_VERSION); }

struct Created {
  specpipe_status status;
  void* instance;
  std::string error;
};

template <class T>
Created create(FakeHost& host, const char* config, const specpipe_model_desc& model = sdk_test_model_desc()) {
  const specpipe_plugin_table* t = sdk::plugin_table<T>(SPECPIPE_PLUGIN_ABI_VERSION);
  char error[256] = "untouched";
  void* instance = reinterpret_cast<void*>(0x1);
  const specpipe_status s = t->create(&host.api, &model, config, &instance, error, sizeof error);
  return {s, instance, s == SPECPIPE_OK ? std::string() : std::string(error)};
}

// ---- tests ----------------------------------------------------------------------------

TEST(PluginHppTest, WriteErrorTruncatesAndTerminates) {
  char buf[8];
  sdk::write_error(buf, sizeof buf, {"abc", "defgh", "ijk"});
  EXPECT_STREQ(buf, "abcdefg");
  sdk::write_error(buf, sizeof buf, "xy");
  EXPECT_STREQ(buf, "xy");
  sdk::write_error(nullptr, 10, "ignored");  // no buffer: nothing happens
  buf[0] = 'z';
  sdk::write_error(buf, 0, "ignored");
  EXPECT_EQ(buf[0], 'z');
  char one[1] = {'q'};
  sdk::write_error(one, 1, "anything");
  EXPECT_EQ(one[0], '\0');
}

TEST(PluginHppTest, WriteMetricsFollowsSnprintf) {
  char buf[6];
  EXPECT_EQ(sdk::write_metrics(buf, sizeof buf, "{\"a\":1}"), 7u);  // >= size: truncated
  EXPECT_STREQ(buf, "{\"a\":");
  EXPECT_EQ(sdk::write_metrics(buf, sizeof buf, "{}"), 2u);
  EXPECT_STREQ(buf, "{}");
  EXPECT_EQ(sdk::write_metrics(nullptr, 0, "{}"), 2u);
}

TEST(PluginHppTest, TableFromVerifyPlanClass) {
  EXPECT_EQ(sdk::plugin_table<Planner>(SPECPIPE_PLUGIN_ABI_VERSION + 1), nullptr);
  const specpipe_plugin_table& t = table_of_planner();
  EXPECT_EQ(t.abi_version, SPECPIPE_PLUGIN_ABI_VERSION);
  EXPECT_EQ(t.struct_size, sizeof(specpipe_plugin_table));
  EXPECT_STREQ(t.name, "planner");
  EXPECT_STREQ(t.version, "2.0");
  EXPECT_STREQ(t.slots, "verify_plan");
  EXPECT_NE(t.create, nullptr);
  EXPECT_NE(t.destroy, nullptr);
  EXPECT_NE(t.describe_metrics, nullptr);
  EXPECT_EQ(t.kv_write, nullptr);
  ASSERT_NE(t.verify_plan, nullptr);
  EXPECT_NE(t.verify_plan->plan, nullptr);
  EXPECT_NE(t.verify_plan->observe, nullptr);
  EXPECT_EQ(t.verify_plan->forget, nullptr);  // Planner has no forget(): optional hook left NULL
}

TEST(PluginHppTest, TableFromKvWriteAndBothSlotClasses) {
  const specpipe_plugin_table* w = sdk::plugin_table<Writer>(SPECPIPE_PLUGIN_ABI_VERSION);
  EXPECT_STREQ(w->slots, "kv_write");
  EXPECT_EQ(w->verify_plan, nullptr);
  ASSERT_NE(w->kv_write, nullptr);
  EXPECT_TRUE(w->kv_write->begin && w->kv_write->stage && w->kv_write->commit && w->kv_write->abort);
  const specpipe_plugin_table* b = sdk::plugin_table<Both>(SPECPIPE_PLUGIN_ABI_VERSION);
  EXPECT_STREQ(b->slots, "kv_write,verify_plan");
  EXPECT_NE(b->kv_write, nullptr);
  EXPECT_NE(b->verify_plan, nullptr);
  EXPECT_EQ(b->describe_metrics, nullptr);  // no metrics(): optional hook left NULL
}

TEST(PluginHppTest, CreateMapsExceptionsToStatuses) {
  FakeHost host;
  Created c = create<Planner>(host, "refuse");
  EXPECT_EQ(c.status, SPECPIPE_ERR_CONFIG);
  EXPECT_EQ(c.instance, nullptr);
  EXPECT_EQ(c.error, "planner: gamma must be an integer");
  c = create<Planner>(host, "runtime_error");
  EXPECT_EQ(c.status, SPECPIPE_ERR_INTERNAL);
  EXPECT_EQ(c.error, "planner: internal error: boom");
  c = create<Planner>(host, "bad_alloc");
  EXPECT_EQ(c.status, SPECPIPE_ERR_CAPACITY);
  EXPECT_EQ(c.error, "planner: out of memory");

  const specpipe_plugin_table& t = table_of_planner();
  const specpipe_model_desc m = sdk_test_model_desc();
  char error[128] = {};
  void* instance = nullptr;
  EXPECT_EQ(t.create(nullptr, &m, "{}", &instance, error, sizeof error), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(instance, nullptr);
  specpipe_host_api old = host.api;
  old.abi_version = SPECPIPE_PLUGIN_ABI_VERSION + 1;
  EXPECT_EQ(t.create(&old, &m, "{}", &instance, error, sizeof error), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(t.create(&host.api, &m, "{}", nullptr, nullptr, 0), SPECPIPE_ERR_INVALID_ARGUMENT);  // no buffer: fine
}

TEST(PluginHppTest, PlanHooksThroughTheTable) {
  FakeHost host;
  const specpipe_plugin_table& t = table_of_planner();
  const specpipe_plan_sequence seqs[2] = {{1, 4, 6, 10}, {2, 4, 1, 10}};
  const specpipe_plan_costs costs{sizeof(specpipe_plan_costs), 0, 0, 0, 0, 0, nullptr, 0};
  int32_t gamma[2] = {-1, -1};
  char error[128] = {};

  Created ok = create<Planner>(host, "ok");
  ASSERT_EQ(ok.status, SPECPIPE_OK) << ok.error;
  EXPECT_EQ(t.verify_plan->plan(ok.instance, seqs, 2, &costs, gamma, error, sizeof error), SPECPIPE_OK);
  EXPECT_EQ(gamma[0], 4);  // max_gamma 8 / 2
  EXPECT_EQ(gamma[1], 1);
  EXPECT_EQ(t.verify_plan->plan(ok.instance, seqs, -1, &costs, gamma, error, sizeof error),
            SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(error, "planner: sequences: count -1 < 0");
  EXPECT_EQ(t.verify_plan->plan(ok.instance, nullptr, 2, &costs, gamma, error, sizeof error),
            SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(t.verify_plan->plan(ok.instance, seqs, 2, nullptr, gamma, error, sizeof error),
            SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(t.verify_plan->plan(nullptr, seqs, 2, &costs, gamma, error, sizeof error), SPECPIPE_ERR_INVALID_ARGUMENT);
  const specpipe_plan_observation obs[3] = {{1, 4, 2}, {2, 1, 1}, {3, 0, 0}};
  t.verify_plan->observe(ok.instance, obs, 3);
  char metrics[64];
  const size_t need = t.describe_metrics(ok.instance, metrics, sizeof metrics);
  EXPECT_EQ(need, std::strlen(metrics));
  EXPECT_STREQ(metrics, "{\"calls\": 1, \"observed\": 3}");
  t.destroy(ok.instance);

  Created declines = create<Planner>(host, "decline");
  EXPECT_EQ(t.verify_plan->plan(declines.instance, seqs, 2, &costs, gamma, error, sizeof error), SPECPIPE_DECLINED);
  EXPECT_STREQ(error, "planner: not this round");
  t.destroy(declines.instance);
  Created status = create<Planner>(host, "status");
  EXPECT_EQ(t.verify_plan->plan(status.instance, seqs, 2, &costs, gamma, nullptr, 0), SPECPIPE_DECLINED);
  t.destroy(status.instance);
  Created throws = create<Planner>(host, "throw_int");
  EXPECT_EQ(t.verify_plan->plan(throws.instance, seqs, 2, &costs, gamma, error, sizeof error), SPECPIPE_ERR_INTERNAL);
  EXPECT_STREQ(error, "planner: internal error (unknown exception)");
  t.destroy(throws.instance);

  // observe() has no status: a throw is logged through the host as a warning.
  Created observer = create<Planner>(host, "observe_throws");
  host.logs.clear();
  t.verify_plan->observe(observer.instance, obs, 3);
  ASSERT_EQ(host.logs.size(), 1u);
  EXPECT_EQ(host.logs[0].first, 2);
  EXPECT_EQ(host.logs[0].second, "observe: internal error: cannot observe");
  t.destroy(observer.instance);
}

TEST(PluginHppTest, KvWriteHooksTensorChecksAndHostServices) {
  FakeHost host;
  const specpipe_plugin_table& t = *sdk::plugin_table<Writer>(SPECPIPE_PLUGIN_ABI_VERSION);
  Created c = create<Writer>(host, "{}");
  ASSERT_EQ(c.status, SPECPIPE_OK) << c.error;
  EXPECT_EQ(host.allocs, 1);  // the instance's DeviceBuffer
  char error[256] = {};
  const int64_t slots[2] = {3, 4};
  const specpipe_window windows[3] = {{1, 2, slots}, {2, 2, slots}, {3, 2, slots}};
  EXPECT_EQ(t.kv_write->begin(c.instance, windows, 2, error, sizeof error), SPECPIPE_OK);
  EXPECT_EQ(t.kv_write->begin(c.instance, windows, 3, error, sizeof error), SPECPIPE_DECLINED);

  float rows[2 * 4] = {};
  int64_t shape[2] = {2, 4};
  DLTensor k{};
  k.data = rows;
  k.device = {kDLCPU, 0};
  k.ndim = 2;
  k.dtype = sdk::dtype_of<float>();
  k.shape = shape;
  const specpipe_layer_rows layer{1, &k, &k};
  EXPECT_EQ(t.kv_write->stage(c.instance, &layer, nullptr, error, sizeof error), SPECPIPE_OK) << error;
  const specpipe_window_verdict verdicts[2] = {{1, 1}, {2, 2}};
  EXPECT_EQ(t.kv_write->commit(c.instance, verdicts, 2, nullptr, error, sizeof error), SPECPIPE_OK) << error;
  EXPECT_EQ(host.rows_written, 2);

  DLTensor wrong = k;
  wrong.dtype = sdk::dtype_of<double>();
  const specpipe_layer_rows bad_dtype{1, &wrong, &wrong};
  EXPECT_EQ(t.kv_write->stage(c.instance, &bad_dtype, nullptr, error, sizeof error), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error).find("writer: k: dtype"), std::string::npos) << error;
  int64_t strides[2] = {1, 2};  // column-major: not dense row-major
  wrong = k;
  wrong.strides = strides;
  const specpipe_layer_rows bad_strides{1, &wrong, &wrong};
  EXPECT_EQ(t.kv_write->stage(c.instance, &bad_strides, nullptr, error, sizeof error), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error).find("not dense row-major"), std::string::npos) << error;
  int64_t compact[2] = {4, 1};  // explicit compact strides are fine
  wrong.strides = compact;
  EXPECT_EQ(t.kv_write->stage(c.instance, &bad_strides, nullptr, error, sizeof error), SPECPIPE_OK) << error;
  EXPECT_EQ(t.kv_write->stage(c.instance, nullptr, nullptr, error, sizeof error), SPECPIPE_ERR_INVALID_ARGUMENT);

  t.kv_write->abort(c.instance);  // Writer::abort throws; the trampoline swallows it
  t.destroy(c.instance);
  EXPECT_EQ(host.frees, 1);  // the DeviceBuffer went back to the host

  host.alloc_fails = true;
  Created no_memory = create<Writer>(host, "{}");
  EXPECT_EQ(no_memory.status, SPECPIPE_ERR_CAPACITY);
  EXPECT_EQ(no_memory.error, "writer: alloc_device(64 bytes) failed");
}

TEST(PluginHppTest, TensorViewAccessors) {
  int32_t values[6] = {0, 1, 2, 3, 4, 5};
  int64_t shape[2] = {2, 2};
  DLTensor t{};
  t.data = values;
  t.byte_offset = 2 * sizeof(int32_t);
  t.device = {kDLCPU, 0};
  t.ndim = 2;
  t.dtype = sdk::dtype_of<int32_t>();
  t.shape = shape;
  const auto view = sdk::TensorView<const int32_t>::check(&t, "t", 2);
  EXPECT_EQ(view.numel(), 4);
  EXPECT_EQ(view.data()[0], 2);
  EXPECT_EQ(view.row(1)[1], 5);
  EXPECT_THROW(sdk::TensorView<const int32_t>::check(&t, "t", 3), sdk::Error);
  EXPECT_THROW(sdk::TensorView<const uint32_t>::check(&t, "t"), sdk::Error);
  EXPECT_THROW(sdk::TensorView<const int32_t>::check(nullptr, "t"), sdk::Error);
  t.data = nullptr;
  EXPECT_THROW(sdk::TensorView<const int32_t>::check(&t, "t"), sdk::Error);
  shape[0] = 0;  // empty: no data needed
  EXPECT_EQ(sdk::TensorView<const int32_t>::check(&t, "t").numel(), 0);
}

TEST(PluginHppTest, HostApiForwardsAndChecks) {
  FakeHost host;
  const sdk::HostApi api(&host.api);
  {
    sdk::DeviceBuffer a = api.alloc(16);
    EXPECT_TRUE(a);
    EXPECT_EQ(a.size(), 16u);
    sdk::DeviceBuffer b = std::move(a);
    EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
    char src[16] = "0123456789abcde";
    EXPECT_EQ(api.copy(b.get(), src, sizeof src, nullptr), SPECPIPE_OK);
    EXPECT_EQ(std::memcmp(b.get(), src, sizeof src), 0);
  }
  EXPECT_EQ(host.allocs, 1);
  EXPECT_EQ(host.frees, 1);
  api.log(sdk::HostApi::Level::error, "hello");
  ASSERT_EQ(host.logs.size(), 1u);
  EXPECT_EQ(host.logs[0].first, 3);
  EXPECT_EQ(host.logs[0].second, "hello");
  EXPECT_NO_THROW(sdk::check(SPECPIPE_OK, "fine"));
  try {
    sdk::check(SPECPIPE_ERR_CAPACITY, "write_slots");
    FAIL() << "check() must throw";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.status(), SPECPIPE_ERR_CAPACITY);
    EXPECT_STREQ(e.what(), "write_slots: status -3");
  }
  EXPECT_EQ(sdk::Error(SPECPIPE_OK, "contradiction").status(), SPECPIPE_ERR_INTERNAL);
  const sdk::HostApi none(nullptr);
  EXPECT_EQ(none.copy(nullptr, nullptr, 0, nullptr), SPECPIPE_ERR_INVALID_ARGUMENT);
  none.log(sdk::HostApi::Level::info, "dropped");  // no host: nothing happens
}

TEST(PluginHppTest, CAndCxxSeeTheSameStructLayout) {
  std::vector<size_t> cxx;
  std::vector<std::string> names;
#define SPECPIPE_SDK_S(type)  \
  cxx.push_back(sizeof(type)); \
  names.push_back("sizeof(" #type ")");
#define SPECPIPE_SDK_F(type, field)      \
  cxx.push_back(offsetof(type, field)); \
  names.push_back("offsetof(" #type ", " #field ")");
  SPECPIPE_SDK_ABI_LAYOUT(SPECPIPE_SDK_S, SPECPIPE_SDK_F)
#undef SPECPIPE_SDK_S
#undef SPECPIPE_SDK_F
  std::vector<size_t> c(cxx.size() + 1);
  ASSERT_EQ(specpipe_sdk_c_layout(c.data(), c.size()), cxx.size());
  for (size_t i = 0; i < cxx.size(); ++i) EXPECT_EQ(c[i], cxx[i]) << names[i];
}

}  // namespace
