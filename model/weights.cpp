#include "model/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <set>
#include <string>
#include <utility>

#include "core/error.h"
#include "model/safetensors.h"

namespace specpipe {
namespace {

/// What ModelWeights::storage holds when some matrix had to be copied out of the map.
struct RealignedStorage {
  std::shared_ptr<const SafetensorsArchive> archive;
  std::vector<std::unique_ptr<std::byte[]>> copies;
};

/// Looks tensors up by their Hugging Face names, checks dtype and shape, and remembers
/// which ones it handed out so the rest can be reported as unused.
class WeightBinder {
 public:
  explicit WeightBinder(const SafetensorsArchive& archive) : archive_(archive) {}

  MatrixWeight matrix(const std::string& name, int64_t rows, int64_t cols) {
    const TensorEntry& entry = expect(name, {rows, cols});
    MatrixWeight m{entry.dtype, entry.data, rows, cols};
    // Kernels read elements through typed pointers; the format does not promise alignment
    // (it depends on the header length), so the rare misaligned tensor gets an owned copy.
    if (reinterpret_cast<uintptr_t>(entry.data) % dtype_size(entry.dtype) != 0) {
      auto copy = std::make_unique<std::byte[]>(entry.nbytes);
      std::memcpy(copy.get(), entry.data, entry.nbytes);
      m.data = copy.get();
      copies_.push_back(std::move(copy));
      spdlog::debug("{}: not aligned in {}, copied", name, entry.file.string());
    }
    return m;
  }

  std::vector<float> vector(const std::string& name, int64_t size) {
    const TensorEntry& entry = expect(name, {size});
    std::vector<float> out(static_cast<size_t>(size));
    // memcpy per element: the mapped bytes need not be aligned.
    for (size_t i = 0; i < out.size(); ++i) {
      const std::byte* p = entry.data + i * dtype_size(entry.dtype);
      if (entry.dtype == DType::f32) {
        std::memcpy(&out[i], p, sizeof(float));
      } else {
        uint16_t bits;
        std::memcpy(&bits, p, sizeof bits);
        out[i] = entry.dtype == DType::bf16 ? bf16_to_f32(bits) : f16_to_f32(bits);
      }
    }
    return out;
  }

  void warn_unused() const {
    std::vector<std::string> unused;
    for (const auto& [name, entry] : archive_.tensors())
      if (!used_.contains(name)) unused.push_back(name);
    if (unused.empty()) return;
    constexpr size_t kListed = 8;
    size_t more = unused.size() > kListed ? unused.size() - kListed : 0;
    if (more) unused.resize(kListed);
    spdlog::warn("{}: {} tensor(s) not used by the model, ignored: {}{}",
                 archive_.location().string(), unused.size() + more, fmt::join(unused, ", "),
                 more ? fmt::format(" and {} more", more) : std::string());
  }

  std::vector<std::unique_ptr<std::byte[]>> take_copies() { return std::move(copies_); }

 private:
  const TensorEntry& expect(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorEntry& entry = archive_.get(name);  // not_found names tensor and checkpoint
    if (entry.dtype != DType::f32 && entry.dtype != DType::f16 && entry.dtype != DType::bf16)
      fail(ErrorCode::unsupported, "{}: dtype {} in {} is not supported for weights (F32, F16, "
           "BF16)", name, dtype_name(entry.dtype), entry.file.string());
    if (entry.shape != shape)
      fail(ErrorCode::corrupt_file, "{}: shape {} expected, {} in {}", name, shape_string(shape),
           shape_string(entry.shape), entry.file.string());
    used_.insert(name);
    return entry;
  }

  const SafetensorsArchive& archive_;
  std::set<std::string> used_;
  std::vector<std::unique_ptr<std::byte[]>> copies_;
};

LayerWeights load_layer(const ModelConfig& c, WeightBinder& bind, int32_t i) {
  const std::string attn = fmt::format("model.layers.{}.self_attn.", i);
  const std::string mlp = fmt::format("model.layers.{}.mlp.", i);
  const std::string layer = fmt::format("model.layers.{}.", i);
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size;
  LayerWeights w;
  w.q_proj = bind.matrix(attn + "q_proj.weight", c.q_dim(), hidden);
  w.k_proj = bind.matrix(attn + "k_proj.weight", c.kv_dim(), hidden);
  w.v_proj = bind.matrix(attn + "v_proj.weight", c.kv_dim(), hidden);
  w.o_proj = bind.matrix(attn + "o_proj.weight", hidden, c.q_dim());
  if (c.attention_bias) {
    w.q_bias = bind.vector(attn + "q_proj.bias", c.q_dim());
    w.k_bias = bind.vector(attn + "k_proj.bias", c.kv_dim());
    w.v_bias = bind.vector(attn + "v_proj.bias", c.kv_dim());
  }
  if (c.o_proj_bias) w.o_bias = bind.vector(attn + "o_proj.bias", hidden);
  if (c.qk_norm) {
    w.q_norm = bind.vector(attn + "q_norm.weight", c.head_dim);
    w.k_norm = bind.vector(attn + "k_norm.weight", c.head_dim);
  }
  w.gate_proj = bind.matrix(mlp + "gate_proj.weight", inter, hidden);
  w.up_proj = bind.matrix(mlp + "up_proj.weight", inter, hidden);
  w.down_proj = bind.matrix(mlp + "down_proj.weight", hidden, inter);
  if (c.mlp_bias) {
    w.gate_bias = bind.vector(mlp + "gate_proj.bias", inter);
    w.up_bias = bind.vector(mlp + "up_proj.bias", inter);
    w.down_bias = bind.vector(mlp + "down_proj.bias", hidden);
  }
  w.input_norm = bind.vector(layer + "input_layernorm.weight", hidden);
  w.post_attention_norm = bind.vector(layer + "post_attention_layernorm.weight", hidden);
  return w;
}

}  // namespace

size_t ModelWeights::bytes_read_per_token() const {
  size_t total = lm_head.bytes();
  for (const LayerWeights& l : layers)
    for (const MatrixWeight* m : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj,
                                  &l.up_proj, &l.down_proj})
      total += m->bytes();
  return total;
}

ModelWeights load_weights(const ModelConfig& config,
                          std::shared_ptr<const SafetensorsArchive> archive) {
  if (!archive) fail(ErrorCode::invalid_argument, "load_weights: null archive");
  WeightBinder bind(*archive);
  ModelWeights w;
  w.embed_tokens = bind.matrix("model.embed_tokens.weight", config.vocab_size, config.hidden_size);
  // Tied: transformers makes lm_head the embedding parameter itself and ignores any
  // lm_head.weight in the file, so do the same.
  w.lm_head = config.tie_word_embeddings
                  ? w.embed_tokens
                  : bind.matrix("lm_head.weight", config.vocab_size, config.hidden_size);
  w.final_norm = bind.vector("model.norm.weight", config.hidden_size);
  w.layers.reserve(static_cast<size_t>(config.num_layers));
  for (int32_t i = 0; i < config.num_layers; ++i) w.layers.push_back(load_layer(config, bind, i));
  bind.warn_unused();

  auto copies = bind.take_copies();
  if (copies.empty()) {
    w.storage = std::move(archive);
  } else {
    auto holder = std::make_shared<RealignedStorage>();
    holder->archive = std::move(archive);
    holder->copies = std::move(copies);
    w.storage = std::move(holder);
  }
  return w;
}

}  // namespace specpipe
