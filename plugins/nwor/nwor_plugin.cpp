/// The C boundary of the NWOR plugin: the exported entry point, the plugin table and the
/// `kv_write` hooks. Every hook runs its C++ body inside guarded(), which turns any
/// exception into a status and a message, so nothing unwinds into the host.
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <exception>
#include <memory>
#include <string>

#include "nwor_config.h"
#include "nwor_error.h"
#include "nwor_instance.h"
#include "specpipe/plugin.h"

namespace {

/// Copies "nwor: " + parts into the caller's buffer, truncated and NUL-terminated.
/// Allocates nothing, so it is safe inside a handler for std::bad_alloc.
void write_error(char* error, size_t size, std::initializer_list<const char*> parts) noexcept {
  if (!error || size == 0) return;
  size_t used = 0;
  const auto append = [&](const char* part) {
    const size_t n = std::min(std::strlen(part), size - 1 - used);
    std::memcpy(error + used, part, n);
    used += n;
  };
  append("nwor: ");
  for (const char* part : parts) append(part);
  error[used] = '\0';
}

/// Runs a hook body; HookError keeps its status, anything else is SPECPIPE_ERR_INTERNAL.
template <class Body>
specpipe_status guarded(const char* hook, char* error, size_t error_size, Body&& body) noexcept {
  try {
    return body();
  } catch (const nwor::HookError& e) {
    write_error(error, error_size, {e.what()});
    return e.status();
  } catch (const std::exception& e) {
    write_error(error, error_size, {"internal error in ", hook, ": ", e.what()});
    return SPECPIPE_ERR_INTERNAL;
  } catch (...) {
    write_error(error, error_size, {"internal error in ", hook, ": unknown exception"});
    return SPECPIPE_ERR_INTERNAL;
  }
}

nwor::NworInstance* instance_of(void* instance) {
  if (!instance) nwor::fail_invalid("the instance is NULL");
  return static_cast<nwor::NworInstance*>(instance);
}

void check_host(const specpipe_host_api* host) {
  if (!host) nwor::fail_invalid("create: host is NULL");
  if (host->abi_version != SPECPIPE_PLUGIN_ABI_VERSION)
    nwor::fail_invalid("create: host speaks plugin ABI " + std::to_string(host->abi_version) + ", this plugin " +
                       std::to_string(SPECPIPE_PLUGIN_ABI_VERSION));
  if (host->struct_size < sizeof(specpipe_host_api))
    nwor::fail_invalid("create: host table of " + std::to_string(host->struct_size) + " bytes, expected " +
                       std::to_string(sizeof(specpipe_host_api)));
  if (!host->write_slots || !host->alloc_device || !host->free_device || !host->copy)
    nwor::fail_invalid("create: the host must provide write_slots, alloc_device, free_device and copy");
}

void check_model(const specpipe_model_desc* model) {
  if (!model) nwor::fail_invalid("create: model is NULL");
  if (model->struct_size < sizeof(specpipe_model_desc))
    nwor::fail_invalid("create: model description of " + std::to_string(model->struct_size) + " bytes, expected " +
                       std::to_string(sizeof(specpipe_model_desc)));
  if (model->num_layers <= 0) nwor::fail_invalid("create: model num_layers " + std::to_string(model->num_layers));
  if (model->kv_dim <= 0) nwor::fail_invalid("create: model kv_dim " + std::to_string(model->kv_dim));
  if (model->num_kv_heads > 0 && model->head_dim > 0 &&
      static_cast<int64_t>(model->num_kv_heads) * model->head_dim != model->kv_dim)
    nwor::fail_invalid("create: model kv_dim " + std::to_string(model->kv_dim) + " != num_kv_heads " +
                       std::to_string(model->num_kv_heads) + " x head_dim " + std::to_string(model->head_dim));
}

specpipe_status nwor_create(const specpipe_host_api* host, const specpipe_model_desc* model, const char* config_json,
                            void** instance, char* error, size_t error_size) {
  return guarded("create", error, error_size, [&] {
    if (!instance) nwor::fail_invalid("create: instance is NULL");
    *instance = nullptr;
    check_host(host);
    check_model(model);
    const nwor::NworConfig config = nwor::parse_config(config_json, *model);
    *instance = new nwor::NworInstance(*host, *model, config);
    return SPECPIPE_OK;
  });
}

void nwor_destroy(void* instance) {
  // The destructor only returns device memory; it does not throw.
  delete static_cast<nwor::NworInstance*>(instance);
}

size_t nwor_describe_metrics(void* instance, char* buffer, size_t size) {
  try {
    const std::string json = instance ? static_cast<nwor::NworInstance*>(instance)->metrics_json() : "{}";
    if (buffer && size > 0) {
      const size_t n = std::min(json.size(), size - 1);
      std::memcpy(buffer, json.data(), n);
      buffer[n] = '\0';
    }
    // snprintf's convention, which the host's reader follows: the length without the
    // NUL, so a return value >= size means the text was truncated.
    return json.size();
  } catch (...) {
    if (buffer && size > 0) buffer[0] = '\0';
    return 0;
  }
}

specpipe_status nwor_begin(void* instance, const specpipe_window* windows, int32_t count, char* error,
                           size_t error_size) {
  return guarded("begin", error, error_size, [&] {
    std::string why;
    const specpipe_status status = instance_of(instance)->begin(windows, count, why);
    if (status == SPECPIPE_DECLINED) write_error(error, error_size, {"declined: ", why.c_str()});
    return status;
  });
}

specpipe_status nwor_stage(void* instance, const specpipe_layer_rows* rows, specpipe_stream stream, char* error,
                           size_t error_size) {
  return guarded("stage", error, error_size, [&] {
    instance_of(instance)->stage(rows, stream);
    return SPECPIPE_OK;
  });
}

specpipe_status nwor_commit(void* instance, const specpipe_window_verdict* verdicts, int32_t count,
                            specpipe_stream stream, char* error, size_t error_size) {
  return guarded("commit", error, error_size, [&] {
    instance_of(instance)->commit(verdicts, count, stream);
    return SPECPIPE_OK;
  });
}

void nwor_abort(void* instance) {
  if (instance) static_cast<nwor::NworInstance*>(instance)->abort();
}

const specpipe_kv_write_hooks kKvWriteHooks = {nwor_begin, nwor_stage, nwor_commit, nwor_abort};

const specpipe_plugin_table kTable = {
    SPECPIPE_PLUGIN_ABI_VERSION,
    sizeof(specpipe_plugin_table),
    "nwor",
    "1.0.0",
    "kv_write",
    nwor_create,
    nwor_destroy,
    nwor_describe_metrics,
    &kKvWriteHooks,
    nullptr,
    nullptr,
};

}  // namespace

extern "C" SPECPIPE_PLUGIN_EXPORT const specpipe_plugin_table* specpipe_plugin_entry(uint32_t host_abi_version) {
  return host_abi_version == SPECPIPE_PLUGIN_ABI_VERSION ? &kTable : nullptr;
}
