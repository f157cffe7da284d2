#include "model/cuda/cuda_transformer.h"

#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kv_cache.h"
#include "model/cuda/model_ops.h"

namespace specpipe {
namespace {

void cuda_try(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail(ErrorCode::internal, "CUDA forward: {}: {}", what, cudaGetErrorString(status));
}
void lt_try(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail(ErrorCode::internal, "CUDA forward: {}: cuBLASLt status {}", what, static_cast<int>(status));
}

/// Device memory that frees itself.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void allocate(size_t bytes, size_t& total) {
    reset();
    if (bytes == 0) return;
    cuda_try(cudaMalloc(&ptr_, bytes), "cudaMalloc");
    bytes_ = bytes;
    total += bytes;
  }
  void reset() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// Pinned host memory that frees itself.
class PinnedBuffer {
 public:
  ~PinnedBuffer() { reset(); }
  void allocate(size_t bytes) {
    reset();
    cuda_try(cudaMallocHost(&ptr_, bytes), "cudaMallocHost");
    bytes_ = bytes;
  }
  void reset() {
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// A matrix in its disk dtype -> BF16 bits, round to nearest even (exact for BF16).
void append_bf16(const MatrixWeight& w, std::vector<uint16_t>& out) {
  const size_t count = static_cast<size_t>(w.rows * w.cols);
  const size_t at = out.size();
  out.resize(at + count);
  uint16_t* dst = out.data() + at;
  switch (w.dtype) {
    case DType::bf16:
      std::memcpy(dst, w.data, count * sizeof(uint16_t));
      break;
    case DType::f16: {
      const auto* src = static_cast<const uint16_t*>(w.data);
      for (size_t i = 0; i < count; ++i) dst[i] = f32_to_bf16(f16_to_f32(src[i]));
      break;
    }
    case DType::f32: {
      const auto* src = static_cast<const float*>(w.data);
      for (size_t i = 0; i < count; ++i) dst[i] = f32_to_bf16(src[i]);
      break;
    }
    default:
      fail(ErrorCode::unsupported, "CUDA forward: matrix of dtype {} is not supported", dtype_name(w.dtype));
  }
}

size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

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

struct CudaTransformer::Impl {
  struct Layer {
    uint16_t *qkv = nullptr, *o = nullptr, *gate_up = nullptr, *down = nullptr;  // bf16
    float *qkv_bias = nullptr, *o_bias = nullptr, *gate_up_bias = nullptr, *down_bias = nullptr;
    float *input_norm = nullptr, *post_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  };
  DeviceBuffer weights_bf16, weights_f32, rope, pool, scratch, meta, workspace;
  PinnedBuffer meta_host, out_host;
  std::vector<Layer> layers;
  uint16_t* embed = nullptr;
  uint16_t* lm_head = nullptr;
  float* final_norm = nullptr;
  float *rope_cos = nullptr, *rope_sin = nullptr;
  std::vector<float*> pool_k, pool_v;
  // scratch
  float *x = nullptr, *h = nullptr, *qkv = nullptr, *attn = nullptr, *gu = nullptr, *tmp = nullptr,
        *logits = nullptr;
  uint16_t* xb = nullptr;
  int32_t* argmax = nullptr;
  cublasLtHandle_t lt = nullptr;
  cuda::LtGemm g_qkv, g_o, g_gate_up, g_down, g_head;
  int32_t num_blocks = 0, block_size = 0;

  ~Impl() {
    if (lt) cublasLtDestroy(lt);
  }
};

CudaTransformer::CudaTransformer(const ModelConfig& config, const ModelWeights& weights, int32_t kv_blocks,
                                 int32_t block_size, CudaTransformerOptions options)
    : config_(config), options_(options), impl_(std::make_unique<Impl>()) {
  const ModelConfig& c = config_;
  if (kv_blocks < 1 || block_size < 1) fail(ErrorCode::invalid_argument, "CUDA forward: KV pool of {} blocks of {}", kv_blocks, block_size);
  if (options_.max_tokens < 1 || options_.max_tokens > 1024)
    fail(ErrorCode::invalid_argument, "CUDA forward: max_tokens {} outside [1, 1024]", options_.max_tokens);
  if (c.head_dim > 256 || c.num_heads % c.num_kv_heads != 0 || c.num_heads / c.num_kv_heads > 16)
    fail(ErrorCode::unsupported, "CUDA forward: head_dim {} with {} heads over {} kv heads is not supported",
         c.head_dim, c.num_heads, c.num_kv_heads);
  if (options_.gemm == CudaGemm::rows && (c.hidden_size % 8 != 0 || c.q_dim() % 8 != 0 || c.intermediate_size % 8 != 0))
    fail(ErrorCode::unsupported, "CUDA forward: gemm_rows_bf16 needs hidden, q_dim and intermediate sizes divisible by 8");
  cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  cuda_try(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  Impl& d = *impl_;
  d.num_blocks = kv_blocks;
  d.block_size = block_size;
  const int64_t H = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), I = c.intermediate_size, V = c.vocab_size;
  const int64_t qkvd = qd + 2 * kvd;

  // --- weights: every matrix as BF16 in one buffer, every vector as FP32 in another ---
  std::vector<uint16_t> bf;
  std::vector<float> f32;
  struct Offsets {
    size_t qkv, o, gate_up, down;
    int64_t qkv_bias = -1, o_bias = -1, gate_up_bias = -1, down_bias = -1, input_norm, post_norm, q_norm = -1,
            k_norm = -1;
  };
  std::vector<Offsets> offsets;
  auto push_f32 = [&](const std::vector<float>& v) {
    const auto at = static_cast<int64_t>(f32.size());
    f32.insert(f32.end(), v.begin(), v.end());
    f32.resize(align_up(f32.size(), 4));  // 16-byte aligned vectors
    return at;
  };
  auto pad_bf = [&] { bf.resize(align_up(bf.size(), 64)); };  // 128-byte aligned matrices
  const size_t embed_off = 0;
  append_bf16(weights.embed_tokens, bf);
  pad_bf();
  size_t head_off = embed_off;
  if (weights.lm_head.data != weights.embed_tokens.data) {
    head_off = bf.size();
    append_bf16(weights.lm_head, bf);
    pad_bf();
  }
  for (const LayerWeights& l : weights.layers) {
    Offsets o{};
    o.qkv = bf.size();
    append_bf16(l.q_proj, bf);
    append_bf16(l.k_proj, bf);
    append_bf16(l.v_proj, bf);
    pad_bf();
    o.o = bf.size();
    append_bf16(l.o_proj, bf);
    pad_bf();
    o.gate_up = bf.size();
    append_bf16(l.gate_proj, bf);
    append_bf16(l.up_proj, bf);
    pad_bf();
    o.down = bf.size();
    append_bf16(l.down_proj, bf);
    pad_bf();
    if (!l.q_bias.empty() || !l.k_bias.empty() || !l.v_bias.empty()) {
      std::vector<float> b(static_cast<size_t>(qkvd), 0.0f);
      std::copy(l.q_bias.begin(), l.q_bias.end(), b.begin());
      std::copy(l.k_bias.begin(), l.k_bias.end(), b.begin() + qd);
      std::copy(l.v_bias.begin(), l.v_bias.end(), b.begin() + qd + kvd);
      o.qkv_bias = push_f32(b);
    }
    if (!l.o_bias.empty()) o.o_bias = push_f32(l.o_bias);
    if (!l.gate_bias.empty() || !l.up_bias.empty()) {
      std::vector<float> b(static_cast<size_t>(2 * I), 0.0f);
      std::copy(l.gate_bias.begin(), l.gate_bias.end(), b.begin());
      std::copy(l.up_bias.begin(), l.up_bias.end(), b.begin() + I);
      o.gate_up_bias = push_f32(b);
    }
    if (!l.down_bias.empty()) o.down_bias = push_f32(l.down_bias);
    o.input_norm = push_f32(l.input_norm);
    o.post_norm = push_f32(l.post_attention_norm);
    if (c.qk_norm) {
      o.q_norm = push_f32(l.q_norm);
      o.k_norm = push_f32(l.k_norm);
    }
    offsets.push_back(o);
  }
  const int64_t final_off = push_f32(weights.final_norm);
  d.weights_bf16.allocate(bf.size() * sizeof(uint16_t), device_bytes_);
  d.weights_f32.allocate(f32.size() * sizeof(float), device_bytes_);
  cuda_try(cudaMemcpy(d.weights_bf16.as<void>(), bf.data(), bf.size() * sizeof(uint16_t), cudaMemcpyHostToDevice),
           "weight upload");
  cuda_try(cudaMemcpy(d.weights_f32.as<void>(), f32.data(), f32.size() * sizeof(float), cudaMemcpyHostToDevice),
           "weight upload");
  uint16_t* wb = d.weights_bf16.as<uint16_t>();
  float* wf = d.weights_f32.as<float>();
  auto fp = [&](int64_t off) { return off < 0 ? nullptr : wf + off; };
  d.embed = wb + embed_off;
  d.lm_head = wb + head_off;
  d.final_norm = wf + final_off;
  for (const Offsets& o : offsets)
    d.layers.push_back({wb + o.qkv, wb + o.o, wb + o.gate_up, wb + o.down, fp(o.qkv_bias), fp(o.o_bias),
                        fp(o.gate_up_bias), fp(o.down_bias), fp(o.input_norm), fp(o.post_norm), fp(o.q_norm),
                        fp(o.k_norm)});

  // --- RoPE table: the CPU table's cos/sin, bit for bit ---
  const cpu::RopeTable table(c.head_dim, c.rope_theta, c.max_position_embeddings);
  const size_t rope_floats = static_cast<size_t>(c.max_position_embeddings) * static_cast<size_t>(c.head_dim / 2);
  d.rope.allocate(2 * rope_floats * sizeof(float), device_bytes_);
  d.rope_cos = d.rope.as<float>();
  d.rope_sin = d.rope_cos + rope_floats;
  cuda_try(cudaMemcpy(d.rope_cos, table.cos(0), rope_floats * sizeof(float), cudaMemcpyHostToDevice), "rope upload");
  cuda_try(cudaMemcpy(d.rope_sin, table.sin(0), rope_floats * sizeof(float), cudaMemcpyHostToDevice), "rope upload");

  // --- KV pool: per layer K then V, [num_blocks * block_size, kvd] floats each ---
  const size_t layer_floats = static_cast<size_t>(kv_blocks) * static_cast<size_t>(block_size) * static_cast<size_t>(kvd);
  d.pool.allocate(2 * layer_floats * sizeof(float) * static_cast<size_t>(c.num_layers), device_bytes_);
  cuda_try(cudaMemset(d.pool.as<void>(), 0, d.pool.bytes()), "pool memset");
  for (int32_t l = 0; l < c.num_layers; ++l) {
    d.pool_k.push_back(d.pool.as<float>() + (2 * static_cast<size_t>(l)) * layer_floats);
    d.pool_v.push_back(d.pool.as<float>() + (2 * static_cast<size_t>(l) + 1) * layer_floats);
  }

  // --- scratch ---
  const int64_t M = options_.max_tokens;
  const int64_t widest = std::max({H, qd, I});
  const int64_t floats = M * (H + H + qkvd + qd + 2 * I + H + V);
  d.scratch.allocate(static_cast<size_t>(floats) * sizeof(float) + static_cast<size_t>(M * widest) * 2 +
                         static_cast<size_t>(M) * sizeof(int32_t) + 1024,
                     device_bytes_);
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
  // Attention split-K workspace: every query sees at most the pool's capacity of keys.
  const int64_t max_keys = std::min<int64_t>(int64_t{kv_blocks} * block_size, c.max_position_embeddings);
  d.workspace.allocate(static_cast<size_t>(M * c.num_heads * cuda::attention_chunks(static_cast<int32_t>(max_keys)) *
                                           (c.head_dim + 2)) *
                           sizeof(float),
                       device_bytes_);
  d.out_host.allocate(static_cast<size_t>(M * V) * sizeof(float) + static_cast<size_t>(M) * sizeof(int32_t));

  // --- GEMMs: one pinned algorithm per shape ---
  lt_try(cublasLtCreate(&d.lt), "cublasLtCreate");
  const int32_t mm = options_.max_tokens;
  lt_try(d.g_qkv.init(d.lt, {qkvd, H, H, qkvd, mm}), "pin qkv GEMM");
  lt_try(d.g_o.init(d.lt, {H, qd, qd, H, mm}), "pin o_proj GEMM");
  lt_try(d.g_gate_up.init(d.lt, {2 * I, H, H, 2 * I, mm}), "pin gate_up GEMM");
  lt_try(d.g_down.init(d.lt, {H, I, I, H, mm}), "pin down_proj GEMM");
  lt_try(d.g_head.init(d.lt, {V, H, H, V, mm}), "pin lm_head GEMM");
  cuda_try(cudaDeviceSynchronize(), "upload");
}

CudaTransformer::~CudaTransformer() {
  if (stream_) cudaStreamSynchronize(stream_);
  impl_.reset();
  if (stream_) cudaStreamDestroy(stream_);
}

KvStoreConfig CudaTransformer::kv_config() const {
  KvStoreConfig k;
  k.num_layers = config_.num_layers;
  k.num_kv_heads = config_.num_kv_heads;
  k.head_dim = config_.head_dim;
  k.block_size = impl_->block_size;
  k.num_blocks = impl_->num_blocks;
  k.prefix_cache = false;
  return k;
}

std::vector<std::string> CudaTransformer::gemm_algorithms() const {
  const Impl& d = *impl_;
  return {"qkv: " + d.g_qkv.description(), "o_proj: " + d.g_o.description(),
          "gate_up: " + d.g_gate_up.description(), "down_proj: " + d.g_down.description(),
          "lm_head: " + d.g_head.description()};
}

void CudaTransformer::read_pool(int32_t layer, std::vector<float>& k, std::vector<float>& v) {
  const Impl& d = *impl_;
  const size_t floats = static_cast<size_t>(d.num_blocks) * static_cast<size_t>(d.block_size) *
                        static_cast<size_t>(config_.kv_dim());
  k.resize(floats);
  v.resize(floats);
  cuda_try(cudaStreamSynchronize(stream_), "sync");
  cuda_try(cudaMemcpy(k.data(), d.pool_k.at(static_cast<size_t>(layer)), floats * sizeof(float), cudaMemcpyDeviceToHost), "pool read");
  cuda_try(cudaMemcpy(v.data(), d.pool_v.at(static_cast<size_t>(layer)), floats * sizeof(float), cudaMemcpyDeviceToHost), "pool read");
}

void CudaTransformer::forward(std::span<const ForwardWindow> windows, const KvStore& kv, CudaLogits& out) {
  const ModelConfig& c = config_;
  Impl& d = *impl_;
  const KvStoreConfig& kc = kv.config();
  if (kc.block_size != d.block_size || kc.num_blocks > d.num_blocks || kc.num_layers != c.num_layers ||
      kc.num_kv_heads != c.num_kv_heads || kc.head_dim != c.head_dim)
    fail(ErrorCode::invalid_argument, "CUDA forward: the KV store's layout does not match the device pool");
  if (kc.prefix_cache)
    fail(ErrorCode::invalid_argument, "CUDA forward: the KV store's prefix cache must be off (kv_config())");
  if (windows.empty()) fail(ErrorCode::invalid_argument, "CUDA forward: no windows");

  // --- host plan: tokens, positions, slots, block tables, attention windows, logit rows ---
  std::vector<int32_t> starts;
  std::vector<cuda::AttentionWindowSpec> specs;
  int32_t total = 0, table_len = 0, logit_rows = 0;
  for (const ForwardWindow& w : windows) {
    const int32_t start = w.start < 0 ? kv.length(w.seq) : w.start;
    const auto n = static_cast<int32_t>(w.tokens.size());
    if (n == 0) fail(ErrorCode::invalid_argument, "forward: empty window for sequence {}", w.seq);
    if (start < kv.length(w.seq))
      fail(ErrorCode::invalid_argument, "forward: window of sequence {} starts at {}, inside its {} committed tokens",
           w.seq, start, kv.length(w.seq));
    if (kv.reserved(w.seq) < start + n)
      fail(ErrorCode::invalid_argument, "forward: sequence {} has {} positions reserved, the window needs {}", w.seq,
           kv.reserved(w.seq), start + n);
    if (start + n > c.max_position_embeddings)
      fail(ErrorCode::out_of_capacity, "forward: sequence {} would reach position {}, past the model's {} positions",
           w.seq, start + n - 1, c.max_position_embeddings);
    for (int32_t t : w.tokens)
      if (t < 0 || t >= c.vocab_size) fail(ErrorCode::invalid_argument, "forward: token id {} outside the vocabulary", t);
    starts.push_back(start);
    specs.push_back({start, n, table_len});
    table_len += static_cast<int32_t>(kv.block_table(w.seq).size());
    total += n;
    logit_rows += w.logits == LogitsMode::all ? n : w.logits == LogitsMode::last ? 1 : 0;
  }
  if (total > options_.max_tokens)
    fail(ErrorCode::invalid_argument, "CUDA forward: {} tokens in one forward, more than max_tokens {}", total,
         options_.max_tokens);
  const cuda::AttentionPlan plan = cuda::plan_attention(specs);

  // Layout of the metadata upload (one copy): int64 slots first, then the int32 arrays.
  const size_t n_windows = windows.size();
  const size_t off_slots = 0;
  const size_t off_tokens = off_slots + align_up(static_cast<size_t>(total) * 8, 16);
  const size_t off_pos = off_tokens + align_up(static_cast<size_t>(total) * 4, 16);
  const size_t off_tw = off_pos + align_up(static_cast<size_t>(total) * 4, 16);
  const size_t off_lr = off_tw + align_up(static_cast<size_t>(total) * 4, 16);
  const size_t off_bt = off_lr + align_up(static_cast<size_t>(logit_rows) * 4, 16);
  const size_t off_win = off_bt + align_up(static_cast<size_t>(table_len) * 4, 16);
  const size_t meta_bytes = off_win + align_up(n_windows * sizeof(cuda::AttentionWindowDesc), 16);
  if (meta_bytes > d.meta.bytes()) {
    cuda_try(cudaStreamSynchronize(stream_), "sync");
    size_t unused = 0;
    d.meta.allocate(std::max<size_t>(meta_bytes * 2, 4096), unused);
    d.meta_host.allocate(d.meta.bytes());
  }
  auto* hb = d.meta_host.as<unsigned char>();
  auto* slots = reinterpret_cast<int64_t*>(hb + off_slots);
  auto* tokens = reinterpret_cast<int32_t*>(hb + off_tokens);
  auto* positions = reinterpret_cast<int32_t*>(hb + off_pos);
  auto* token_window = reinterpret_cast<int32_t*>(hb + off_tw);
  auto* logit_index = reinterpret_cast<int32_t*>(hb + off_lr);
  auto* tables = reinterpret_cast<int32_t*>(hb + off_bt);
  std::memcpy(token_window, plan.token_window.data(), static_cast<size_t>(total) * 4);
  std::memcpy(hb + off_win, plan.windows.data(), n_windows * sizeof(cuda::AttentionWindowDesc));
  out.vocab_ = c.vocab_size;
  out.first_.clear();
  out.rows_.clear();
  int32_t row = 0, lr = 0, bt = 0;
  for (size_t wi = 0; wi < n_windows; ++wi) {
    const ForwardWindow& w = windows[wi];
    const auto n = static_cast<int32_t>(w.tokens.size());
    for (int32_t i = 0; i < n; ++i) {
      tokens[row + i] = w.tokens[static_cast<size_t>(i)];
      positions[row + i] = starts[wi] + i;
      slots[row + i] = kv.slot(w.seq, starts[wi] + i);
    }
    const auto table = kv.block_table(w.seq);
    std::copy(table.begin(), table.end(), tables + bt);
    bt += static_cast<int32_t>(table.size());
    const int32_t rows = w.logits == LogitsMode::all ? n : w.logits == LogitsMode::last ? 1 : 0;
    out.first_.push_back(lr);
    out.rows_.push_back(rows);
    for (int32_t i = 0; i < rows; ++i) logit_index[lr + i] = row + n - rows + i;
    lr += rows;
    row += n;
  }
  unsigned char* db = d.meta.as<unsigned char>();
  cuda_try(cudaMemcpyAsync(db, hb, meta_bytes, cudaMemcpyHostToDevice, stream_), "metadata upload");
  const auto* d_slots = reinterpret_cast<const int64_t*>(db + off_slots);
  const auto* d_tokens = reinterpret_cast<const int32_t*>(db + off_tokens);
  const auto* d_pos = reinterpret_cast<const int32_t*>(db + off_pos);
  const auto* d_tw = reinterpret_cast<const int32_t*>(db + off_tw);
  const auto* d_lr = reinterpret_cast<const int32_t*>(db + off_lr);
  const auto* d_bt = reinterpret_cast<const int32_t*>(db + off_bt);
  const auto* d_win = reinterpret_cast<const cuda::AttentionWindowDesc*>(db + off_win);

  const int64_t need_ws = plan.workspace_floats(c.num_heads, c.head_dim) * static_cast<int64_t>(sizeof(float));
  if (static_cast<size_t>(need_ws) > d.workspace.bytes()) {
    cuda_try(cudaStreamSynchronize(stream_), "sync");
    d.workspace.allocate(static_cast<size_t>(need_ws), device_bytes_);
  }

  // --- the layers ---
  const int64_t H = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), I = c.intermediate_size, V = c.vocab_size;
  const int64_t qkvd = qd + 2 * kvd;
  const float eps = c.rms_norm_eps;
  cudaStream_t st = stream_;
  // y[0:m] = x W^T through the chosen batch-invariant GEMM; x is [m, k] bf16, dense.
  const bool rows_gemm = options_.gemm == CudaGemm::rows;
  auto gemm = [&](const cuda::LtGemm& lt, const uint16_t* xb, const uint16_t* w, float* y, int32_t m, int64_t n,
                  int64_t k, const char* what) {
    if (rows_gemm)
      cuda_try(cuda::gemm_rows_bf16(xb, k, w, n, k, y, n, m, st), what);
    else
      lt_try(lt.run(xb, w, y, m, st), what);
  };
  cuda_try(cuda::embedding(DType::bf16, d.embed, H, d_tokens, total, d.x, H, st), "embedding");
  const cuda::AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim,
                                   1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const Impl::Layer& w = d.layers[static_cast<size_t>(l)];
    // attention block
    cuda_try(cuda::rms_norm(d.x, H, w.input_norm, eps, total, 1, H, d.h, H, st), "input norm");
    cuda_try(cuda::f32_to_bf16(d.h, total, H, H, d.xb, H, st), "to bf16");
    gemm(d.g_qkv, d.xb, w.qkv, d.qkv, total, qkvd, H, "qkv GEMM");
    if (w.qkv_bias) cuda_try(cuda::add_bias(d.qkv, qkvd, w.qkv_bias, total, qkvd, st), "qkv bias");
    float* q = d.qkv;
    float* k = d.qkv + qd;
    float* v = d.qkv + qd + kvd;
    if (c.qk_norm) {
      cuda_try(cuda::rms_norm(q, qkvd, w.q_norm, eps, total, c.num_heads, c.head_dim, q, qkvd, st), "q norm");
      cuda_try(cuda::rms_norm(k, qkvd, w.k_norm, eps, total, c.num_kv_heads, c.head_dim, k, qkvd, st), "k norm");
    }
    cuda_try(cuda::rope(d.rope_cos, d.rope_sin, c.head_dim, d_pos, total, q, qkvd, c.num_heads, st), "rope q");
    cuda_try(cuda::rope(d.rope_cos, d.rope_sin, c.head_dim, d_pos, total, k, qkvd, c.num_kv_heads, st), "rope k");
    cuda_try(cuda::kv_scatter(k, v, qkvd, kvd, d_slots, total, d.pool_k[static_cast<size_t>(l)],
                              d.pool_v[static_cast<size_t>(l)], kvd, st),
             "kv scatter");
    const cuda::PagedPool pool{d.pool_k[static_cast<size_t>(l)], d.pool_v[static_cast<size_t>(l)], kvd, d.block_size, d_bt};
    const cuda::AttentionBatch batch{q,    k,     v,     d.attn,       qkvd, qkvd, qd, d_win, d_tw, total,
                                     plan.max_chunks, d.workspace.as<float>()};
    cuda_try(cuda::attention(shape, pool, batch, st), "attention");
    cuda_try(cuda::f32_to_bf16(d.attn, total, qd, qd, d.xb, qd, st), "to bf16");
    gemm(d.g_o, d.xb, w.o, d.tmp, total, H, qd, "o_proj GEMM");
    cuda_try(cuda::residual_add(d.x, d.tmp, w.o_bias, total, H, H, st), "residual");
    // MLP block
    cuda_try(cuda::rms_norm(d.x, H, w.post_norm, eps, total, 1, H, d.h, H, st), "post-attention norm");
    cuda_try(cuda::f32_to_bf16(d.h, total, H, H, d.xb, H, st), "to bf16");
    gemm(d.g_gate_up, d.xb, w.gate_up, d.gu, total, 2 * I, H, "gate_up GEMM");
    if (w.gate_up_bias) cuda_try(cuda::add_bias(d.gu, 2 * I, w.gate_up_bias, total, 2 * I, st), "gate_up bias");
    cuda_try(cuda::silu_gate(d.gu, d.gu + I, d.gu, total, I, 2 * I, st), "silu gate");
    cuda_try(cuda::f32_to_bf16(d.gu, total, I, 2 * I, d.xb, I, st), "to bf16");
    gemm(d.g_down, d.xb, w.down, d.tmp, total, H, I, "down_proj GEMM");
    cuda_try(cuda::residual_add(d.x, d.tmp, w.down_bias, total, H, H, st), "residual");
  }

  // --- final norm and LM head for the rows that need logits ---
  if (logit_rows > 0) {
    cuda_try(cuda::gather_rows(d.x, d_lr, logit_rows, H, H, d.h, st), "gather");
    cuda_try(cuda::rms_norm(d.h, H, d.final_norm, eps, logit_rows, 1, H, d.h, H, st), "final norm");
    cuda_try(cuda::f32_to_bf16(d.h, logit_rows, H, H, d.xb, H, st), "to bf16");
    gemm(d.g_head, d.xb, d.lm_head, d.logits, logit_rows, V, H, "lm_head GEMM");
    cuda_try(cuda::argmax(d.logits, logit_rows, V, V, d.argmax, st), "argmax");
    auto* host_ids = reinterpret_cast<int32_t*>(d.out_host.as<float>() + options_.max_tokens * V);
    cuda_try(cudaMemcpyAsync(host_ids, d.argmax, static_cast<size_t>(logit_rows) * 4, cudaMemcpyDeviceToHost, st),
             "argmax copy");
    if (options_.copy_logits)
      cuda_try(cudaMemcpyAsync(d.out_host.as<float>(), d.logits, static_cast<size_t>(logit_rows * V) * sizeof(float),
                               cudaMemcpyDeviceToHost, st),
               "logits copy");
    cuda_try(cudaStreamSynchronize(st), "forward");
    out.argmax_.assign(host_ids, host_ids + logit_rows);
    if (options_.copy_logits)
      out.data_.assign(d.out_host.as<float>(), d.out_host.as<float>() + static_cast<int64_t>(logit_rows) * V);
    else
      out.data_.clear();
  } else {
    cuda_try(cudaStreamSynchronize(st), "forward");
    out.argmax_.clear();
    out.data_.clear();
  }
}

}  // namespace specpipe
