#pragma once
/// The decoder-only transformer forward (Llama / Qwen2 / Qwen3) on one CUDA device, the
/// GPU twin of model/transformer.h (issue 6). Same window contract as
/// Transformer::forward: a batch of windows of n >= 1 new tokens, each starting at its
/// sequence's committed length (or an explicit later start), K/V written straight to the
/// reserved slots, logits of the last / all / no positions copied back as float32.
///
/// Numerics (ARCHITECTURE.md section 7): weights BF16 on the device (converted once from
/// the disk dtype, round to nearest even), activations FP32, GEMMs through one
/// batch-invariant BF16 kernel per model (model/cuda/cuda_gemm.h: by default the
/// tensor-core gemm_mma_bf16, or pinned cuBLASLt; kernels/cuda/gemm.h), so a token's
/// logits are the same bits in a decode step and in a verify window.
///
/// The KV pool lives on the device (FP32, the layout of kvstore/kv_tensors.h, per layer
/// [num_blocks, block_size, kv_heads, head_dim]); its bookkeeping (block tables, slots,
/// lengths) stays in the host KvStore passed to forward(). The store's own host tensors
/// are not used. The store must be built from kv_config() (same block count and size);
/// with the prefix cache on it must be given queue_block_copy as its BlockCopier.
///
/// One stream, stream-ordered; forward() synchronises once, at the end, to hand the
/// logits back. Not re-entrant; the few calls documented as thread-safe are serialised
/// with forwards by a lock (no other thread's work can slip into a graph capture). Needs
/// CUDA (built only with SPECPIPE_CUDA).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvstore/kv_store.h"
#include "kvstore/write_back.h"
#include "model/config.h"
#include "model/cuda/cuda_gemm.h"
#include "model/forward_model.h"
#include "model/weights.h"

namespace specpipe {

namespace cuda {
struct ForwardPlan;
struct LayerPrefillPlan;
struct StepSettings;
struct QueryCopy;
struct TransformerState;
}  // namespace cuda

/// Logits of one CUDA forward, window by window (rows as in Logits), plus the argmax of
/// each row computed on the device (lowest index wins ties, as cpu::argmax).
class CudaLogits {
 public:
  int32_t vocab() const { return vocab_; }
  std::span<const float> row(size_t w, int32_t i = 0) const;
  int32_t argmax(size_t w, int32_t i = 0) const;
  int32_t rows(size_t w) const { return rows_[w]; }
  size_t windows() const { return rows_.size(); }
  /// Per window: its sampled verdict when it asked one (ForwardWindow::verdict), else
  /// next_token -1. Empty when no window asked.
  const std::vector<SampledVerdict>& verdicts() const { return verdicts_; }

 private:
  friend class CudaTransformer;
  int32_t vocab_ = 0;
  std::vector<SampledVerdict> verdicts_;
  std::vector<float> data_;
  std::vector<int32_t> argmax_;
  std::vector<int64_t> first_;
  std::vector<int32_t> rows_;
};

struct CudaTransformerOptions {
  int32_t max_tokens = 64;  ///< most tokens of one forward (all windows): the GEMMs' max m
  CudaGemm gemm = CudaGemm::automatic;  ///< the constructor resolves it (resolve_cuda_gemm; gemm())
  int32_t device = 0;
  /// false: forward() copies back only each logits row's argmax, not the row (a decode
  /// loop that needs only the greedy token). row() then throws.
  bool copy_logits = true;
  /// Replay a CUDA graph per window shape (issue 6): the first forward of a shape (the
  /// windows' token counts and logits rows, in order, and copy_logits) captures the whole
  /// device side (metadata upload excepted) into a graph; later forwards of that shape
  /// write their metadata (token ids, positions, slots, block tables, window
  /// descriptors) into the same persistent device buffer and replay it. Only forwards of
  /// at most graph_max_tokens tokens (decode steps, verify windows) are graphed; longer
  /// ones (prefill chunks) run eagerly. Graphed and eager forwards give the same bits.
  bool graphs = true;
  int32_t graph_max_tokens = 16;
  /// For timing studies only (the logits are then meaningless): 1 leaves out every
  /// kernel but the GEMMs, 2 the attention kernels, 4 the GEMMs. 0 (the default): none.
  int32_t timing_skip = 0;
  /// Forwards of at most cuda::kFusedMaxRows tokens (decode steps, chain steps) run as ONE
  /// persistent kernel (model/cuda/fused_step.h) instead of ~12 launches a layer: for a
  /// latency-bound DRAFT model. Not the same bits as the per-kernel path (longer forwards
  /// such as prefill chunks still take it), so a target must leave it off: its tokens must
  /// get one kernel path in every window. Ignored (fused_step_refusal says why) for shapes
  /// the kernel does not serve, staged forwards and timing studies.
  bool fused_step = false;
  int32_t fused_blocks = 0;  ///< the fused kernel's grid: 0 = one block per SM (of fused_sm_share)
  /// With fused_blocks 0: the share of the SMs the fused kernel's grid takes. A draft that
  /// runs beside the target (draft-ahead) leaves it the rest: the fused kernel's blocks
  /// take nearly all of an SM's registers, so no target block fits beside one.
  float fused_sm_share = 1.0f;
  /// Profiling: the fused kernel's block 0 records the SM clock at each barrier of the
  /// last fused step (fused_trace()).
  bool fused_trace = false;
  /// The model's stream gets the device's highest priority: its blocks are scheduled
  /// before those of other streams (a target verifying while its drafter drafts ahead).
  bool high_priority_stream = false;
  /// Whether the one-row GEMMs of this model's forwards may let the next kernel launch
  /// early (kernels/cuda/gemm.h, variant bit 8). Off for a draft model that drafts beside
  /// the target's verify forward, whose early blocks would slow it
  /// (kernels/cuda/early_launch.h). The same bits either way.
  bool one_row_early_launch = true;
  /// Element type of the K/V store: the pool, the layer ring's slots, the host tier the
  /// ring reads (its layout's dtype must match) and the window's own K/V as the attention
  /// reads them. f32 (default) or bf16: half the bytes (a context twice as long in the
  /// same memory, half the PCIe traffic offloaded); each K/V element rounded to BF16 once
  /// when written, all arithmetic FP32 as before. Not with the fused step (refused, as
  /// fused_step_refusal says).
  DType kv_dtype = DType::f32;
  /// The qkv GEMM rotates q and k and writes the K/V rows in its epilogue
  /// (gemm_mma_rope_kv_bf16: one launch a layer less, the same bits) where it can: the
  /// mma GEMM, no fused step, no QK-norm, no qkv biases, FP32 K/V, head_dim % 16 == 0.
  /// SPECPIPE_QKV_ROPE=0 in the environment turns it off too (A/B timings).
  bool qkv_rope = true;
};

class CudaTransformer {
 public:
  /// Uploads the weights (as BF16) and allocates a device KV pool of `kv_blocks` blocks
  /// of `block_size` tokens (0: later, with allocate_kv_pool). Throws Error (internal: a CUDA / cuBLASLt failure, with the
  /// call; unsupported: a shape the kernels do not serve).
  CudaTransformer(const ModelConfig& config, const ModelWeights& weights, int32_t kv_blocks,
                  int32_t block_size = 16, CudaTransformerOptions options = {});
  /// A synthetic model of any shape (issue 6 item 3): every matrix gets BF16 values
  /// uniform in [-1/sqrt(cols), 1/sqrt(cols)) generated on the device from `seed` (no
  /// host copy of the matrices), norm weights 1, biases 0 where the config has them.
  /// The same seed gives the same bits on any device. Named shapes: tools/gpu/synthetic_models.h.
  static std::unique_ptr<CudaTransformer> random(const ModelConfig& config, uint64_t seed, int32_t kv_blocks,
                                                 int32_t block_size = 16, CudaTransformerOptions options = {});
  ~CudaTransformer();
  CudaTransformer(const CudaTransformer&) = delete;
  CudaTransformer& operator=(const CudaTransformer&) = delete;

  const ModelConfig& config() const { return config_; }
  /// The KvStore layout matching the device pool: bookkeeping only (host tensors off,
  /// prefix cache off: turn it on with queue_block_copy as the store's BlockCopier).
  KvStoreConfig kv_config() const;
  /// The K/V store's element type (options.kv_dtype): a host tier must be of it.
  DType kv_dtype() const { return options_.kv_dtype; }
  /// Allocates the device KV pool when the constructor was given kv_blocks = 0 (sizing
  /// it from the memory the weights left free). Once only.
  void allocate_kv_pool(int32_t kv_blocks, int32_t block_size);
  int32_t kv_blocks() const;
  cudaStream_t stream() const { return stream_; }
  int32_t max_tokens() const { return options_.max_tokens; }
  /// Bytes of device memory held (weights, pool, scratch).
  size_t device_bytes() const { return device_bytes_ + ring_device_bytes(); }
  /// Whether forward() copies logits rows back (argmax ids always come back).
  void set_copy_logits(bool copy) { options_.copy_logits = copy; }
  /// Turns graph replay on or off (captured graphs are kept).
  void set_graphs(bool on) { options_.graphs = on; }
  bool graphs() const { return options_.graphs; }
  /// See CudaTransformerOptions::timing_skip.
  void set_timing_skip(int32_t mask) { options_.timing_skip = mask; }
  /// Graphs captured so far (one per window shape).
  size_t graph_count() const;
  /// Bytes of the BF16 matrices a decode step reads (all layers' matrices + lm_head).
  size_t matrix_bytes_per_step() const { return step_matrix_bytes_; }
  /// Whether small forwards run as the fused step (options.fused_step, once the KV pool
  /// exists and the shape is served), and if not, why ("off" when not asked for).
  bool fused_step_active() const;
  std::string fused_step_refusal() const;
  /// With options.fused_trace: SM clock cycles between the barriers of the last fused step
  /// (phase by phase; empty before one ran). Synchronises the stream.
  std::vector<long long> fused_trace();
  /// The pinned cuBLASLt algorithm of each GEMM shape, or the kernel that serves them all
  /// when the GEMM is not cuBLASLt, for reports.
  std::vector<std::string> gemm_algorithms() const;
  /// The GEMM serving the projections (options.gemm, with automatic resolved).
  CudaGemm gemm() const { return options_.gemm; }

  /// Preconditions as Transformer::forward (checked): each window's sequence has
  /// reserved [start, start + n) in `kv`, start >= committed length, positions below
  /// max_position_embeddings; in all at most options.max_tokens tokens. `kv` is only read.
  void forward(std::span<const ForwardWindow> windows, const KvStore& kv, CudaLogits& out);

  /// Greedy drafting without a host round trip per token: runs `windows` (the argmax of
  /// each window's last position is its step-0 token), then steps - 1 one-token steps in
  /// which each window's token is its previous step's argmax, all on the device (one graph
  /// per shape when graphed) with one sync at the end. ids gets steps x windows ids, step
  /// by step. Each window's sequence must have reserved [start, start + n + steps - 1).
  /// The same bits as `steps` forward() calls (batch invariance). steps <= kMaxChainSteps.
  void forward_greedy_chain(std::span<const ForwardWindow> windows, int32_t steps, const KvStore& kv,
                            std::vector<int32_t>& ids);
  static constexpr int32_t kMaxChainSteps = 16;
  /// forward_greedy_chain whose windows each draw greedily or by temperature sampling
  /// (ForwardModel::forward_sampled_chain): after each step's argmax, the rows of windows
  /// at a temperature > 0 draw their token on the device (kernels/cuda/sampling.h,
  /// sample_chain_rows) with their uniform, which the next step feeds, and keep their q
  /// row in a device buffer; the ids and q rows come back with the chain's one sync.
  /// Temperatures and uniforms are uploaded before the chain (a graph replays with them).
  void forward_sampled_chain(std::span<const ForwardWindow> windows, int32_t steps,
                             const ForwardModel::ChainSampling& sampling, const KvStore& kv, std::vector<int32_t>& ids,
                             std::vector<float>& q);
  /// With sampling.q_on_device the q rows are not copied back (`q` is left empty): they
  /// stay here, laid out as `q` would be, until the next sampled chain.
  const float* chain_q_device() const;
  /// forward_sampled_chain without waiting, as launch_greedy_chain without `early`
  /// (ForwardModel::launch_sampled_chain): sampling.q_on_device is required (the q rows
  /// stay here), early_ids() gives the ids on the device and the event after the chain,
  /// collect_greedy_chain the ids on the host. The same launches as forward_sampled_chain
  /// (the same graph), without its sync.
  Event launch_sampled_chain(std::span<const ForwardWindow> windows, int32_t steps,
                             const ForwardModel::ChainSampling& sampling, const KvStore& kv);
  /// forward_greedy_chain without waiting: enqueues the chain and returns; the device
  /// works on it while the caller does other things (the drafter drafting ahead while the
  /// target verifies). collect_greedy_chain() waits for it and gives its ids. Any other
  /// forward on this model first waits for it (the ids are kept for collect). Returns
  /// the event after the chain and its ids' copy back: once another stream's sync has
  /// covered it (join_before_sync), collect and the next forward take the ids without a
  /// sync of their own (an event query instead).
  /// With `early` in [1, steps): the chain runs as two launches (two graphs) with an
  /// event between them, after step early - 1, which early_ids() gives with the device
  /// ids of those steps (ForwardModel::launch_greedy_chain_early). With `slot` >= 0 as
  /// well, those ids are copied (on the stream, before that event) into the slot's own
  /// buffer (made at its first use), which only the next chain of the same slot writes.
  Event launch_greedy_chain(std::span<const ForwardWindow> windows, int32_t steps, const KvStore& kv,
                            int32_t early = 0, int32_t slot = -1);
  void collect_greedy_chain(std::vector<int32_t>& ids);
  /// The last launched chain's ids on the device ([steps x windows], step-major: the
  /// argmax buffer, valid until the next forward or chain; with a slot its first `early`
  /// steps' in the slot's buffer, valid until the next chain of that slot) and the event
  /// after its first `early` steps (after the whole chain without `early`).
  DeviceIds early_ids() const;
  /// ForwardModel::place_next_tokens: the next forward (not a chain) waits for `ready`
  /// on its stream after its metadata upload, copies each placed token from `at` (this
  /// device's memory) into its input ids, and copies its input ids back with its
  /// results; placed_tokens() then has the placed values. Dropped if it fails first.
  void place_tokens(std::span<const ForwardModel::PlacedToken> placed, std::span<const Event> ready);
  std::span<const int32_t> placed_tokens() const { return placed_values_; }
  /// The next forward (not a launched chain) makes its stream wait for `e` after its own
  /// work, before its one sync: when it returns, the work behind `e` is complete too
  /// (ForwardModel::join_next_forward). Dropped if that forward fails first.
  void join_before_sync(Event e) { join_ = std::move(e); }

  /// Queues a copy of pool block `src` to block `dst` (every layer, K and V) on the
  /// model's stream in front of the next forward (or read_pool): the KV store's
  /// copy-on-write of a shared prefix-cache block. Thread-safe (the store's owner may
  /// run on another thread than the forwards); never fails (checked at the forward).
  void queue_block_copy(int32_t src, int32_t dst);

  /// Offload (issue 16; model/cuda/device_ring.h): from now on a forward over sequences
  /// whose oldest blocks live on the KV store's host tier streams their K/V through a
  /// device ring of `slots` layer slots (slots < 2: Error(invalid_argument)); overlap
  /// false copies on the model's stream, in line (the seed's synchronous way). Such
  /// forwards run eagerly (no CUDA graph, no fused step) and give the same bits as with
  /// every block in the pool. Greedy chains over host K/V are refused. Calling it again
  /// replaces the ring.
  void enable_layer_ring(int32_t slots, bool overlap = true);
  RingStats ring_stats() const;
  /// Device bytes of the ring's slots (0 without a ring or before a forward used it).
  size_t ring_device_bytes() const;
  /// Layer-wise prefill with asynchronous offload (issue 16 item 5; model/cuda/
  /// layer_prefill.h): the whole `prompt` through one layer at a time (chunks of
  /// max_tokens rows), each layer's K/V copied to the sequence's host-tier blocks (and
  /// its pool blocks) on a copy stream while the next layer computes, buffer reuse
  /// ordered by events; one host sync, at the end. `seq` holds the prompt's first h
  /// blocks on the host tier (KvStore::book_host_prefix, h may be 0) and has reserved the
  /// rest; the caller commits the rest after. `out` gets the last position's logits (one
  /// window, one row). Logits and K/V are the same bits as a chunked prefill with every
  /// block in the pool. overlap false: the copies in line on the model's stream (the
  /// seed's synchronous way). Throws Error(invalid_argument) for a sequence or prompt
  /// plan_layer_prefill refuses, Error(out_of_capacity) when the prompt's layer buffers
  /// do not fit the device (nothing enqueued: prefill chunk by chunk instead).
  void prefill_layerwise(SeqId seq, std::span<const int32_t> prompt, const KvStore& kv, CudaLogits& out,
                         bool overlap = true);
  /// Frees prefill_layerwise's buffers (its two layer slots, residual rows, metadata and
  /// copy stream: they are sized for the longest prompt so far), after waiting for
  /// their work. A serving engine calls it after each layer-wise prefill (issue 16 item
  /// 5: the buffers of one long prompt must not stay held); the next one allocates
  /// them again. Device bytes they held are returned by prefill_buffer_bytes.
  void release_layer_prefill();
  /// Device bytes held by prefill_layerwise's buffers now (0 after release_layer_prefill).
  size_t prefill_buffer_bytes() const;
  /// Queues a copy of a whole block (every layer, K and V) from the pool to the host tier
  /// (to_host) or back, in order with queue_block_copy's, in front of the next forward:
  /// the KV store's HostTierCopier. With a layer ring, a move to the host is written back
  /// beside the next ring forward instead (kvstore/write_back.h: per layer, on the copy
  /// stream, behind events; in line with overlap off). The tier is the one of the KvStore
  /// that forward gets (pinned memory: PinnedHostAllocator). Thread-safe; checked at the forward.
  void queue_host_copy(bool to_host, int32_t pool_block, int32_t host_block);
  /// Queues a copy of layer `layer`'s K and V of host block `host_block` into that layer
  /// of pool block `pool_block`, in order with the copies above: SpecPV's view copies
  /// (HostTierCopier::layer_to_pool), ordered after a pending write-back of the host
  /// block as host-to-pool moves are. Thread-safe; checked where it is applied.
  void queue_host_layer_copy(int32_t layer, int32_t host_block, int32_t pool_block);
  /// Applies every queued copy (moves to the host in line: nothing stays pending) and
  /// waits for them, so the host may read `host`, the tier they name (SpecPV summarises
  /// host-tier blocks there: ForwardModel::land_host_copies). Thread-safe.
  void land_host_copies(const HostKvTier* host);

  /// Staged rounds (a staging kv_write strategy such as NWOR): while on, forward() keeps
  /// the windows' K/V out of the pool and leaves each layer's rows, in window order, in
  /// a staging buffer read with staged_k / staged_v until the next forward. Not for
  /// greedy chains.
  void set_stage_rows(bool on) { stage_rows_ = on; }
  /// [rows of the last forward, kv_dim] float32 device rows of `layer` (staged forwards).
  const float* staged_k(int32_t layer) const;
  const float* staged_v(int32_t layer) const;

  /// Device memory and pool writes for a staging strategy (ForwardModel's DeviceKvPool),
  /// ordered on the model's stream and serialised with forwards (any thread).
  /// device_alloc returns nullptr when the device has no memory left.
  void* device_alloc(size_t bytes);
  void device_free(void* ptr);
  /// cudaMemcpyDefault: device or host memory on either side.
  void copy_async(void* dst, const void* src, size_t bytes);
  /// Rows [0, n) of k, v ([n, kv_dim] float32 on the device) into the pool of `layer` at
  /// slots[0..n) (host memory, each in [0, kv_blocks * block_size): checked).
  void write_slots(int32_t layer, const float* k, const float* v, const int64_t* slots, int64_t n);

  /// SpecPV block summaries (model/cuda/key_summaries.h): for every layer l and full pool
  /// block blocks[b], the element-wise max and min of its keys go to kmax / kmin (host
  /// memory, [layers][blocks.size()][kv_dim] floats): computed on the device, only the
  /// summaries come back. After the queued pool-to-pool copies ahead of any host-tier
  /// copy (those wait, in order, for the next forward or land_host_copies, which have the
  /// tier: the blocks summarised are committed, and no queued copy writes one); waits for
  /// the stream. Block ids outside the pool: Error(invalid_argument).
  void summarise_key_blocks(std::span<const int32_t> blocks, float* kmax, float* kmin);

  /// SpecPV retrieval on the device (device_retrieval.cpp; DeviceRetrieval in
  /// kvstore/retrieval_index.h, which device_retrieval() wraps): each sequence's block
  /// summaries kept on the device by block index (grown by doubling), FP32 K/V only.
  /// retrieval_summarise: blocks [first, first + n) of `seq` from the pool's keys of
  /// pool_blocks (after the queued pool-to-pool copies, as summarise_key_blocks; no sync).
  /// retrieval_upload: the same from host summaries ([layers][n][kv_dim] floats each).
  /// retrieval_select: every layer's top `k` blocks of [first, blocks) by the Quest score
  /// for the query sums of tap `sums` of the last tapped forward (QueryTap::on_device_sums)
  /// into out[layer], ascending; one copy back, one sync. Thread-safe (the stream's lock).
  std::shared_ptr<DeviceRetrieval> device_retrieval();
  void retrieval_summarise(SeqId seq, int32_t first, std::span<const int32_t> pool_blocks);
  void retrieval_upload(SeqId seq, int32_t first, int32_t n, const float* kmax, const float* kmin);
  void retrieval_select(SeqId seq, int32_t sums, int32_t blocks, int32_t k, int32_t first,
                        std::vector<std::vector<int32_t>>& out);
  void retrieval_forget(SeqId seq);

  /// Copies the device pool of `layer` to the host ([slots, kv_heads * head_dim] floats
  /// each for K and V), for checks.
  void read_pool(int32_t layer, std::vector<float>& k, std::vector<float>& v);

 private:
  CudaTransformer(const ModelConfig& config, const ModelWeights* weights, uint64_t seed, int32_t kv_blocks,
                  int32_t block_size, CudaTransformerOptions options);
  /// forward_greedy_chain (defer false) and launch_greedy_chain (defer true): run()
  /// without logits copies (the plan checks the step count).
  void run_chain(std::span<const ForwardWindow> windows, int32_t steps, const KvStore& kv, bool defer,
                 int32_t early = 0, int32_t slot = -1, const ForwardModel::ChainSampling* sample = nullptr);
  /// forward() (steps 1, chain false) and forward_greedy_chain() (chain: one argmax per
  /// window and step, in chain_ids_): plan (model/cuda/forward_plan.h), upload, replay a
  /// graph or run the steps (eagerly or into a new graph), copy back. defer (chains only):
  /// return after enqueueing, without the sync; see launch_greedy_chain.
  /// sample (chains, not deferred): a sampled chain (forward_sampled_chain), its q rows
  /// copied to TransformerState::chain_q_host before the sync.
  void run(std::span<const ForwardWindow> windows, int32_t steps, bool chain, const KvStore& kv, CudaLogits& out,
           bool defer = false, int32_t early = 0, int32_t slot = -1,
           const ForwardModel::ChainSampling* sample = nullptr);
  /// A sampled chain's buffers (sample_params, and chain_q for steps x windows q rows:
  /// grown after a sync, dropping the graphs) and its upload of 1 / temperature and uniforms.
  void prepare_chain_sampling(const ForwardModel::ChainSampling& sample, int32_t windows, int32_t steps);
  /// Packs the plan's metadata into the pinned buffer and enqueues its upload.
  void upload_plan(const cuda::ForwardPlan& plan);
  /// SpecPV retrieval: `seq`'s summaries with room for `blocks` blocks (grown, the old
  /// ones kept); returns Kmax of layer 0 (Kmin follows all layers' Kmax).
  float* retrieval_room(SeqId seq, int32_t blocks);
  /// Block summaries read FP32 keys of pool blocks: Error(unsupported) for another K/V
  /// store, Error(invalid_argument) for a block outside the pool.
  void check_summary_blocks(std::span<const int32_t> blocks) const;
  /// SpecPV: the same for a view forward's per-layer windows and tables (growing the
  /// buffer, and dropping the graphs, when its stride is short).
  void upload_views(const cuda::ForwardPlan& plan);
  /// SpecPV: where each query-tapped window's rows of every layer land (pinned memory,
  /// grown as needed), in window order.
  std::vector<cuda::QueryCopy> query_copies(std::span<const ForwardWindow> windows, const cuda::ForwardPlan& plan);
  /// SpecPV retrieval by attention mass: gives the taps that want it (no view, FP32 K/V)
  /// their per-layer block mass buffers (device and pinned, grown as needed) and tables.
  void block_mass_copies(std::span<const ForwardWindow> windows, const cuda::ForwardPlan& plan,
                         std::vector<cuda::QueryCopy>& taps);
  /// Attention's chunk grid for the plan: the pool's capacity when graphed, else the
  /// plan's own (growing the split-K workspace, and dropping the graphs, when it is short).
  int32_t attention_grid(const cuda::ForwardPlan& plan, bool use_graph);
  /// Grows attention's split-K workspace (dropping the graphs) to `rows` rows of
  /// `chunks` chunks when it is short.
  void grow_workspace(int32_t rows, int32_t chunks);
  /// prefill_layerwise's buffers for `plan` (grown when short, after a sync; the copy
  /// stream made for `overlap`); Error(out_of_capacity) when the device lacks the memory.
  void prepare_layer_prefill(const cuda::LayerPrefillPlan& plan, bool overlap);
  /// Enqueues every step of the plan (model/cuda/decoder_step.h) and the copies back of
  /// the argmax ids and logits rows: what a graph captures. A chain launched in two
  /// parts enqueues steps [from, to) each; the copies back go with the last step.
  void enqueue_forward(const cuda::ForwardPlan& plan, const cuda::StepSettings& settings, int32_t from = 0,
                       int32_t to = -1);
  /// place_tokens' part of run(): writes a reference to each placed token's source into
  /// the plan's input ids (-1 - its index from the returned base, the lowest address),
  /// resolved on the device after the upload (cuda::resolve_placed_ids). Null: none.
  /// Throws Error(invalid_argument) for a token outside the plan's windows.
  static const int32_t* place_planned_tokens(cuda::ForwardPlan& plan,
                                             std::span<const ForwardModel::PlacedToken> placed);
  /// forward()'s sampled verdicts (ForwardWindow::verdict; sampled_verdicts.cpp), after
  /// the steps: the windows' drafts, uniforms and q rows up in one copy,
  /// cuda::rejection_sample over the logits rows where they are (one launch per run of
  /// windows of one temperature), the verdicts into the pinned buffer. Returns how many
  /// windows asked.
  int32_t enqueue_verdicts(std::span<const ForwardWindow> windows, const cuda::ForwardPlan& plan);
  /// After the sync: the `verdicts` answers from the pinned buffer into `out`, by window.
  void read_verdicts(std::span<const ForwardWindow> windows, int32_t verdicts, CudaLogits& out);
  size_t verdict_out_at_ = 0;  ///< where enqueue_verdicts' verdicts land in verdict_host
  /// After the sync: the ids (and logits rows) from the pinned buffer into `out` / chain_ids_.
  void read_results(const cuda::ForwardPlan& plan, CudaLogits& out);
  /// A launched chain still on the device: waits for it (no sync when its event is
  /// complete already) and keeps its ids for collect (the next forward reuses the pinned
  /// buffer they come back in). Under stream_mutex.
  void settle_launched_chain();
  /// Enqueues the queued block copies on the stream (in queue order). Copies to or from
  /// the host tier need `host` (the forward's KvStore's tier): without it only the copies
  /// ahead of the first host-tier one go, and the rest stay queued, in order (a caller
  /// without the tier - block summaries, read_pool - must never drop or fail them: the
  /// kv-router queued them for the next forward).
  void apply_block_copies(const HostKvTier* host);
  /// Offload write-back (kvstore/write_back.h): enqueues layer `layer`'s copies of
  /// `batch` from the pool to `host` on `stream` (a ring job's copy stream, or the model's).
  void enqueue_write_back(const WriteBackBatch& batch, const HostKvTier& host, int32_t layer,
                          cudaStream_t stream) const;
  /// The pending write-back, every layer, in line on the model's stream (nothing pending:
  /// nothing; pending without `host`: Error(internal)).
  void flush_write_back(const HostKvTier* host);
  /// The metadata buffers for the pool (and, once a ring is on, for block tables that
  /// name host-tier blocks: forward_meta_layout), reallocated (graphs dropped) when the
  /// layout grows.
  void allocate_metadata();
  /// With options.fused_step, once the pool exists: the fused kernel's tables and scratch.
  void setup_fused_step();
  ModelConfig config_;
  size_t step_matrix_bytes_ = 0;
  CudaTransformerOptions options_;
  cudaStream_t stream_ = nullptr;
  size_t device_bytes_ = 0;
  std::unique_ptr<cuda::TransformerState> impl_;
  bool stage_rows_ = false;
  CudaLogits chain_logits_;
  std::vector<int32_t> chain_ids_;
  int32_t launched_ids_ = 0;     ///< ids of a launched chain not yet settled (0: none)
  Event launched_done_;          ///< after a launched chain's work (its ids copied back)
  Event join_;                   ///< join_before_sync's event, for the next forward
  Event early_done_;             ///< after a launched chain's first `early` steps
  int32_t early_slot_ = -1;      ///< the slot buffer holding them (-1: the argmax buffer)
  std::vector<ForwardModel::PlacedToken> placed_;  ///< place_tokens', for the next forward
  std::vector<Event> placed_ready_;
  std::vector<int32_t> placed_values_;             ///< the last forward's placed tokens
  bool launched_ready_ = false;  ///< a launched chain settled, its ids kept for collect
  std::vector<int32_t> launched_chain_ids_;
};

}  // namespace specpipe
