#include "pipeline/plugin_instance.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace specpipe {

specpipe_model_desc describe_model(const KvStore& kv, int32_t max_gamma, int32_t max_batch, Device device) {
  const KvStoreConfig& c = kv.config();
  specpipe_model_desc m{};
  m.struct_size = sizeof(specpipe_model_desc);
  m.num_layers = c.num_layers;
  m.num_kv_heads = c.num_kv_heads;
  m.head_dim = c.head_dim;
  m.kv_dim = c.num_kv_heads * c.head_dim;
  m.block_size = c.block_size;
  m.max_gamma = max_gamma;
  m.max_batch = max_batch;
  m.device = device.kind == DeviceKind::cuda ? DLDevice{kDLCUDA, device.index} : DLDevice{kDLCPU, 0};
  return m;
}

PluginInstance::PluginInstance(std::shared_ptr<const PluginLibrary> library, std::string slot,
                               const specpipe_model_desc& model, const nlohmann::json& config, KvStore* kv,
                               std::shared_ptr<DeviceKvPool> device_pool)
    : library_(std::move(library)), slot_(std::move(slot)), kv_(kv), device_pool_(std::move(device_pool)),
      model_(model) {
  if (!library_->fills(slot_))
    fail(ErrorCode::invalid_argument, "plugin {}: does not fill slot {} (it fills: {})", library_->path().string(),
         slot_, library_->table().slots);
  host_.abi_version = SPECPIPE_PLUGIN_ABI_VERSION;
  host_.struct_size = sizeof(specpipe_host_api);
  host_.host = this;
  host_.write_slots = &PluginInstance::write_slots;
  host_.alloc_device = &PluginInstance::alloc_device;
  host_.free_device = &PluginInstance::free_device;
  host_.copy = &PluginInstance::copy;
  host_.log = &PluginInstance::log;
  const std::string config_text = config.is_null() ? "{}" : config.dump();
  const specpipe_status s = call("create", [&](char* err, size_t n) {
    return table().create(&host_, &model_, config_text.c_str(), &instance_, err, n);
  });
  if (s != SPECPIPE_OK || !instance_)
    fail(ErrorCode::invalid_argument, "plugin {} ({}): create refused: {}", library_->path().string(), name(),
         last_error_.empty() ? "no message" : last_error_);
}

PluginInstance::~PluginInstance() {
  if (!instance_) return;
  try {
    table().destroy(instance_);
  } catch (...) {  // a plugin must not throw; if it does, we still must not
  }
}

specpipe_status PluginInstance::call(const char* hook, const std::function<specpipe_status(char*, size_t)>& fn) {
  char error[512] = {};
  specpipe_status s;
  try {
    s = fn(error, sizeof error);
  } catch (const std::exception& e) {
    last_error_ = fmt::format("{} threw: {}", hook, e.what());
    return SPECPIPE_ERR_INTERNAL;
  } catch (...) {
    last_error_ = fmt::format("{} threw", hook);
    return SPECPIPE_ERR_INTERNAL;
  }
  error[sizeof error - 1] = '\0';
  if (s < SPECPIPE_ERR_INTERNAL || s > SPECPIPE_DECLINED) {
    last_error_ = fmt::format("{} returned {}, not a plugin status", hook, s);
    return SPECPIPE_ERR_INTERNAL;
  }
  if (s != SPECPIPE_OK) last_error_ = fmt::format("{}: {}", hook, error[0] ? error : "no message");
  return s;
}

void PluginInstance::disable(const std::string& reason, const std::string& detail) {
  ++fallbacks_[reason];
  if (!detail.empty()) last_error_ = detail;
  if (disabled_) return;
  disabled_ = true;
  spdlog::warn("plugin {} disabled in slot {} ({}: {}); the built-in strategy takes over", name(), slot_, reason,
               last_error_);
}

nlohmann::json PluginInstance::metrics() const {
  nlohmann::json m = nlohmann::json::object();
  if (table().describe_metrics && instance_) {
    try {
      std::string buffer(4096, '\0');
      size_t need = table().describe_metrics(instance_, buffer.data(), buffer.size());
      if (need >= buffer.size()) {
        buffer.assign(need + 1, '\0');
        need = table().describe_metrics(instance_, buffer.data(), buffer.size());
      }
      buffer.resize(std::min(need, buffer.size() - 1));
      m = nlohmann::json::parse(buffer);
    } catch (...) {
      m = {{"error", "describe_metrics returned invalid JSON"}};
    }
  }
  m["host"] = {{"disabled", disabled_}, {"fallbacks", fallbacks_}, {"pool_rows_written", rows_written_}};
  return m;
}

specpipe_status PluginInstance::write_slots(void* host, int32_t layer, const DLTensor* k_rows,
                                            const DLTensor* v_rows, const int64_t* slots, int64_t n,
                                            specpipe_stream) {
  auto* self = static_cast<PluginInstance*>(host);
  KvStore* kv = self->kv_;
  if (!kv || !k_rows || !v_rows || (n > 0 && !slots) || n < 0) return SPECPIPE_ERR_INVALID_ARGUMENT;
  KvTensors& t = kv->tensors();
  const int64_t dim = t.slot_stride();
  // Rows live where the pool does (DLPack device type), float32, dense.
  auto ok = [&](const DLTensor* x) {
    return x->ndim == 2 && x->shape[0] >= n && x->shape[1] == dim && x->dtype.code == kDLFloat &&
           x->dtype.bits == 32 && x->strides == nullptr && x->data &&
           x->device.device_type == self->model_.device.device_type;
  };
  const int64_t total_slots = int64_t{kv->config().num_blocks} * kv->config().block_size;
  if (layer < 0 || layer >= t.num_layers() || !ok(k_rows) || !ok(v_rows)) return SPECPIPE_ERR_INVALID_ARGUMENT;
  for (int64_t i = 0; i < n; ++i)
    if (slots[i] < 0 || slots[i] >= total_slots) return SPECPIPE_ERR_INVALID_ARGUMENT;
  const auto* k = reinterpret_cast<const float*>(static_cast<const char*>(k_rows->data) + k_rows->byte_offset);
  const auto* v = reinterpret_cast<const float*>(static_cast<const char*>(v_rows->data) + v_rows->byte_offset);
  if (self->device_pool_) {
    try {
      self->device_pool_->write_slots(layer, k, v, slots, n);
    } catch (const std::exception& e) {
      spdlog::error("plugin {}: write_slots on the device: {}", self->name(), e.what());
      return SPECPIPE_ERR_INTERNAL;
    }
    self->rows_written_ += n;
    return SPECPIPE_OK;
  }
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(t.k(layer) + slots[i] * dim, k + i * dim, static_cast<size_t>(dim) * sizeof(float));
    std::memcpy(t.v(layer) + slots[i] * dim, v + i * dim, static_cast<size_t>(dim) * sizeof(float));
  }
  self->rows_written_ += n;
  return SPECPIPE_OK;
}

void* PluginInstance::alloc_device(void* host, size_t bytes) {
  auto* self = static_cast<PluginInstance*>(host);
  if (self->device_pool_) return self->device_pool_->allocate(bytes);  // 256-byte aligned (cudaMalloc)
  return std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
}

void PluginInstance::free_device(void* host, void* ptr) {
  auto* self = static_cast<PluginInstance*>(host);
  if (!self->device_pool_) return std::free(ptr);
  try {
    self->device_pool_->release(ptr);
  } catch (const std::exception& e) {  // a free cannot fail back to the plugin
    spdlog::error("plugin {}: free_device: {}", self->name(), e.what());
  }
}

specpipe_status PluginInstance::copy(void* host, void* dst, const void* src, size_t bytes, specpipe_stream) {
  auto* self = static_cast<PluginInstance*>(host);
  if (bytes && (!dst || !src)) return SPECPIPE_ERR_INVALID_ARGUMENT;
  if (!self->device_pool_) {
    std::memmove(dst, src, bytes);
    return SPECPIPE_OK;
  }
  try {
    self->device_pool_->copy(dst, src, bytes);  // ordered on the pool's stream
  } catch (const std::exception& e) {
    spdlog::error("plugin {}: copy on the device: {}", self->name(), e.what());
    return SPECPIPE_ERR_INTERNAL;
  }
  return SPECPIPE_OK;
}

void PluginInstance::log(void* host, int32_t level, const char* message) {
  auto* self = static_cast<PluginInstance*>(host);
  const char* text = message ? message : "";
  switch (level) {
    case 0: spdlog::debug("plugin {}: {}", self->name(), text); break;
    case 1: spdlog::info("plugin {}: {}", self->name(), text); break;
    case 2: spdlog::warn("plugin {}: {}", self->name(), text); break;
    default: spdlog::error("plugin {}: {}", self->name(), text); break;
  }
}

}  // namespace specpipe
