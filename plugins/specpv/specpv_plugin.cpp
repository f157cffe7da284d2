/// The C boundary of the SpecPV plugin (slot verify_view, ABI 1.1): the exported entry
/// point, the table, and one wrapper per hook that checks pointers, calls SpecpvPolicy
/// and turns every exception into a status and a message. Nothing unwinds past this file.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

#include "specpipe/plugin.h"
#include "specpv_policy.h"

namespace specpv {
namespace {

struct Instance {
  const specpipe_host_api* host;
  SpecpvPolicy policy;
};

void write_error(char* error, size_t error_size, const std::string& message) {
  if (!error || error_size == 0) return;
  std::snprintf(error, error_size, "%s", message.c_str());
}

template <typename Body>
specpipe_status guarded(const char* hook, char* error, size_t error_size, specpipe_status on_invalid,
                        Body&& body) noexcept {
  try {
    body();
    return SPECPIPE_OK;
  } catch (const std::invalid_argument& e) {
    write_error(error, error_size, e.what());
    return on_invalid;
  } catch (const std::bad_alloc&) {
    write_error(error, error_size, std::string("specpv: ") + hook + ": out of memory");
    return SPECPIPE_ERR_CAPACITY;
  } catch (const std::exception& e) {
    try {
      write_error(error, error_size, std::string("specpv: ") + hook + ": internal error: " + e.what());
    } catch (...) {
    }
  } catch (...) {
  }
  return SPECPIPE_ERR_INTERNAL;
}

Instance* self(void* instance) { return static_cast<Instance*>(instance); }

specpipe_status specpv_create(const specpipe_host_api* host, const specpipe_model_desc* model, const char* config_json,
                              void** instance, char* error, size_t error_size) {
  return guarded("create", error, error_size, SPECPIPE_ERR_CONFIG, [&] {
    if (!instance) throw std::invalid_argument("specpv: create: instance is NULL");
    *instance = nullptr;
    if (!model || model->struct_size < offsetof(specpipe_model_desc, block_size) + sizeof(model->block_size))
      throw std::invalid_argument("specpv: create: no model description with a block size");
    auto created = std::make_unique<Instance>(
        Instance{host, SpecpvPolicy(parse_config(config_json ? config_json : "", model->block_size))});
    const SpecpvConfig& c = created->policy.config();
    if (host && host->log) {
      const std::string line = std::string("specpv: ") + (c.approximate ? "approximate (not lossless)" : "exact") +
                               ", sink " + std::to_string(c.sink_tokens) + " + retrieval " +
                               std::to_string(c.retrieval_blocks()) + " blocks + window " +
                               std::to_string(c.window_tokens) + " + buffer " + std::to_string(c.buffer_tokens) +
                               " tokens, full verification every " + std::to_string(c.refresh_interval + 1) +
                               " rounds" + (c.adaptive_interval ? " (sooner after a rollback)" : "") +
                               ", retrieval by " + (c.by_mass ? "attention mass" : "Quest's bound");
      host->log(host->host, 1, line.c_str());
    }
    *instance = created.release();
  });
}

void specpv_destroy(void* instance) { delete self(instance); }

size_t specpv_describe_metrics(void* instance, char* buffer, size_t size) {
  try {
    const std::string json = instance ? self(instance)->policy.metrics_json() : std::string("{}");
    if (buffer && size > 0) {
      const size_t n = std::min(json.size(), size - 1);
      std::memcpy(buffer, json.data(), n);
      buffer[n] = '\0';
    }
    return json.size() + 1;
  } catch (...) {
    if (buffer && size > 0) buffer[0] = '\0';
    return 1;
  }
}

specpipe_status specpv_decide(void* instance, const specpipe_view_sequence* sequences, int32_t count,
                              specpipe_view_decision* decisions, char* error, size_t error_size) {
  return guarded("decide", error, error_size, SPECPIPE_ERR_INVALID_ARGUMENT, [&] {
    if (!instance || count < 0 || (count > 0 && (!sequences || !decisions)))
      throw std::invalid_argument("specpv: decide: NULL or negative arguments");
    for (int32_t i = 0; i < count; ++i) decisions[i] = self(instance)->policy.decide(sequences[i]);
  });
}

void specpv_observe(void* instance, const specpipe_view_observation* observations, int32_t count) {
  if (!instance || !observations || count <= 0) return;
  try {
    self(instance)->policy.observe(std::span<const specpipe_view_observation>(observations, static_cast<size_t>(count)));
  } catch (...) {
    // Counters only: nothing to recover.
  }
}

void specpv_forget(void* instance, int64_t sequence) {
  if (instance) self(instance)->policy.forget(sequence);  // an erase: does not throw
}

const specpipe_verify_view_hooks kVerifyViewHooks = {specpv_decide, specpv_observe, specpv_forget};

const specpipe_plugin_table kTable = {
    SPECPIPE_PLUGIN_ABI_VERSION,
    sizeof(specpipe_plugin_table),
    "specpv",
    "0.1.0",
    "verify_view",
    specpv_create,
    specpv_destroy,
    specpv_describe_metrics,
    nullptr,
    nullptr,
    &kVerifyViewHooks,
};

}  // namespace
}  // namespace specpv

extern "C" SPECPIPE_PLUGIN_EXPORT const specpipe_plugin_table* specpipe_plugin_entry(uint32_t host_abi_version) {
  return host_abi_version == SPECPIPE_PLUGIN_ABI_VERSION ? &specpv::kTable : nullptr;
}
