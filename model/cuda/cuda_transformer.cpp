#include "model/cuda/cuda_transformer.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/early_launch.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kv_cache.h"
#include "model/cuda/cuda_forward_model.h"
#include "model/cuda/decoder_step.h"
#include "model/cuda/device_memory.h"
#include "model/cuda/device_ring.h"
#include "model/cuda/model_ops.h"
#include "model/cuda/device_weights.h"
#include "model/cuda/forward_plan.h"
#include "model/cuda/fused_step.h"
#include "model/cuda/key_summaries.h"
#include "model/cuda/transformer_state.h"

namespace specpipe {
namespace {

using cuda::align_up;
using cuda::cuda_try;
using cuda::lt_try;

}  // namespace

std::span<const float> CudaLogits::row(size_t w, int32_t i) const {
  if (w >= rows_.size() || i < 0 || i >= rows_[w] || data_.empty())
    fail(ErrorCode::invalid_argument, "CUDA logits row {} of window {} was not copied back", i, w);
  return {data_.data() + (first_[w] + i) * vocab_, static_cast<size_t>(vocab_)};
}

int32_t CudaLogits::argmax(size_t w, int32_t i) const {
  if (w >= rows_.size() || i < 0 || i >= rows_[w])
    fail(ErrorCode::invalid_argument, "CUDA logits row {} of window {} was not computed", i, w);
  return argmax_[static_cast<size_t>(first_[w] + i)];
}

CudaTransformer::CudaTransformer(const ModelConfig& config, const ModelWeights& weights, int32_t kv_blocks,
                                 int32_t block_size, CudaTransformerOptions options)
    : CudaTransformer(config, &weights, 0, kv_blocks, block_size, options) {}

std::unique_ptr<CudaTransformer> CudaTransformer::random(const ModelConfig& config, uint64_t seed, int32_t kv_blocks,
                                                         int32_t block_size, CudaTransformerOptions options) {
  return std::unique_ptr<CudaTransformer>(new CudaTransformer(config, nullptr, seed, kv_blocks, block_size, options));
}

size_t CudaTransformer::graph_count() const { return impl_->graphs.size(); }

static_assert(CudaTransformer::kMaxChainSteps == cuda::kMaxChainSteps);

CudaTransformer::CudaTransformer(const ModelConfig& config, const ModelWeights* weights_ptr, uint64_t seed,
                                 int32_t kv_blocks, int32_t block_size, CudaTransformerOptions options)
    : config_(config), options_(options), impl_(std::make_unique<cuda::TransformerState>()) {
  register_cuda_events();  // a launched chain's event (Event::record on the stream)
  const ModelConfig& c = config_;
  if (kv_blocks < 0 || block_size < 1) fail(ErrorCode::invalid_argument, "CUDA forward: KV pool of {} blocks of {}", kv_blocks, block_size);
  if (options_.max_tokens < 1 || options_.max_tokens > 1024)
    fail(ErrorCode::invalid_argument, "CUDA forward: max_tokens {} outside [1, 1024]", options_.max_tokens);
  if (c.head_dim > 256 || c.num_heads % c.num_kv_heads != 0 || c.num_heads / c.num_kv_heads > 16)
    fail(ErrorCode::unsupported, "CUDA forward: head_dim {} with {} heads over {} kv heads is not supported",
         c.head_dim, c.num_heads, c.num_kv_heads);
  if (options_.kv_dtype != DType::f32 && options_.kv_dtype != DType::bf16)
    fail(ErrorCode::invalid_argument, "CUDA forward: kv dtype {} (K/V are f32 or bf16)", dtype_name(options_.kv_dtype));
  options_.gemm = resolve_cuda_gemm(options_.gemm, c, options_.fused_step);
  cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  int least_priority = 0, greatest_priority = 0;
  cuda_try(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority), "stream priorities");
  cuda_try(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking,
                                        options_.high_priority_stream ? greatest_priority : least_priority),
           "cudaStreamCreate");
  cuda::TransformerState& d = *impl_;
  d.kv_dtype = options_.kv_dtype;
  const int64_t H = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), I = c.intermediate_size, V = c.vocab_size;
  const int64_t qkvd = qd + 2 * kvd;

  // --- weights: every matrix as BF16 in one buffer, every vector as FP32 in another ---
  step_matrix_bytes_ = cuda::upload_weights(d, c, weights_ptr, seed, options_.gemm, options_.fused_step,
                                            options_.qkv_rope, stream_, &device_bytes_);

  // --- RoPE table: the CPU table's cos/sin, bit for bit ---
  const cpu::RopeTable table(c.head_dim, c.rope_theta, c.max_position_embeddings, c.rope_scaling);
  const size_t rope_floats = static_cast<size_t>(c.max_position_embeddings) * static_cast<size_t>(c.head_dim / 2);
  d.rope.allocate(2 * rope_floats * sizeof(float), &device_bytes_);
  d.rope_cos = d.rope.as<float>();
  d.rope_sin = d.rope_cos + rope_floats;
  cuda_try(cudaMemcpy(d.rope_cos, table.cos(0), rope_floats * sizeof(float), cudaMemcpyHostToDevice), "rope upload");
  cuda_try(cudaMemcpy(d.rope_sin, table.sin(0), rope_floats * sizeof(float), cudaMemcpyHostToDevice), "rope upload");

  // --- scratch ---
  const int64_t M = options_.max_tokens;
  const int64_t widest = std::max({H, qd, I});
  const int64_t floats = M * (H + H + qkvd + qd + 2 * I + H + V);
  d.scratch.allocate(static_cast<size_t>(floats) * sizeof(float) + static_cast<size_t>(M * widest) * 2 +
                         static_cast<size_t>(M * kMaxChainSteps) * sizeof(int32_t) + 1024,
                     &device_bytes_);
  float* s = d.scratch.as<float>();
  d.x = s;
  d.h = d.x + M * H;
  d.qkv = d.h + M * H;
  d.attn = d.qkv + M * qkvd;
  d.gu = d.attn + M * qd;
  d.tmp = d.gu + M * 2 * I;
  d.logits = d.tmp + M * H;
  d.xb = reinterpret_cast<uint16_t*>(d.logits + M * V);
  d.argmax = reinterpret_cast<int32_t*>(d.xb + align_up(static_cast<size_t>(M * widest), 8));
  d.out_host.allocate(static_cast<size_t>(M * V) * sizeof(float) +
                     static_cast<size_t>(M * kMaxChainSteps) * sizeof(int32_t));
  // --- GEMMs: with cuBLASLt, one pinned algorithm per shape ---
  if (options_.gemm == CudaGemm::cublaslt) {
    lt_try(cublasLtCreate(&d.lt), "cublasLtCreate");
    const int32_t mm = options_.max_tokens;
    lt_try(d.g_qkv.init(d.lt, {qkvd, H, H, qkvd, mm}), "pin qkv GEMM");
    lt_try(d.g_o.init(d.lt, {H, qd, qd, H, mm}), "pin o_proj GEMM");
    lt_try(d.g_gate_up.init(d.lt, {2 * I, H, H, 2 * I, mm}), "pin gate_up GEMM");
    lt_try(d.g_down.init(d.lt, {H, I, I, H, mm}), "pin down_proj GEMM");
    lt_try(d.g_head.init(d.lt, {V, H, H, V, mm}), "pin lm_head GEMM");
  }
  cuda_try(cudaDeviceSynchronize(), "upload");
  if (kv_blocks > 0) allocate_kv_pool(kv_blocks, block_size);
  else impl_->block_size = block_size;
}

void CudaTransformer::allocate_kv_pool(int32_t kv_blocks, int32_t block_size) {
  const ModelConfig& c = config_;
  cuda::TransformerState& d = *impl_;
  if (d.num_blocks > 0) fail(ErrorCode::invalid_argument, "CUDA forward: the KV pool is already allocated");
  if (kv_blocks < 1 || block_size < 1)
    fail(ErrorCode::invalid_argument, "CUDA forward: KV pool of {} blocks of {}", kv_blocks, block_size);
  cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  const int64_t kvd = c.kv_dim();
  const int64_t M = options_.max_tokens;
  // --- KV pool: per layer K then V, [num_blocks * block_size, kvd] elements of kv_dtype each ---
  const size_t layer_bytes = static_cast<size_t>(kv_blocks) * static_cast<size_t>(block_size) *
                             static_cast<size_t>(kvd) * dtype_size(d.kv_dtype);
  d.pool.allocate(2 * layer_bytes * static_cast<size_t>(c.num_layers), &device_bytes_);
  cuda_try(cudaMemset(d.pool.as<void>(), 0, d.pool.bytes()), "pool memset");
  for (int32_t l = 0; l < c.num_layers; ++l) {
    unsigned char* base = d.pool.as<unsigned char>() + 2 * static_cast<size_t>(l) * layer_bytes;
    d.pool_k.push_back(reinterpret_cast<float*>(base));
    d.pool_v.push_back(reinterpret_cast<float*>(base + layer_bytes));
  }
  if (d.kv_dtype == DType::bf16)
    d.kv_dense.allocate(static_cast<size_t>(2 * M * kvd) * sizeof(uint16_t), &device_bytes_);

  // Attention split-K workspace: every query sees at most the pool's capacity of keys.
  const int64_t max_keys = std::min<int64_t>(int64_t{kv_blocks} * block_size, c.max_position_embeddings);
  d.workspace.allocate(static_cast<size_t>(M * c.num_heads * cuda::attention_chunks(static_cast<int32_t>(max_keys)) *
                                           (c.head_dim + 2)) *
                           sizeof(float),
                       &device_bytes_);
  d.capacity_chunks = cuda::attention_chunks(static_cast<int32_t>(std::max<int64_t>(max_keys, 1)));
  d.attention_counters.allocate(static_cast<size_t>(M * c.num_kv_heads) * sizeof(uint32_t), &device_bytes_);
  cuda_try(cudaMemset(d.attention_counters.as<void>(), 0, d.attention_counters.bytes()), "counters memset");
  // Metadata: one fixed layout for every forward (graphs bake these addresses; forward_plan.h).
  d.num_blocks = kv_blocks;
  d.block_size = block_size;
  allocate_metadata();
  if (options_.fused_step) setup_fused_step();
}

CudaTransformer::~CudaTransformer() {
  if (stream_) cudaStreamSynchronize(stream_);
  impl_.reset();
  if (stream_) cudaStreamDestroy(stream_);
}

int32_t CudaTransformer::kv_blocks() const { return impl_->num_blocks; }

KvStoreConfig CudaTransformer::kv_config() const {
  return kv_store_layout(config_, impl_->num_blocks, impl_->block_size, /*device_pool=*/true);
}

std::vector<std::string> CudaTransformer::gemm_algorithms() const {
  if (options_.gemm == CudaGemm::mma) {
    // The projections with an epilogue of their own, then the rest (plain gemm_mma_bf16).
    const bool rope = impl_->qkv_rope, silu = impl_->gate_up_silu;
    if (!rope && !silu) return {"all: gemm_mma_bf16"};
    std::vector<std::string> a;
    if (rope) a.push_back("qkv: gemm_mma_rope_kv_bf16 (RoPE and K/V scatter in its epilogue)");
    a.push_back(std::string(rope ? "" : "qkv, ") + "o_proj, down_proj, lm_head" + (silu ? "" : ", gate_up") +
                ": gemm_mma_bf16");
    if (silu) a.push_back("gate_up: gemm_mma_silu_bf16 (SiLU gate in its epilogue)");
    return a;
  }
  if (options_.gemm == CudaGemm::rows) return {"all: gemm_rows_bf16"};
  const cuda::TransformerState& d = *impl_;
  return {"qkv: " + d.g_qkv.description(), "o_proj: " + d.g_o.description(),
          "gate_up: " + d.g_gate_up.description(), "down_proj: " + d.g_down.description(),
          "lm_head: " + d.g_head.description()};
}

void CudaTransformer::read_pool(int32_t layer, std::vector<float>& k, std::vector<float>& v) {
  cuda::TransformerState& d = *impl_;
  const std::lock_guard stream_lock(d.stream_mutex);
  const size_t n = static_cast<size_t>(d.num_blocks) * static_cast<size_t>(d.block_size) *
                   static_cast<size_t>(config_.kv_dim());
  apply_block_copies(nullptr);
  cuda_try(cudaStreamSynchronize(stream_), "sync");
  // BF16 elements come back widened to floats (exact).
  const auto read = [&](const void* pool, std::vector<float>& out) {
    out.resize(n);
    if (d.kv_dtype == DType::f32) {
      cuda_try(cudaMemcpy(out.data(), pool, n * sizeof(float), cudaMemcpyDeviceToHost), "pool read");
      return;
    }
    std::vector<uint16_t> bits(n);
    cuda_try(cudaMemcpy(bits.data(), pool, n * sizeof(uint16_t), cudaMemcpyDeviceToHost), "pool read");
    for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(bits[i]);
  };
  read(d.pool_k.at(static_cast<size_t>(layer)), k);
  read(d.pool_v.at(static_cast<size_t>(layer)), v);
}

void CudaTransformer::summarise_key_blocks(std::span<const int32_t> blocks, float* kmax, float* kmin) {
  cuda::TransformerState& d = *impl_;
  check_summary_blocks(blocks);
  if (blocks.empty()) return;
  const int64_t kvd = config_.kv_dim(), n = static_cast<int64_t>(blocks.size());
  const size_t ids_bytes = cuda::align_up(static_cast<size_t>(n) * 4, 256);
  const size_t layer_floats = static_cast<size_t>(n * kvd);
  const size_t bytes = ids_bytes + 2 * layer_floats * static_cast<size_t>(config_.num_layers) * sizeof(float);
  const std::lock_guard stream_lock(d.stream_mutex);
  settle_launched_chain();
  cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  apply_block_copies(nullptr);  // copy-on-write of a block first
  if (bytes > d.summaries.bytes()) {
    cuda_try(cudaStreamSynchronize(stream_), "sync");
    d.summaries.allocate(bytes, &device_bytes_);
  }
  auto* ids = d.summaries.as<int32_t>();
  float* out = reinterpret_cast<float*>(d.summaries.as<unsigned char>() + ids_bytes);
  cuda_try(cudaMemcpyAsync(ids, blocks.data(), static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice, stream_),
           "summary blocks upload");
  for (int32_t l = 0; l < config_.num_layers; ++l)
    cuda_try(cuda::key_block_summaries(d.pool_k[static_cast<size_t>(l)], kvd, d.block_size, static_cast<int32_t>(kvd),
                                       ids, static_cast<int32_t>(n), out + 2 * l * layer_floats,
                                       out + (2 * l + 1) * layer_floats, stream_),
             "block summaries");
  for (int32_t l = 0; l < config_.num_layers; ++l) {
    cuda_try(cudaMemcpyAsync(kmax + l * layer_floats, out + 2 * l * layer_floats, layer_floats * sizeof(float),
                             cudaMemcpyDeviceToHost, stream_),
             "summaries to the host");
    cuda_try(cudaMemcpyAsync(kmin + l * layer_floats, out + (2 * l + 1) * layer_floats, layer_floats * sizeof(float),
                             cudaMemcpyDeviceToHost, stream_),
             "summaries to the host");
  }
  cuda_try(cudaStreamSynchronize(stream_), "block summaries");
}

const float* CudaTransformer::staged_k(int32_t layer) const {
  if (impl_->stage.bytes() == 0 || layer < 0 || layer >= config_.num_layers)
    fail(ErrorCode::invalid_argument, "CUDA forward: no staged rows of layer {}", layer);
  return impl_->stage_rows(layer, false, options_.max_tokens, config_.kv_dim());
}

const float* CudaTransformer::staged_v(int32_t layer) const {
  staged_k(layer);  // the same checks
  return impl_->stage_rows(layer, true, options_.max_tokens, config_.kv_dim());
}

void* CudaTransformer::device_alloc(size_t bytes) {
  const std::lock_guard stream_lock(impl_->stream_mutex);
  cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  void* ptr = nullptr;
  if (cudaMalloc(&ptr, std::max<size_t>(bytes, 1)) != cudaSuccess) {
    cudaGetLastError();  // out of memory is an answer here, not a sticky error
    return nullptr;
  }
  return ptr;
}

void CudaTransformer::device_free(void* ptr) {
  if (!ptr) return;
  const std::lock_guard stream_lock(impl_->stream_mutex);
  cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  cuda_try(cudaFree(ptr), "device free");  // waits for the work that still reads it
}

void CudaTransformer::copy_async(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  const std::lock_guard stream_lock(impl_->stream_mutex);
  cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  cuda_try(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "staging copy");
}

void CudaTransformer::write_slots(int32_t layer, const float* k, const float* v, const int64_t* slots, int64_t n) {
  cuda::TransformerState& d = *impl_;
  const int64_t total_slots = int64_t{d.num_blocks} * d.block_size;
  if (layer < 0 || layer >= config_.num_layers)
    fail(ErrorCode::invalid_argument, "CUDA write_slots: layer {} of {}", layer, config_.num_layers);
  for (int64_t i = 0; i < n; ++i)
    if (slots[i] < 0 || slots[i] >= total_slots)
      fail(ErrorCode::invalid_argument, "CUDA write_slots: slot {} outside the pool of {}", slots[i], total_slots);
  if (n == 0) return;
  const std::lock_guard stream_lock(d.stream_mutex);
  cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  const int64_t kvd = config_.kv_dim();
  const int64_t chunk = options_.max_tokens;  // the slots buffer's capacity
  if (d.write_slots.bytes() == 0) d.write_slots.allocate(static_cast<size_t>(chunk) * sizeof(int64_t), &device_bytes_);
  for (int64_t at = 0; at < n; at += chunk) {
    const auto rows = static_cast<int32_t>(std::min(chunk, n - at));
    // From pageable memory: the call returns once the slots are staged, so the caller's
    // array may go; the buffer's next upload is ordered after this scatter.
    cuda_try(cudaMemcpyAsync(d.write_slots.as<int64_t>(), slots + at, static_cast<size_t>(rows) * sizeof(int64_t),
                             cudaMemcpyHostToDevice, stream_),
             "slots upload");
    cuda_try(cuda::kv_scatter(k + at * kvd, v + at * kvd, kvd, kvd, d.write_slots.as<int64_t>(), rows,
                              d.pool_k[static_cast<size_t>(layer)], d.pool_v[static_cast<size_t>(layer)], kvd,
                              d.kv_dtype, stream_),
             "write_slots scatter");
  }
}

void CudaTransformer::setup_fused_step() {
  const ModelConfig& c = config_;
  cuda::TransformerState& d = *impl_;
  bool biases = false;
  std::vector<cuda::FusedLayer> layers;
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const cuda::TransformerState::Layer& w = d.layers[static_cast<size_t>(l)];
    biases = biases || w.qkv_bias || w.o_bias || w.gate_up_bias || w.down_bias;
    layers.push_back({w.qkv, w.o, w.gate_up, w.down, w.input_norm, w.post_norm, c.qk_norm ? w.q_norm : nullptr,
                      c.qk_norm ? w.k_norm : nullptr, d.pool_k[static_cast<size_t>(l)],
                      d.pool_v[static_cast<size_t>(l)]});
  }
  cuda::FusedModel& m = d.fused;
  m = {c.num_layers, static_cast<int32_t>(c.hidden_size), c.num_heads, c.num_kv_heads, c.head_dim,
       static_cast<int32_t>(c.intermediate_size), static_cast<int32_t>(c.vocab_size), d.block_size,
       c.rms_norm_eps, d.embed, d.lm_head, d.final_norm, d.rope_cos, d.rope_sin, nullptr};
  if (const char* why = cuda::fused_step_unsupported(m, biases)) {
    d.fused_why = why;
    return;
  }
  if (d.kv_dtype != DType::f32) {
    d.fused_why = "the fused step reads an FP32 K/V pool; this one is BF16 (kv dtype)";
    return;
  }
  int32_t wanted = options_.fused_blocks;
  if (wanted == 0 && options_.fused_sm_share < 1.0f) {
    int sms = 0;
    cuda_try(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, options_.device), "SM count");
    wanted = std::max(1, static_cast<int32_t>(static_cast<float>(sms) * options_.fused_sm_share));
  }
  int32_t blocks = 0;
  cuda_try(cuda::fused_step_blocks(m, options_.device, wanted, &blocks), "fused step occupancy");
  if (blocks == 0) {
    d.fused_why = "the fused kernel cannot keep its grid resident on this device";
    return;
  }
  d.fused_layers.allocate(layers.size() * sizeof(cuda::FusedLayer), &device_bytes_);
  cuda_try(cudaMemcpy(d.fused_layers.as<void>(), layers.data(), layers.size() * sizeof(cuda::FusedLayer),
                      cudaMemcpyHostToDevice),
           "fused layer table");
  m.layer = d.fused_layers.as<cuda::FusedLayer>();
  d.fused_scratch.allocate(static_cast<size_t>(cuda::fused_scratch_floats(m, blocks)) * sizeof(float), &device_bytes_);
  d.fused_sc = cuda::fused_scratch_carve(m, d.fused_scratch.as<float>());
  if (options_.fused_trace) {
    d.fused_trace_buf.allocate(cuda::kFusedTraceSlots * sizeof(long long), &device_bytes_);
    cuda_try(cudaMemset(d.fused_trace_buf.as<void>(), 0, d.fused_trace_buf.bytes()), "trace clear");
    d.fused_sc.trace = d.fused_trace_buf.as<long long>();
  }
  d.fused_blocks = blocks;
  d.fused_why.clear();
}

std::vector<long long> CudaTransformer::fused_trace() {
  cuda::TransformerState& d = *impl_;
  std::vector<long long> marks(cuda::kFusedTraceSlots, 0), phases;
  if (d.fused_trace_buf.bytes() == 0) return phases;
  const std::lock_guard lock(d.stream_mutex);
  cuda_try(cudaStreamSynchronize(stream_), "trace sync");
  cuda_try(cudaMemcpy(marks.data(), d.fused_trace_buf.as<void>(), d.fused_trace_buf.bytes(), cudaMemcpyDeviceToHost),
           "trace copy");
  for (size_t i = 1; i < marks.size() && marks[i] > marks[i - 1]; ++i) phases.push_back(marks[i] - marks[i - 1]);
  return phases;
}

bool CudaTransformer::fused_step_active() const { return impl_->fused_blocks > 0; }
std::string CudaTransformer::fused_step_refusal() const { return impl_->fused_why; }

void CudaTransformer::allocate_metadata() {
  cuda::TransformerState& d = *impl_;
  // With a ring a block table also names host-tier blocks: room for every position's.
  d.meta_layout = cuda::forward_meta_layout(config_, options_.max_tokens, d.num_blocks, d.block_size,
                                            /*host_tier=*/d.ring != nullptr);
  if (d.meta.bytes() == d.meta_layout.bytes()) return;
  d.graphs.clear();  // they hold the old buffer's addresses
  size_t meta_total = 0;
  d.meta.allocate(d.meta_layout.bytes(), &meta_total);
  d.meta_host.allocate(d.meta_layout.bytes());
}

void CudaTransformer::enable_layer_ring(int32_t slots, bool overlap) {
  cuda::TransformerState& d = *impl_;
  const std::lock_guard stream_lock(d.stream_mutex);
  cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  auto ring = std::make_unique<cuda::DeviceLayerRing>(slots, stream_, overlap);  // checks slots first
  settle_launched_chain();
  cuda_try(cudaStreamSynchronize(stream_), "sync");  // nothing may still read the metadata
  d.ring = std::move(ring);
  if (d.num_blocks > 0) allocate_metadata();
}

RingStats CudaTransformer::ring_stats() const { return impl_->ring ? impl_->ring->stats() : RingStats{}; }

size_t CudaTransformer::ring_device_bytes() const { return impl_->ring ? impl_->ring->device_bytes() : 0; }

void CudaTransformer::forward(std::span<const ForwardWindow> windows, const KvStore& kv, CudaLogits& out) {
  run(windows, 1, false, kv, out);
}

void CudaTransformer::forward_greedy_chain(std::span<const ForwardWindow> windows, int32_t steps, const KvStore& kv,
                                           std::vector<int32_t>& ids) {
  run_chain(windows, steps, kv, /*defer=*/false);
  ids = chain_ids_;
}

void CudaTransformer::forward_sampled_chain(std::span<const ForwardWindow> windows, int32_t steps,
                                            const ForwardModel::ChainSampling& sampling, const KvStore& kv,
                                            std::vector<int32_t>& ids, std::vector<float>& q) {
  check_chain_sampling(sampling, windows.size(), steps);
  run_chain(windows, steps, kv, /*defer=*/false, 0, -1, &sampling);
  ids = chain_ids_;
  if (sampling.q_on_device) {
    q.clear();
    return;
  }
  // run() copied the q rows to the pinned buffer before its sync.
  const float* rows = impl_->chain_q_host.as<float>();
  q.assign(rows, rows + static_cast<size_t>(steps) * windows.size() * static_cast<size_t>(config_.vocab_size));
}

const float* CudaTransformer::chain_q_device() const { return impl_->chain_q.as<float>(); }

Event CudaTransformer::launch_sampled_chain(std::span<const ForwardWindow> windows, int32_t steps,
                                            const ForwardModel::ChainSampling& sampling, const KvStore& kv) {
  check_chain_sampling(sampling, windows.size(), steps);
  if (!sampling.q_on_device)
    fail(ErrorCode::invalid_argument, "CUDA forward: a launched sampled chain must keep its q rows on the device");
  run_chain(windows, steps, kv, /*defer=*/true, 0, -1, &sampling);
  return launched_done_;
}

namespace {
/// Where the uniforms start in TransformerState::sample_params (after the 1 / temperature
/// of max_tokens windows).
size_t sample_uniforms_offset(int32_t max_tokens) {
  return cuda::align_up(static_cast<size_t>(max_tokens) * sizeof(float), 256);
}
}  // namespace

void CudaTransformer::prepare_chain_sampling(const ForwardModel::ChainSampling& sample, int32_t windows,
                                             int32_t steps) {
  cuda::TransformerState& d = *impl_;
  const size_t u_at = sample_uniforms_offset(options_.max_tokens);
  if (d.sample_params.bytes() == 0) {
    const size_t bytes = u_at + static_cast<size_t>(options_.max_tokens) * kMaxChainSteps * sizeof(double);
    d.sample_params.allocate(bytes, &device_bytes_);
    d.sample_host.allocate(bytes);
  }
  const size_t q_bytes =
      static_cast<size_t>(steps) * static_cast<size_t>(windows) * static_cast<size_t>(config_.vocab_size) * sizeof(float);
  if (q_bytes > d.chain_q.bytes()) {
    // Graphs of sampled chains bake the buffer: grow it rarely (doubling), after the
    // work that may still use it.
    cuda_try(cudaStreamSynchronize(stream_), "sync");
    d.graphs.clear();
    const size_t bytes = std::max(q_bytes, 2 * d.chain_q.bytes());
    d.chain_q.allocate(bytes, &device_bytes_);
    d.chain_q_host.allocate(bytes);
  }
  // The pinned buffer is free: the last sampled chain ended with a sync, or was launched
  // and run() settled it (complete) before coming here.
  auto* inv_t = d.sample_host.as<float>();
  auto* u = reinterpret_cast<double*>(d.sample_host.as<unsigned char>() + u_at);
  for (int32_t w = 0; w < windows; ++w) {
    const float t = sample.temperature[static_cast<size_t>(w)];
    inv_t[w] = t > 0.0f ? 1.0f / t : 0.0f;  // as cpu::sampling_distribution's inv_t
  }
  std::copy(sample.uniforms.begin(), sample.uniforms.end(), u);
  unsigned char* dev = d.sample_params.as<unsigned char>();
  cuda_try(cudaMemcpyAsync(dev, inv_t, static_cast<size_t>(windows) * sizeof(float), cudaMemcpyHostToDevice, stream_),
           "chain temperatures upload");
  cuda_try(cudaMemcpyAsync(dev + u_at, u, sample.uniforms.size() * sizeof(double), cudaMemcpyHostToDevice, stream_),
           "chain uniforms upload");
}

Event CudaTransformer::launch_greedy_chain(std::span<const ForwardWindow> windows, int32_t steps, const KvStore& kv,
                                           int32_t early, int32_t slot) {
  if (early < 0 || early > steps)
    fail(ErrorCode::invalid_argument, "CUDA forward: the ids of {} early steps of a chain of {}", early, steps);
  if (slot >= 0 && early < 1)
    fail(ErrorCode::invalid_argument, "CUDA forward: a slot for the early ids of a chain without early steps");
  if (slot >= 0 && static_cast<size_t>(slot) >= impl_->early_slots.size())
    impl_->early_slots.resize(static_cast<size_t>(slot) + 1);
  if (slot >= 0 && !impl_->early_slots[static_cast<size_t>(slot)]) {
    cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
    auto buffer = std::make_unique<cuda::DeviceBuffer>();
    buffer->allocate(static_cast<size_t>(options_.max_tokens) * kMaxChainSteps * sizeof(int32_t), &device_bytes_);
    impl_->early_slots[static_cast<size_t>(slot)] = std::move(buffer);
  }
  run_chain(windows, steps, kv, /*defer=*/true, early, slot);
  return launched_done_;
}

DeviceIds CudaTransformer::early_ids() const {
  const int32_t* ids =
      early_slot_ >= 0 ? impl_->early_slots[static_cast<size_t>(early_slot_)]->as<int32_t>() : impl_->argmax;
  return {ids, 1, {DeviceKind::cuda, options_.device}, early_done_};
}

void CudaTransformer::place_tokens(std::span<const ForwardModel::PlacedToken> placed, std::span<const Event> ready) {
  placed_.assign(placed.begin(), placed.end());
  placed_ready_.assign(ready.begin(), ready.end());
}

void CudaTransformer::run_chain(std::span<const ForwardWindow> windows, int32_t steps, const KvStore& kv, bool defer,
                                int32_t early, int32_t slot, const ForwardModel::ChainSampling* sample) {
  const bool copy = options_.copy_logits;
  options_.copy_logits = false;
  try {
    run(windows, steps, true, kv, chain_logits_, defer, early, slot, sample);
  } catch (...) {
    options_.copy_logits = copy;
    throw;
  }
  options_.copy_logits = copy;
}

void CudaTransformer::collect_greedy_chain(std::vector<int32_t>& ids) {
  {
    const std::lock_guard stream_lock(impl_->stream_mutex);
    settle_launched_chain();
  }
  if (!launched_ready_) fail(ErrorCode::invalid_argument, "CUDA forward: no launched greedy chain to collect");
  launched_ready_ = false;
  ids = launched_chain_ids_;
}

void CudaTransformer::settle_launched_chain() {
  if (launched_ids_ == 0) return;
  const int32_t count = launched_ids_;
  launched_ids_ = 0;
  cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  // Another stream's sync may have covered the chain already (the verifier's forward
  // joins it): then the query is all it costs.
  const Event done = std::exchange(launched_done_, Event{});
  early_done_ = {};
  if (!done.complete()) cuda_try(cudaStreamSynchronize(stream_), "launched chain");
  const int32_t* host_ids = impl_->host_ids(options_.max_tokens, config_.vocab_size);
  launched_chain_ids_.assign(host_ids, host_ids + count);
  launched_ready_ = true;
}

void CudaTransformer::run(std::span<const ForwardWindow> windows, int32_t steps, bool chain, const KvStore& kv,
                          CudaLogits& out, bool defer, int32_t early, int32_t slot,
                          const ForwardModel::ChainSampling* sample) {
  const ModelConfig& c = config_;
  cuda::TransformerState& d = *impl_;
  // A launched sampled chain (launch_sampled_chain) has no sync to copy its q rows back
  // before: they stay on the device.
  if (sample && (!chain || (defer && (!sample->q_on_device || early > 0 || slot >= 0))))
    fail(ErrorCode::internal, "CUDA forward: sampling outside a chain, or in a launched one with its q copied back");
  // A staged round's rows go to the staging buffer: its "slots" are the row indices.
  const bool stage = stage_rows_ && !chain;
  // The host plan (every check; tokens, positions, slots, block tables, attention windows,
  // logit rows), before the device is touched.
  cuda::ForwardPlan plan = cuda::plan_forward(windows, steps, chain, stage, kv, c,
                                              {options_.max_tokens, d.num_blocks, d.block_size, d.meta_layout});

  const std::lock_guard stream_lock(d.stream_mutex);
  // Every launch and graph capture below (early_launch.h: a draft beside a verify).
  const cuda::NoOneRowEarlyLaunch one_row_scope(!options_.one_row_early_launch);
  // Another stream's work this forward's sync covers (taken now: a failure drops it).
  const Event join = defer ? Event{} : std::exchange(join_, Event{});
  // Input ids read on the device (place_tokens), taken now (a failure drops them):
  // references to their source in the plan.
  placed_values_.clear();
  const std::vector<ForwardModel::PlacedToken> placed = chain ? decltype(placed_){} : std::exchange(placed_, {});
  const std::vector<Event> placed_ready = chain ? decltype(placed_ready_){} : std::exchange(placed_ready_, {});
  const int32_t* placed_base = place_planned_tokens(plan, placed);
  const bool placing = placed_base != nullptr;
  settle_launched_chain();  // its ids come back in the pinned buffer this forward reuses
  // CAF runs an actor on any of its threads; the device is per thread.
  cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  // Copy-on-write of prefix-cache blocks and moves to and from the host tier, before
  // anything reads them.
  apply_block_copies(kv.host_tier());
  if (stage && d.stage.bytes() == 0)
    d.stage.allocate(static_cast<size_t>(2 * int64_t{c.num_layers} * options_.max_tokens * c.kv_dim()) * sizeof(float),
                     &device_bytes_);
  out.vocab_ = c.vocab_size;
  out.verdicts_.clear();
  out.first_ = plan.first_logit_row;
  out.rows_ = plan.window_logit_rows;
  upload_plan(plan);
  if (sample) prepare_chain_sampling(*sample, plan.windows(), steps);
  if (placing) {
    // Behind the producers' events (no host sync): the references become their ids.
    for (const Event& e : placed_ready) e.wait_on({{DeviceKind::cuda, options_.device}, stream_});
    cuda_try(cuda::resolve_placed_ids(reinterpret_cast<int32_t*>(d.meta.as<unsigned char>() + d.meta_layout.tokens),
                                      plan.total_tokens, placed_base, stream_),
             "placed input ids");
  }
  // SpecPV: partial views read each layer's own windows and tables; query taps get
  // their windows' query rows back after the forward.
  if (plan.views()) upload_views(plan);
  const std::vector<cuda::QueryCopy> taps = query_copies(windows, plan);

  // The device side: every step (a graph per shape, or eagerly), then the copies back.
  // Offload: host-tier K/V stream through the layer ring, eagerly (the ring's copies and
  // their events are issued per forward, outside any graph) and never as the fused step
  // (it reads the pool only).
  const bool ring = plan.streams_host_kv();
  if (ring && !d.ring)
    fail(ErrorCode::invalid_argument,
         "CUDA forward: a sequence has K/V on the host tier but the model has no layer ring (enable_layer_ring)");
  // A tapped forward runs eagerly (its copies land in host memory picked per forward).
  const bool use_graph = options_.graphs && plan.total_tokens <= options_.graph_max_tokens && !ring && taps.empty();
  const int32_t max_chunks = attention_grid(plan, use_graph);
  // Small forwards as the one fused kernel when it is on (not in staged rounds, timing
  // studies or SpecPV rounds: it reads the step's one table).
  const bool fused =
      d.fused_blocks > 0 && !stage && options_.timing_skip == 0 && !ring && !plan.views() && taps.empty();
  cuda::StepSettings settings{options_.gemm,       fused,      stage,
                              options_.copy_logits, options_.max_tokens, max_chunks,
                              cuda::KernelSkip::from_mask(options_.timing_skip), ring ? d.ring.get() : nullptr};
  if (plan.views()) {
    settings.layer_meta = d.view_meta.as<unsigned char>();
    settings.layer_stride = d.view_stride;
    settings.layer_tables = cuda::view_tables_offset(plan);
  }
  settings.query_copies = taps.data();
  settings.num_query_copies = static_cast<int32_t>(taps.size());
  settings.sample = sample != nullptr;
  // A pending write-back with no ring forward to carry it goes in line, in front.
  if (!ring) flush_write_back(kv.host_tier());
  // A chain launched with early ids: steps [0, early), an event, the rest (a graph each).
  const bool split = chain && defer && early > 0 && early < steps;
  auto launch_steps = [&](int32_t from, int32_t to) {
    std::vector<int32_t> key = cuda::graph_key(plan, options_.copy_logits, options_.timing_skip);
    key.push_back(from);
    key.push_back(to == steps ? -2 : -1);  // a part's key ends negative, no whole forward's does
    if (use_graph)
      d.graphs.launch(key, stream_, [&] { enqueue_forward(plan, settings, from, to); });
    else
      enqueue_forward(plan, settings, from, to);
  };
  // A slot's early ids: copied out of the argmax buffer behind their steps, before the
  // event that guards them, so that the next chain (another round in flight) cannot
  // overwrite them before the verify forward of their round read them.
  const bool keep_early = chain && defer && slot >= 0 && early > 0;
  auto copy_early = [&] {
    cuda_try(cudaMemcpyAsync(d.early_slots[static_cast<size_t>(slot)]->as<int32_t>(), d.argmax,
                             static_cast<size_t>(early) * static_cast<size_t>(plan.windows()) * sizeof(int32_t),
                             cudaMemcpyDeviceToDevice, stream_),
             "early chain ids copy");
  };
  if (split) {  // never over host-tier K/V (plan_forward refuses such chains)
    launch_steps(0, early);
    if (keep_early) copy_early();
    early_done_ = Event::record({{DeviceKind::cuda, options_.device}, stream_});
    launch_steps(early, steps);
  } else if (use_graph) {
    std::vector<int32_t> key = cuda::graph_key(plan, options_.copy_logits, options_.timing_skip);
    if (sample) key.push_back(-3);  // the sampling kernels too (no other key ends in -3)
    d.graphs.launch(key, stream_, [&] { enqueue_forward(plan, settings); });
  } else if (ring) {
    // The blocks that left the pool since the last forward go to the host tier in the
    // ring's per-layer jobs (write_back.h); this forward's K/V scatter of layer l waits
    // for layer l's job only where it reuses one of those pool blocks.
    cuda::DeviceLayerRing::WriteBack write_back;
    bool fence_writes = false;
    const WriteBackBatch carried = d.write_back;
    if (!carried.empty()) {
      fence_writes = !stage && carried.writes_any(plan.slots, d.block_size);
      write_back = [this, &carried, host = kv.host_tier()](int32_t layer, cudaStream_t st) {
        enqueue_write_back(carried, *host, layer, st);
      };
    }
    // A begin that throws queued nothing: the batch stays pending. Past it the batch is
    // the ring's (a forward failing half way is a failed device, as for its own K/V).
    d.ring->begin(*kv.host_tier(), plan.ring_host_blocks, c.num_layers, std::move(write_back), fence_writes);
    d.write_back.clear();
    try {
      enqueue_forward(plan, settings);
      d.ring->finish();
    } catch (...) {
      d.ring->abandon();
      throw;
    }
  } else {
    enqueue_forward(plan, settings);
  }
  const Stream stream{{DeviceKind::cuda, options_.device}, stream_};
  if (defer) {
    if (keep_early && !split) copy_early();
    early_slot_ = keep_early ? slot : -1;
    launched_ids_ = steps * plan.windows();
    launched_ready_ = false;
    launched_done_ = Event::record(stream);
    if (!split) early_done_ = launched_done_;
    return;
  }
  const int32_t verdicts = chain ? 0 : enqueue_verdicts(windows, plan);
  // The input ids come back with the results: the placed ones are read from them.
  int32_t* host_tokens = d.host_ids(options_.max_tokens, c.vocab_size) + options_.max_tokens;
  if (placing)
    cuda_try(cudaMemcpyAsync(host_tokens, d.meta.as<unsigned char>() + d.meta_layout.tokens,
                             static_cast<size_t>(plan.total_tokens) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_),
             "placed input ids copy");
  const size_t q_floats = sample && !sample->q_on_device ? static_cast<size_t>(steps) * static_cast<size_t>(plan.windows()) *
                                       static_cast<size_t>(c.vocab_size)
                                 : 0;
  if (q_floats > 0)
    cuda_try(cudaMemcpyAsync(d.chain_q_host.as<float>(), d.chain_q.as<float>(), q_floats * sizeof(float),
                             cudaMemcpyDeviceToHost, stream_),
             "chain q copy");
  join.wait_on(stream);  // on the device, behind this forward's work
  cuda_try(cudaStreamSynchronize(stream_), "forward");
  read_results(plan, out);
  if (verdicts > 0) read_verdicts(windows, verdicts, out);
  if (placing)
    for (const ForwardModel::PlacedToken& p : placed) {
      const cuda::AttentionWindowDesc& w = plan.attention.windows[static_cast<size_t>(p.window)];
      placed_values_.push_back(host_tokens[w.first_token + p.offset]);
    }
  const int64_t qd = c.q_dim();
  size_t tap = 0;
  for (const ForwardWindow& w : windows) {
    if (!w.query_tap) continue;
    const cuda::QueryCopy& qc = taps[tap];
    if (qc.mass)
      for (int32_t l = 0; l < c.num_layers; ++l)
        w.query_tap->on_block_mass(l, qc.mass_host + int64_t{l} * qc.blocks, 1, 1, qc.blocks);
    if (qc.pos) w.query_tap->on_device_sums(static_cast<int32_t>(tap));  // device_retrieval_select reads them
    else
      for (int32_t l = 0; l < c.num_layers; ++l) w.query_tap->on_queries(l, qc.host + int64_t{l} * qc.n * qd, qc.n, qd);
    ++tap;
  }
}

void CudaTransformer::upload_views(const cuda::ForwardPlan& plan) {
  cuda::TransformerState& d = *impl_;
  const size_t need = cuda::view_layer_bytes(plan);
  const auto layers = static_cast<size_t>(config_.num_layers);
  if (need > d.view_stride) {
    // Graphs of view forwards bake the buffer and its stride: grow it rarely (doubling).
    cuda_try(cudaStreamSynchronize(stream_), "sync");
    d.graphs.clear();
    const size_t stride = cuda::align_up(std::max(need, 2 * d.view_stride), 256);
    d.view_meta.allocate(stride * layers, &device_bytes_);
    d.view_meta_host.allocate(stride * layers);
    d.view_stride = stride;
  }
  // The previous forward's uploads have completed (it ended with a sync).
  cuda::pack_view_meta(plan, config_.num_layers, d.view_stride, {d.view_meta_host.as<unsigned char>(), d.view_meta_host.bytes()});
  cuda_try(cudaMemcpyAsync(d.view_meta.as<unsigned char>(), d.view_meta_host.as<unsigned char>(), d.view_stride * layers,
                           cudaMemcpyHostToDevice, stream_),
           "view metadata upload");
}

std::vector<cuda::QueryCopy> CudaTransformer::query_copies(std::span<const ForwardWindow> windows,
                                                           const cuda::ForwardPlan& plan) {
  cuda::TransformerState& d = *impl_;
  std::vector<cuda::QueryCopy> taps;
  std::vector<bool> summed;  // a tap for the device's retrieval: its queries' sums stay on the device
  int64_t rows = 0;
  for (size_t w = 0; w < windows.size(); ++w)
    if (windows[w].query_tap) {
      if (plan.chain) fail(ErrorCode::invalid_argument, "CUDA forward: a query tap on a greedy chain");
      const cuda::AttentionWindowDesc& a = plan.attention.windows[w];
      taps.push_back({a.first_token, a.n, nullptr});
      summed.push_back(windows[w].query_tap->wants_device_sums());
      if (!summed.back()) rows += a.n;
    }
  // Both buffers are free: the last forward and the last retrieval on the device synced.
  const size_t bytes = static_cast<size_t>(rows * config_.num_layers * config_.q_dim()) * sizeof(float);
  if (bytes > d.query_host.bytes()) d.query_host.allocate(bytes);
  const int64_t sums_per_tap = 2 * int64_t{config_.num_layers} * config_.kv_dim();
  const size_t sums_bytes = static_cast<size_t>(sums_per_tap) * taps.size() * sizeof(double);
  if (sums_bytes > d.query_sums.bytes()) d.query_sums.allocate(sums_bytes, &device_bytes_);
  float* at = d.query_host.as<float>();
  for (size_t i = 0; i < taps.size(); ++i) {
    cuda::QueryCopy& t = taps[i];
    if (summed[i]) {
      t.pos = d.query_sums.as<double>() + static_cast<int64_t>(i) * sums_per_tap;
      t.neg = t.pos + sums_per_tap / 2;
      continue;
    }
    t.host = at;
    at += int64_t{t.n} * config_.num_layers * config_.q_dim();
  }
  block_mass_copies(windows, plan, taps);
  return taps;
}

void CudaTransformer::block_mass_copies(std::span<const ForwardWindow> windows, const cuda::ForwardPlan& plan,
                                        std::vector<cuda::QueryCopy>& taps) {
  cuda::TransformerState& d = *impl_;
  if (d.kv_dtype != DType::f32) return;  // the mass kernels read FP32 keys: Quest chooses (counted)
  const int32_t layers = config_.num_layers, B = d.block_size;
  int64_t mass_floats = 0, lse_floats = 0;
  std::vector<size_t> tapped;  // window of each tap
  for (size_t w = 0; w < windows.size(); ++w)
    if (windows[w].query_tap) tapped.push_back(w);
  for (size_t i = 0; i < taps.size(); ++i) {
    const ForwardWindow& fw = windows[tapped[i]];
    if (!fw.query_tap->wants_block_mass() || fw.view) continue;
    const cuda::AttentionWindowDesc& a = plan.attention.windows[tapped[i]];
    taps[i].prefix_len = a.prefix_len;
    taps[i].blocks = (a.prefix_len + B - 1) / B;
    mass_floats += int64_t{layers} * taps[i].blocks;
    lse_floats = std::max(lse_floats, int64_t{a.n} * config_.num_heads * (taps[i].blocks + 1));
  }
  if (mass_floats == 0) return;
  const auto bytes = [](int64_t floats) { return static_cast<size_t>(floats) * sizeof(float); };
  if (bytes(mass_floats) > d.block_mass.bytes()) d.block_mass.allocate(bytes(mass_floats), &device_bytes_);
  if (bytes(mass_floats) > d.block_mass_host.bytes()) d.block_mass_host.allocate(bytes(mass_floats));
  if (bytes(lse_floats) > d.block_mass_lse.bytes()) d.block_mass_lse.allocate(bytes(lse_floats), &device_bytes_);
  d.block_mass_tables.assign(taps.size() * static_cast<size_t>(layers), 0);
  int64_t at = 0;
  for (size_t i = 0; i < taps.size(); ++i) {
    if (taps[i].blocks == 0) continue;
    cuda::QueryCopy& t = taps[i];
    t.mass = d.block_mass.as<float>() + at;
    t.mass_host = d.block_mass_host.as<float>() + at;
    t.lse = d.block_mass_lse.as<float>();
    at += int64_t{layers} * t.blocks;
    int32_t* offsets = d.block_mass_tables.data() + i * static_cast<size_t>(layers);
    for (int32_t l = 0; l < layers; ++l)
      offsets[l] = plan.views() ? plan.layer_windows[static_cast<size_t>(l) * static_cast<size_t>(plan.windows()) + tapped[i]].block_table_offset
                                : plan.attention.windows[tapped[i]].block_table_offset;
    t.table_offset = offsets;
  }
}

void CudaTransformer::upload_plan(const cuda::ForwardPlan& plan) {
  cuda::TransformerState& d = *impl_;
  const cuda::ForwardMetaLayout& layout = d.meta_layout;
  unsigned char* hb = d.meta_host.as<unsigned char>();
  // The previous forward's upload has completed (forward() ends with a sync, a launched
  // chain was settled).
  cuda::pack_forward_meta(plan, layout, {hb, d.meta_host.bytes()});
  unsigned char* db = d.meta.as<unsigned char>();
  cuda_try(cudaMemcpyAsync(db, hb, plan.upload_bytes, cudaMemcpyHostToDevice, stream_), "metadata upload");
  if (plan.steps > 1)
    cuda_try(cudaMemcpyAsync(db + layout.chain, hb + layout.chain, layout.chain_bytes, cudaMemcpyHostToDevice, stream_),
             "chain metadata upload");
}

int32_t CudaTransformer::attention_grid(const cuda::ForwardPlan& plan, bool use_graph) {
  const cuda::TransformerState& d = *impl_;
  // A graph launches the chunk kernel over the pool's capacity of chunks (rows skip the
  // chunks past their keys); the workspace is sized for that in allocate_kv_pool. A row's
  // chunks and their merge order depend only on its position, so the bits are the same.
  const int32_t eager_chunks = plan.max_chunks;
  const int32_t max_chunks = use_graph ? d.capacity_chunks : eager_chunks;
  if (use_graph && eager_chunks > d.capacity_chunks)
    fail(ErrorCode::internal, "CUDA forward: {} attention chunks, the pool holds {}", eager_chunks,
         d.capacity_chunks);
  if (!use_graph) grow_workspace(plan.total_tokens, eager_chunks);
  return max_chunks;
}

void CudaTransformer::grow_workspace(int32_t rows, int32_t chunks) {
  const ModelConfig& c = config_;
  cuda::TransformerState& d = *impl_;
  const int64_t need_ws =
      int64_t{rows} * c.num_heads * chunks * (c.head_dim + 2) * static_cast<int64_t>(sizeof(float));
  if (static_cast<size_t>(need_ws) <= d.workspace.bytes()) return;
  cuda_try(cudaStreamSynchronize(stream_), "sync");
  d.graphs.clear();  // they hold the old workspace's address
  d.workspace.allocate(static_cast<size_t>(need_ws), &device_bytes_);
}

const int32_t* CudaTransformer::place_planned_tokens(cuda::ForwardPlan& plan,
                                                     std::span<const ForwardModel::PlacedToken> placed) {
  if (placed.empty()) return nullptr;
  // A reference is -1 - the id's index from the lowest address placed.
  const int32_t* base = placed.front().at;
  for (const ForwardModel::PlacedToken& p : placed) base = std::min(base, p.at);
  for (const ForwardModel::PlacedToken& p : placed) {
    const auto w = static_cast<size_t>(p.window);
    if (p.window < 0 || w >= plan.attention.windows.size() || p.offset < 0 ||
        p.offset >= plan.attention.windows[w].n || p.at - base >= INT32_MAX)
      fail(ErrorCode::invalid_argument, "CUDA forward: a placed token at window {} token {} is not in the forward",
           p.window, p.offset);
    plan.tokens[static_cast<size_t>(plan.attention.windows[w].first_token + p.offset)] =
        -1 - static_cast<int32_t>(p.at - base);
  }
  return base;
}

void CudaTransformer::enqueue_forward(const cuda::ForwardPlan& plan, const cuda::StepSettings& settings, int32_t from,
                                      int32_t to) {
  if (to < 0) to = plan.steps;
  const cuda::TransformerState& d = *impl_;
  const cuda::ForwardMetaLayout& layout = d.meta_layout;
  const int64_t V = config_.vocab_size;
  const unsigned char* db = d.meta.as<unsigned char>();
  const int32_t nw = plan.windows();
  // Every step, then the copies back: the argmax of each step's rows (a chain's steps lie
  // back to back: nw ids each), and the last step's logits when asked.
  const auto* d_ident = reinterpret_cast<const int32_t*>(db + layout.identity);
  const auto* d_bt = reinterpret_cast<const int32_t*>(db + layout.tables);
  // A sampled chain: step s's rows draw with uniforms [s * nw, (s + 1) * nw) and keep
  // their q rows at s * nw * V (prepare_chain_sampling's buffers).
  auto sampled = [&](cuda::StepMeta m, int32_t s) {
    if (settings.sample) {
      m.sample_inv_t = d.sample_params.as<float>();
      m.sample_u = reinterpret_cast<const double*>(d.sample_params.as<unsigned char>() +
                                                   sample_uniforms_offset(options_.max_tokens)) +
                   int64_t{s} * nw;
      m.sample_q = d.chain_q.as<float>() + int64_t{s} * nw * V;
    }
    return m;
  };
  if (from == 0)
    cuda::enqueue_decoder_step(
        d, config_, settings,
        sampled({reinterpret_cast<const int64_t*>(db + layout.slots), reinterpret_cast<const int32_t*>(db + layout.tokens),
                 reinterpret_cast<const int32_t*>(db + layout.positions),
                 reinterpret_cast<const int32_t*>(db + layout.token_window),
                 reinterpret_cast<const int32_t*>(db + layout.logit_index), d_bt,
                 reinterpret_cast<const cuda::AttentionWindowDesc*>(db + layout.windows), plan.total_tokens,
                 plan.logit_rows, d.argmax, plan.attention.min_window_rows(), /*prefix_settled=*/true},
                0),
        stream_);
  for (int32_t s = std::max(1, from); s < to; ++s)
    cuda::enqueue_decoder_step(
        d, config_, settings,
        sampled({reinterpret_cast<const int64_t*>(db + layout.chain_slots(s)), d.argmax + (s - 1) * nw,
                 reinterpret_cast<const int32_t*>(db + layout.chain_positions(s)), d_ident, d_ident, d_bt,
                 reinterpret_cast<const cuda::AttentionWindowDesc*>(db + layout.chain_windows(s)), nw, nw,
                 d.argmax + s * nw, 1},
                s),
        stream_);
  if (to < plan.steps) return;  // the copies back go with the last step
  const int32_t ids = plan.ids();
  if (ids > 0)
    cuda_try(cudaMemcpyAsync(d.host_ids(options_.max_tokens, V), d.argmax, static_cast<size_t>(ids) * 4,
                             cudaMemcpyDeviceToHost, stream_),
             "argmax copy");
  if (settings.copy_logits && plan.logit_rows > 0)
    cuda_try(cudaMemcpyAsync(d.out_host.as<float>(), d.logits, static_cast<size_t>(plan.logit_rows * V) * sizeof(float),
                             cudaMemcpyDeviceToHost, stream_),
             "logits copy");
}

void CudaTransformer::read_results(const cuda::ForwardPlan& plan, CudaLogits& out) {
  const cuda::TransformerState& d = *impl_;
  const int64_t V = config_.vocab_size;
  const int32_t* host_ids = d.host_ids(options_.max_tokens, V);
  const int32_t nw = plan.windows(), steps = plan.steps, logit_rows = plan.logit_rows;
  if (plan.chain) {
    chain_ids_.assign(host_ids, host_ids + steps * nw);
    out.argmax_.assign(host_ids + (steps - 1) * nw, host_ids + steps * nw);
    out.data_.clear();
  } else if (logit_rows > 0) {
    out.argmax_.assign(host_ids, host_ids + logit_rows);
    if (options_.copy_logits)
      out.data_.assign(d.out_host.as<float>(), d.out_host.as<float>() + static_cast<int64_t>(logit_rows) * V);
    else
      out.data_.clear();
  } else {
    out.argmax_.clear();
    out.data_.clear();
  }
}

}  // namespace specpipe
