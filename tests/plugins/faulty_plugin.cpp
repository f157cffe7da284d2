// A deliberately faulty plugin for fault-injection tests. It fills both slots with the
// simplest correct strategies (kv_write: stage rows, write the accepted ones at commit;
// verify_plan: the requested gamma) and fails on demand, chosen by its config:
//   {"fail": "create" | "stage" | "commit" | "stage_throw" | "plan_garbage" |
//            "plan_bad_status" | "view_garbage" | "view_zero_retrieval" |
//            "view_bad_status" | "none", "at_round": N}
// verify_view (ABI 1.1) asks for tiny partial views (exact) whenever it may.
// Built four ways: as is; with FAULT_WRONG_ABI (its table claims ABI 999); with
// FAULT_NO_ENTRY (it exports no entry symbol); with FAULT_LEGACY_TABLE (an ABI 1.0
// table, shorter than this host's).
#include <specpipe/plugin.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Window {
  int64_t sequence;
  int32_t n;
  std::vector<int64_t> slots;
  int64_t first_row;
};

/// Staged rows of one layer in memory of the pool's device (the host's alloc_device):
/// K then V, grown as a round needs.
struct Staged {
  const specpipe_host_api* host = nullptr;
  float* data = nullptr;
  size_t floats = 0;  // per tensor
  Staged() = default;
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  ~Staged() {
    if (data) host->free_device(host->host, data);
  }
  bool reserve(const specpipe_host_api* h, size_t want) {
    if (want <= floats) return true;
    if (data) host->free_device(host->host, data);
    host = h;
    data = static_cast<float*>(h->alloc_device(h->host, 2 * want * sizeof(float)));
    floats = data ? want : 0;
    return data != nullptr;
  }
  float* k() const { return data; }
  float* v() const { return data + floats; }
};

struct Instance {
  const specpipe_host_api* host;
  specpipe_model_desc model;
  std::string fail = "none";
  int at_round = 1;
  int round = 0;
  std::vector<Window> windows;
  std::map<int32_t, Staged> staged;  // layer -> rows
};

void set_error(char* error, size_t size, const char* message) {
  if (error && size) std::snprintf(error, size, "%s", message);
}

bool failing(const Instance* in, const char* what) { return in->fail == what && in->round == in->at_round; }

specpipe_status create(const specpipe_host_api* host, const specpipe_model_desc* model, const char* config,
                       void** instance, char* error, size_t error_size) {
  auto* in = new Instance{};
  in->host = host;
  in->model = *model;
  try {
    const nlohmann::json j = nlohmann::json::parse(config && *config ? config : "{}");
    in->fail = j.value("fail", std::string("none"));
    in->at_round = j.value("at_round", 1);
  } catch (const std::exception& e) {
    delete in;
    set_error(error, error_size, e.what());
    return SPECPIPE_ERR_CONFIG;
  }
  if (in->fail == "create") {
    delete in;
    set_error(error, error_size, "fail: create (as configured)");
    return SPECPIPE_ERR_CONFIG;
  }
  *instance = in;
  return SPECPIPE_OK;
}

void destroy(void* instance) { delete static_cast<Instance*>(instance); }

size_t describe_metrics(void* instance, char* buffer, size_t size) {
  const auto* in = static_cast<Instance*>(instance);
  return static_cast<size_t>(std::snprintf(buffer, size, "{\"rounds\": %d}", in->round));
}

specpipe_status begin(void* instance, const specpipe_window* windows, int32_t count, char*, size_t) {
  auto* in = static_cast<Instance*>(instance);
  ++in->round;
  in->windows.clear();
  int64_t row = 0;
  for (int32_t i = 0; i < count; ++i) {
    in->windows.push_back({windows[i].sequence, windows[i].n, {windows[i].slots, windows[i].slots + windows[i].n}, row});
    row += windows[i].n;
  }
  return SPECPIPE_OK;
}

specpipe_status stage(void* instance, const specpipe_layer_rows* rows, specpipe_stream stream, char* error,
                      size_t size) {
  auto* in = static_cast<Instance*>(instance);
  if (failing(in, "stage") && rows->layer == in->model.num_layers / 2) {
    set_error(error, size, "fail: stage (as configured)");
    return SPECPIPE_ERR_INTERNAL;
  }
  if (failing(in, "stage_throw") && rows->layer == 1) throw std::runtime_error("stage threw (as configured)");
  // The rows may be device memory: staged with the host's allocator and copy.
  const size_t n = static_cast<size_t>(rows->k->shape[0] * rows->k->shape[1]);
  Staged& s = in->staged[rows->layer];
  if (!s.reserve(in->host, n)) {
    set_error(error, size, "stage: alloc_device failed");
    return SPECPIPE_ERR_CAPACITY;
  }
  const specpipe_status k = in->host->copy(in->host->host, s.k(), rows->k->data, n * sizeof(float), stream);
  if (k != SPECPIPE_OK) return k;
  return in->host->copy(in->host->host, s.v(), rows->v->data, n * sizeof(float), stream);
}

specpipe_status commit(void* instance, const specpipe_window_verdict* verdicts, int32_t count, specpipe_stream stream,
                       char* error, size_t size) {
  auto* in = static_cast<Instance*>(instance);
  const int64_t dim = in->model.kv_dim;
  for (int32_t layer = 0; layer < in->model.num_layers; ++layer) {
    // Fails half-way through the layers: the host must not count anything committed.
    if (failing(in, "commit") && layer == in->model.num_layers / 2) {
      set_error(error, size, "fail: commit (as configured)");
      return SPECPIPE_ERR_INTERNAL;
    }
    for (int32_t c = 0; c < count; ++c)
      for (const Window& w : in->windows) {
        if (w.sequence != verdicts[c].sequence) continue;
        int64_t shape[2] = {verdicts[c].accepted, dim};
        DLTensor kt{}, vt{};
        kt.data = in->staged[layer].k() + w.first_row * dim;
        vt.data = in->staged[layer].v() + w.first_row * dim;
        kt.device = vt.device = in->model.device;
        kt.ndim = vt.ndim = 2;
        kt.dtype = vt.dtype = {kDLFloat, 32, 1};
        kt.shape = vt.shape = shape;
        const specpipe_status s =
            in->host->write_slots(in->host->host, layer, &kt, &vt, w.slots.data(), verdicts[c].accepted, stream);
        if (s != SPECPIPE_OK) return s;
      }
  }
  return SPECPIPE_OK;
}

void abort_round(void* instance) { static_cast<Instance*>(instance)->windows.clear(); }

specpipe_status plan(void* instance, const specpipe_plan_sequence* sequences, int32_t count,
                     const specpipe_plan_costs*, int32_t* gamma, char* error, size_t size) {
  auto* in = static_cast<Instance*>(instance);
  ++in->round;
  for (int32_t i = 0; i < count; ++i) gamma[i] = sequences[i].requested_gamma;
  if (failing(in, "plan_garbage") && count > 0) gamma[0] = 999;
  if (failing(in, "plan_bad_status")) {
    set_error(error, size, "a status no plugin may return");
    return 42;
  }
  return SPECPIPE_OK;
}

// verify_view: partial views of tiny budgets whenever retrieval is ready (exact verdicts),
// else a full round that refreshes; garbage on demand.
specpipe_status decide(void* instance, const specpipe_view_sequence* sequences, int32_t count,
                       specpipe_view_decision* decisions, char* error, size_t size) {
  auto* in = static_cast<Instance*>(instance);
  ++in->round;
  for (int32_t i = 0; i < count; ++i) {
    const bool partial = sequences[i].retrieval_ready && sequences[i].rounds_since_full < 2;
    decisions[i] = {partial ? SPECPIPE_VIEW_PARTIAL : SPECPIPE_VIEW_FULL, partial ? 0 : 1, 0, 16, 1, 16, 64};
  }
  if (failing(in, "view_garbage") && count > 0) decisions[0].view = 7;
  if (failing(in, "view_zero_retrieval") && count > 0) {
    decisions[0].view = SPECPIPE_VIEW_PARTIAL;
    decisions[0].retrieval_blocks = 0;
  }
  if (failing(in, "view_bad_status")) {
    set_error(error, size, "a status no plugin may return");
    return 42;
  }
  return SPECPIPE_OK;
}

const specpipe_verify_view_hooks kVerifyView = {decide, nullptr, nullptr};

const specpipe_kv_write_hooks kKvWrite = {begin, stage, commit, abort_round};
const specpipe_verify_plan_hooks kVerifyPlan = {plan, nullptr, nullptr};

const specpipe_plugin_table kTable = {
#ifdef FAULT_WRONG_ABI
    999u,
#else
    SPECPIPE_PLUGIN_ABI_VERSION,
#endif
#ifdef FAULT_LEGACY_TABLE
    // A plugin built for ABI 1.0: its table ends before verify_view. The field past its
    // size holds garbage here, which a host that respects struct_size never reads.
    SPECPIPE_PLUGIN_TABLE_SIZE_1_0,
#else
    sizeof(specpipe_plugin_table),
#endif
#ifdef FAULT_LEGACY_TABLE
    "faulty", "1.0", "kv_write,verify_plan", create, destroy, describe_metrics, &kKvWrite, &kVerifyPlan,
    reinterpret_cast<const specpipe_verify_view_hooks*>(uintptr_t{1}),
#else
    "faulty", "1.1", "kv_write,verify_plan,verify_view", create, destroy, describe_metrics, &kKvWrite, &kVerifyPlan,
    &kVerifyView,
#endif
};

}  // namespace

#ifndef FAULT_NO_ENTRY
extern "C" SPECPIPE_PLUGIN_EXPORT const specpipe_plugin_table* specpipe_plugin_entry(uint32_t) { return &kTable; }
#else
extern "C" SPECPIPE_PLUGIN_EXPORT const specpipe_plugin_table* not_the_entry(uint32_t) { return &kTable; }
#endif
