/// The C boundary of the SCV plugin: the exported entry point, the table, and one
/// wrapper per hook that checks pointers, calls ScvInstance, and turns every exception
/// into a status and a message. Nothing unwinds past this file.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>

#include "scv_errors.h"
#include "scv_instance.h"
#include "specpipe/plugin.h"

namespace specpipe::scv {
namespace {

void write_error(char* error, size_t error_size, const std::string& message) {
  if (!error || error_size == 0) return;
  std::snprintf(error, error_size, "%s", message.c_str());
}

/// Runs `body`, mapping PluginError to its status and anything else to ERR_INTERNAL.
template <typename Body>
specpipe_status guarded(const char* hook, char* error, size_t error_size, Body&& body) noexcept {
  try {
    body();
    return SPECPIPE_OK;
  } catch (const PluginError& e) {
    write_error(error, error_size, e.what());
    return e.status();
  } catch (const std::exception& e) {
    try {
      write_error(error, error_size, std::string("scv: ") + hook + ": internal error: " + e.what());
    } catch (...) {
      write_error(error, error_size, "scv: internal error");
    }
  } catch (...) {
    write_error(error, error_size, "scv: internal error (unknown exception)");
  }
  return SPECPIPE_ERR_INTERNAL;
}

ScvInstance* self(void* instance) { return static_cast<ScvInstance*>(instance); }

specpipe_status scv_create(const specpipe_host_api* host, const specpipe_model_desc* model, const char* config_json,
                           void** instance, char* error, size_t error_size) {
  return guarded("create", error, error_size, [&] {
    if (!instance) throw invalid_argument("scv: create: instance is NULL");
    *instance = nullptr;
    if (!model) throw invalid_argument("scv: create: model is NULL");
    if (model->struct_size < offsetof(specpipe_model_desc, max_gamma) + sizeof(model->max_gamma))
      throw invalid_argument("scv: create: model struct of " + std::to_string(model->struct_size) +
                             " bytes has no max_gamma");
    if (model->max_gamma < 0)
      throw invalid_argument("scv: create: model max_gamma " + std::to_string(model->max_gamma) + " < 0");
    const ScvConfig config = parse_scv_config(config_json ? config_json : "", model->max_gamma);
    auto created = std::make_unique<ScvInstance>(config, host);
    created->log(1, "scv: max_gamma " + std::to_string(config.max_gamma) + ", prior acceptance " +
                        std::to_string(config.prior_acceptance) + " (weight " + std::to_string(config.prior_weight) +
                        "), probe every " + std::to_string(config.probe_interval) + " rounds, min_gain " +
                        std::to_string(config.min_gain));
    *instance = created.release();
  });
}

void scv_destroy(void* instance) { delete self(instance); }

size_t scv_describe_metrics(void* instance, char* buffer, size_t size) {
  try {
    const std::string json = instance ? self(instance)->metrics_json() : std::string("{}");
    if (buffer && size > 0) {
      const size_t n = std::min(json.size(), size - 1);
      std::memcpy(buffer, json.data(), n);
      buffer[n] = '\0';
    }
    return json.size() + 1;  // the bytes it needs, NUL included: > size means truncated
  } catch (...) {
    if (buffer && size >= 3) std::memcpy(buffer, "{}", 3);
    return 3;
  }
}

specpipe_status scv_plan(void* instance, const specpipe_plan_sequence* sequences, int32_t count,
                         const specpipe_plan_costs* costs, int32_t* gamma, char* error, size_t error_size) {
  return guarded("plan", error, error_size, [&] {
    if (!instance) throw invalid_argument("scv: plan: instance is NULL");
    if (count < 0) throw invalid_argument("scv: plan: count " + std::to_string(count) + " < 0");
    if (count == 0) return;
    if (!sequences || !gamma || !costs)
      throw invalid_argument(std::string("scv: plan: ") + (!sequences ? "sequences" : !gamma ? "gamma" : "costs") +
                             " is NULL with count " + std::to_string(count));
    const auto n = static_cast<size_t>(count);
    self(instance)->plan(std::span(sequences, n), costs_from_abi(*costs), std::span(gamma, n));
  });
}

void scv_observe(void* instance, const specpipe_plan_observation* observations, int32_t count) {
  if (!instance) return;
  try {
    if (count < 0 || (count > 0 && !observations)) {
      self(instance)->log(2, "scv: observe: ignored an invalid call (count " + std::to_string(count) +
                                 (observations ? ")" : ", observations NULL)"));
      return;
    }
    self(instance)->observe(std::span(observations, static_cast<size_t>(count)));
  } catch (const std::exception& e) {
    // observe() cannot report a status: log it; the estimates simply miss this round.
    try {
      self(instance)->log(3, std::string("scv: observe: ") + e.what());
    } catch (...) {
    }
  } catch (...) {
  }
}

void scv_forget(void* instance, int64_t sequence) {
  if (!instance) return;
  try {
    self(instance)->forget(sequence);
  } catch (...) {
    // Erasing from a hash map does not throw; nothing to recover if it ever did.
  }
}

const specpipe_verify_plan_hooks kVerifyPlanHooks = {scv_plan, scv_observe, scv_forget};

const specpipe_plugin_table kTable = {
    SPECPIPE_PLUGIN_ABI_VERSION,
    sizeof(specpipe_plugin_table),
    "scv",
    "1.0.0",
    "verify_plan",
    scv_create,
    scv_destroy,
    scv_describe_metrics,
    nullptr,
    &kVerifyPlanHooks,
    nullptr,
};

}  // namespace
}  // namespace specpipe::scv

extern "C" SPECPIPE_PLUGIN_EXPORT const specpipe_plugin_table* specpipe_plugin_entry(uint32_t host_abi_version) {
  return host_abi_version == SPECPIPE_PLUGIN_ABI_VERSION ? &specpipe::scv::kTable : nullptr;
}
