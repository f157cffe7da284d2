#pragma once
/// Test support for the NWOR plugin: a host whose "pool" is a plain std::vector per layer
/// ([slots, kv_dim] for K and for V) and which records every write_slots call, plus a
/// fixture that loads the real libspecpipe_nwor.so through specpipe::PluginLibrary.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "pipeline/plugin_library.h"
#include "specpipe/plugin.h"

namespace nwor_test {

constexpr int32_t kLayers = 4;
constexpr int32_t kKvHeads = 2;
constexpr int32_t kHeadDim = 4;
constexpr int32_t kKvDim = kKvHeads * kHeadDim;
constexpr int32_t kMaxGamma = 4;
constexpr int32_t kMaxBatch = 3;
constexpr int64_t kDefaultRows = (kMaxGamma + 2) * kMaxBatch;  ///< the longest window, max_gamma + 2, per sequence
constexpr int64_t kPoolSlots = 128;
constexpr int64_t kRowBytesKv = kKvDim * 4 * 2;  ///< one token's K + V bytes in one layer

/// The host side of the ABI, in plain CPU memory.
class TestHost {
 public:
  struct Write {
    int32_t layer;
    std::vector<int64_t> slots;
  };

  TestHost() : k_pool(kLayers, std::vector<float>(kPoolSlots * kKvDim)), v_pool(k_pool) {
    // A pattern no staged row equals: an unwritten slot is recognisable bitwise.
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-100.f, -50.f);
    for (auto& layer : k_pool)
      for (float& x : layer) x = dist(rng);
    for (auto& layer : v_pool)
      for (float& x : layer) x = dist(rng);
  }

  specpipe_host_api api() {
    specpipe_host_api a{};
    a.abi_version = SPECPIPE_PLUGIN_ABI_VERSION;
    a.struct_size = sizeof(specpipe_host_api);
    a.host = this;
    a.write_slots = &write_slots;
    a.alloc_device = &alloc_device;
    a.free_device = &free_device;
    a.copy = &copy;
    a.log = &log;
    return a;
  }

  const float* k_row(int32_t layer, int64_t slot) const { return k_pool[layer].data() + slot * kKvDim; }
  const float* v_row(int32_t layer, int64_t slot) const { return v_pool[layer].data() + slot * kKvDim; }

  std::vector<std::vector<float>> k_pool, v_pool;  ///< [layer][slot * kKvDim + i]
  std::vector<Write> writes;                       ///< every successful write_slots call
  int write_calls = 0;                             ///< every write_slots call, failed ones too
  int fail_write_at = 0;                           ///< the 1-based call that fails; 0 = none
  specpipe_status fail_write_status = SPECPIPE_ERR_CAPACITY;
  int copy_calls = 0;
  int fail_copy_at = 0;  ///< the 1-based copy() call that fails; 0 = none
  bool fail_alloc = false;
  int allocations = 0;
  int live_allocations = 0;
  std::vector<std::string> logs;

 private:
  static TestHost& self(void* host) { return *static_cast<TestHost*>(host); }

  static void check_rows(const DLTensor* t, int64_t n) {
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->ndim, 2);
    EXPECT_EQ(t->shape[0], n);
    EXPECT_EQ(t->shape[1], kKvDim);
    EXPECT_EQ(t->dtype.code, kDLFloat);
    EXPECT_EQ(t->dtype.bits, 32);
    EXPECT_EQ(t->strides, nullptr);
  }

  static specpipe_status write_slots(void* host, int32_t layer, const DLTensor* k, const DLTensor* v,
                                     const int64_t* slots, int64_t n, specpipe_stream /*stream*/) {
    TestHost& h = self(host);
    ++h.write_calls;
    if (h.write_calls == h.fail_write_at) return h.fail_write_status;
    // A bad call is a test failure, never a write outside the test's pool.
    if (layer < 0 || layer >= kLayers || !k || !v || !slots || k->ndim != 2 || v->ndim != 2 || k->shape[0] != n ||
        v->shape[0] != n) {
      ADD_FAILURE() << "write_slots: bad arguments for layer " << layer << ", n " << n;
      return SPECPIPE_ERR_INVALID_ARGUMENT;
    }
    check_rows(k, n);
    check_rows(v, n);
    const auto* k_src = reinterpret_cast<const float*>(static_cast<const char*>(k->data) + k->byte_offset);
    const auto* v_src = reinterpret_cast<const float*>(static_cast<const char*>(v->data) + v->byte_offset);
    Write w{layer, {}};
    for (int64_t i = 0; i < n; ++i) {
      if (slots[i] < 0 || slots[i] >= kPoolSlots) {
        ADD_FAILURE() << "write_slots: slot " << slots[i] << " outside the pool";
        return SPECPIPE_ERR_INVALID_ARGUMENT;
      }
      std::memcpy(h.k_pool[layer].data() + slots[i] * kKvDim, k_src + i * kKvDim, kKvDim * sizeof(float));
      std::memcpy(h.v_pool[layer].data() + slots[i] * kKvDim, v_src + i * kKvDim, kKvDim * sizeof(float));
      w.slots.push_back(slots[i]);
    }
    h.writes.push_back(std::move(w));
    return SPECPIPE_OK;
  }

  static void* alloc_device(void* host, size_t bytes) {
    TestHost& h = self(host);
    if (h.fail_alloc) return nullptr;
    ++h.allocations;
    ++h.live_allocations;
    return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  }

  static void free_device(void* host, void* ptr) {
    --self(host).live_allocations;
    std::free(ptr);
  }

  static specpipe_status copy(void* host, void* dst, const void* src, size_t bytes, specpipe_stream /*stream*/) {
    TestHost& h = self(host);
    if (++h.copy_calls == h.fail_copy_at) return SPECPIPE_ERR_INTERNAL;
    std::memcpy(dst, src, bytes);
    return SPECPIPE_OK;
  }

  static void log(void* host, int32_t /*level*/, const char* message) { self(host).logs.emplace_back(message); }
};

/// One round's windows and, per layer, its K and V rows ([total_rows, kKvDim]).
struct Round {
  std::vector<int64_t> sequences;
  std::vector<std::vector<int64_t>> slots;  ///< per window
  std::vector<specpipe_window> windows;
  std::vector<std::vector<float>> k, v;  ///< per layer
  int64_t total_rows = 0;

  /// Windows of the given sizes, distinct slots and sequence ids drawn from `rng`.
  static Round make(const std::vector<int32_t>& sizes, std::mt19937& rng) {
    Round r;
    std::vector<int64_t> free_slots(kPoolSlots);
    for (int64_t s = 0; s < kPoolSlots; ++s) free_slots[s] = s;
    std::shuffle(free_slots.begin(), free_slots.end(), rng);
    size_t next = 0;
    for (size_t w = 0; w < sizes.size(); ++w) {
      r.sequences.push_back(1000 + static_cast<int64_t>(w) * 7 + static_cast<int64_t>(rng() % 5));
      r.slots.emplace_back(free_slots.begin() + next, free_slots.begin() + next + sizes[w]);
      next += sizes[w];
      r.total_rows += sizes[w];
    }
    for (size_t w = 0; w < sizes.size(); ++w)
      r.windows.push_back({r.sequences[w], sizes[w], r.slots[w].data()});
    std::normal_distribution<float> dist(0.f, 1.f);
    r.k.assign(kLayers, std::vector<float>(r.total_rows * kKvDim));
    r.v.assign(kLayers, std::vector<float>(r.total_rows * kKvDim));
    for (int32_t l = 0; l < kLayers; ++l)
      for (int64_t i = 0; i < r.total_rows * kKvDim; ++i) {
        r.k[l][i] = dist(rng);
        r.v[l][i] = dist(rng);
      }
    return r;
  }

  int32_t count() const { return static_cast<int32_t>(windows.size()); }
  int64_t first_row(size_t window) const {
    int64_t row = 0;
    for (size_t w = 0; w < window; ++w) row += windows[w].n;
    return row;
  }
  const float* k_row(int32_t layer, int64_t row) const { return k[layer].data() + row * kKvDim; }
  const float* v_row(int32_t layer, int64_t row) const { return v[layer].data() + row * kKvDim; }
};

/// A [rows, kKvDim] float32 CPU tensor over `data` (shape storage supplied by the caller).
inline DLTensor rows_tensor(std::vector<float>& data, int64_t rows, int64_t shape[2]) {
  shape[0] = rows;
  shape[1] = kKvDim;
  DLTensor t{};
  t.data = data.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 2;
  t.dtype = DLDataType{static_cast<uint8_t>(kDLFloat), 32, 1};
  t.shape = shape;
  return t;
}

inline bool same_bits(const float* a, const float* b) { return std::memcmp(a, b, kKvDim * sizeof(float)) == 0; }

inline specpipe_model_desc test_model() {
  specpipe_model_desc m{};
  m.struct_size = sizeof(specpipe_model_desc);
  m.num_layers = kLayers;
  m.num_kv_heads = kKvHeads;
  m.head_dim = kHeadDim;
  m.kv_dim = kKvDim;
  m.block_size = 16;
  m.max_gamma = kMaxGamma;
  m.max_batch = kMaxBatch;
  m.device = DLDevice{kDLCPU, 0};
  return m;
}

/// Loads the real plugin once per test and owns the instance it creates.
class NworFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    library_ = specpipe::PluginLibrary::load(NWOR_PLUGIN_PATH);
    host_api_ = host_.api();
    model_ = test_model();
  }
  void TearDown() override {
    if (instance_) table().destroy(instance_);
    instance_ = nullptr;
    EXPECT_EQ(host_.live_allocations, 0) << "the plugin leaked device memory";
  }

  const specpipe_plugin_table& table() const { return library_->table(); }
  const specpipe_kv_write_hooks& hooks() const { return *library_->table().kv_write; }

  /// create() with `config`; the status, and error_ holds the message.
  specpipe_status try_create(const char* config) {
    if (instance_) table().destroy(instance_);
    instance_ = nullptr;
    error_[0] = '\0';
    return table().create(&host_api_, &model_, config, &instance_, error_, sizeof error_);
  }
  void create(const char* config = "{}") { ASSERT_EQ(try_create(config), SPECPIPE_OK) << error_; }

  specpipe_status begin(const Round& r) {
    error_[0] = '\0';
    return hooks().begin(instance_, r.windows.data(), r.count(), error_, sizeof error_);
  }
  specpipe_status stage(Round& r, int32_t layer) {
    int64_t k_shape[2];
    int64_t v_shape[2];
    const DLTensor k = rows_tensor(r.k[layer], r.total_rows, k_shape);
    const DLTensor v = rows_tensor(r.v[layer], r.total_rows, v_shape);
    const specpipe_layer_rows rows{layer, &k, &v};
    error_[0] = '\0';
    return hooks().stage(instance_, &rows, nullptr, error_, sizeof error_);
  }
  void stage_all(Round& r) {
    for (int32_t l = 0; l < kLayers; ++l) ASSERT_EQ(stage(r, l), SPECPIPE_OK) << error_;
  }
  specpipe_status commit(const std::vector<specpipe_window_verdict>& verdicts) {
    error_[0] = '\0';
    return hooks().commit(instance_, verdicts.data(), static_cast<int32_t>(verdicts.size()), nullptr, error_,
                          sizeof error_);
  }
  /// One verdict per window, in window order.
  static std::vector<specpipe_window_verdict> verdicts(const Round& r, const std::vector<int32_t>& accepted) {
    std::vector<specpipe_window_verdict> out;
    for (size_t w = 0; w < r.windows.size(); ++w) out.push_back({r.sequences[w], accepted[w]});
    return out;
  }

  nlohmann::json metrics() const {
    const size_t length = table().describe_metrics(instance_, nullptr, 0);
    std::string text(length + 1, '\0');
    EXPECT_EQ(table().describe_metrics(instance_, text.data(), text.size()), length);
    EXPECT_EQ(text[length], '\0');
    text.resize(length);
    return nlohmann::json::parse(text);
  }

  /// The pool holds, for every accepted token of every window and every layer, exactly
  /// the staged rows (bitwise).
  void expect_committed(const Round& r, const std::vector<int32_t>& accepted) const {
    for (size_t w = 0; w < r.windows.size(); ++w)
      for (int32_t t = 0; t < accepted[w]; ++t)
        for (int32_t l = 0; l < kLayers; ++l) {
          const int64_t slot = r.slots[w][t];
          const int64_t row = r.first_row(w) + t;
          EXPECT_TRUE(same_bits(host_.k_row(l, slot), r.k_row(l, row))) << "K window " << w << " token " << t << " layer " << l;
          EXPECT_TRUE(same_bits(host_.v_row(l, slot), r.v_row(l, row))) << "V window " << w << " token " << t << " layer " << l;
        }
  }

  TestHost host_;
  specpipe_host_api host_api_{};
  specpipe_model_desc model_{};
  std::shared_ptr<const specpipe::PluginLibrary> library_;
  void* instance_ = nullptr;
  char error_[512] = {};
};

}  // namespace nwor_test
