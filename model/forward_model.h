#pragma once
/// What the pipeline needs of a model, whatever device runs it: the forward of a batch of
/// windows over a paged KV store (ARCHITECTURE.md section 3). The CPU Transformer
/// (model/transformer.h) and the CUDA one (model/cuda/cuda_forward_model.h) implement it;
/// model/open_model.h picks one for a Device.
///
/// One call runs a batch of sequences, each with a window of n >= 1 new tokens: prefill
/// chunks, single-token decode and speculative verify windows are the same call with
/// different n. Each window starts at its sequence's committed KV length (or an explicit
/// later start); attention reads the committed prefix from the paged pool and the
/// window's own K/V from a dense window buffer.
#include <climits>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "core/device.h"
#include "kvstore/kv_store.h"
#include "kvstore/kv_write_sink.h"
#include "kvstore/layer_ring.h"
#include "kvstore/retrieval_index.h"
#include "model/config.h"

namespace specpipe {

/// Which positions of a window need logits.
enum class LogitsMode { none, last, all };

/// A partial view of a window's committed prefix (SpecPV, kvstore/partial_view.h): per
/// layer, the pool blocks attention reads, in position order, and the tokens they hold
/// (every block full but the last). The keys carry their RoPE, so a subset of them is
/// attended to as is. The CPU and CUDA forwards gather it from the pool with no copy.
struct PrefixView {
  std::vector<std::vector<int32_t>> pool_blocks;  ///< [layers][blocks]: pool block ids
  std::vector<int32_t> lengths;                   ///< [layers]: tokens in view
};

/// Receives a window's query rows, layer by layer, during a forward (SpecPV retrieval
/// scores blocks with them). q: [n, num_heads * head_dim] with RoPE, row i at q + i * ld.
class QueryTap {
 public:
  virtual ~QueryTap() = default;
  virtual void on_queries(int32_t layer, const float* q, int32_t n, int64_t ld) = 0;
  /// A tap that returns true here lets a backend with a DeviceRetrieval reduce the
  /// queries where they are instead (QuerySums of every layer, kept on the device): after
  /// the forward it calls on_device_sums once with their handle for
  /// DeviceRetrieval::select, valid until the backend's next forward with a tap, and
  /// on_queries not at all. Other backends call on_queries as ever.
  virtual bool wants_device_sums() const { return false; }
  virtual void on_device_sums(int32_t /*handle*/) {}
  /// A tap that returns true here (SpecPV retrieval by attention mass) is also told,
  /// layer by layer after the window's attention over its whole prefix, how much
  /// softmax mass each prefix block got: mass[(i * kv_heads + g) * blocks + b] for row i
  /// and KV head g, summed over the group's query heads (cpu::AttentionWindow::
  /// block_mass). The CUDA forward sums it on the device and passes n = kv_heads = 1
  /// (key_summaries.h, attention_block_mass), with FP32 K/V only; a backend that cannot
  /// compute it never calls on_block_mass, nor does any backend for a window with a
  /// partial view.
  virtual bool wants_block_mass() const { return false; }
  virtual void on_block_mass(int32_t /*layer*/, const float* /*mass*/, int32_t /*n*/, int32_t /*kv_heads*/,
                             int32_t /*blocks*/) {}
};

/// A sampled verify window's verdict asked of the backend that holds its logits rows
/// (ForwardModel::computes_sampled_verdicts): rejection sampling at a pure temperature
/// (top_k 0, top_p 1), accept_sampling's verdict (pipeline/acceptance.h) with the uniforms
/// its Rng would give, in that order. Draft i is judged by the window's logits row
/// first_row + i, the bonus by row first_row + drafts.size(). All host memory, read
/// during the forward call.
struct SampledVerdictRequest {
  int32_t first_row = 0;
  std::span<const int32_t> drafts;
  /// The draft distributions, drafts.size() rows of the vocabulary (null: point masses on
  /// the drafts, as empty q rows in accept_sampling). Each q(draft) > 0 (the caller checks).
  const float* q = nullptr;
  /// Or (q null) the same rows where the draft model left them, on this model's device
  /// (ModelDrafter::keep_q_on_device): a device model copies them on the device after
  /// waiting for their event. Only for a model that computes_sampled_verdicts(). Not
  /// checked for q(draft) > 0 (the device draw picks only tokens of positive weight).
  DeviceRows q_device;
  /// The drafts are the window's last drafts.size() tokens and were placed on the device
  /// (ForwardModel::place_next_tokens: the model drafter's sampled chain left them there):
  /// `drafts` holds placeholders and a device model reads the ids from the forward's
  /// input ids instead. Only for a model that computes_sampled_verdicts().
  bool drafts_placed = false;
  std::span<const double> u;  ///< drafts.size() + 1 uniforms: the most a verdict draws
  float temperature = 1.0f;   ///< > 0
};

/// The verdict of a SampledVerdictRequest: drafts accepted and the correction or bonus
/// token. Its Rng advances by accepted + 2 when a draft was rejected, else drafts + 1.
struct SampledVerdict {
  int32_t accepted = 0;
  int32_t next_token = -1;
};

struct ForwardWindow {
  SeqId seq;
  std::span<const int32_t> tokens;  ///< the window's new tokens (n >= 1)
  LogitsMode logits = LogitsMode::last;
  /// Position of tokens[0]; -1 = the sequence's committed length. A later start lets
  /// prefill chunks follow each other before the KV-router commits them: positions
  /// [length, start) must then already hold the earlier chunks' K/V.
  int32_t start = -1;
  /// Only the argmax of the window's logits rows is needed (greedy decoding). When every
  /// window of a forward says so, a device backend returns the ids alone and skips the
  /// copy of the rows (Logits::argmax answers either way; Logits::row then throws).
  bool ids_only = false;
  /// Attend to this partial view of the prefix instead of all of it (null: all).
  const PrefixView* view = nullptr;
  /// Told this window's queries in every layer (null: nobody).
  QueryTap* query_tap = nullptr;
  /// A backend that computes sampled verdicts (ForwardModel::computes_sampled_verdicts)
  /// answers this one in Logits::verdict; such a window needs no rows back (as ids_only).
  /// Others ignore it. Null: no verdict asked.
  const SampledVerdictRequest* verdict = nullptr;
};

/// Logits of one forward: rows [vocab] for the positions asked, window by window.
class Logits {
 public:
  int32_t vocab() const { return vocab_; }
  /// Row `i` of window `w` (i counts the window's logits rows: 0 for `last`).
  std::span<const float> row(size_t w, int32_t i = 0) const;
  int32_t rows(size_t w) const { return rows_[w]; }
  size_t windows() const { return rows_.size(); }
  /// The argmax of row `i` of window `w` (the lowest id wins a tie, as cpu::argmax): the
  /// backend's own when it returned ids only, else computed from the row.
  int32_t argmax(size_t w, int32_t i = 0) const;
  /// Whether the rows themselves are present (false after an ids-only forward).
  bool has_rows() const { return ids_.empty(); }
  /// Window w's sampled verdict when the backend computed it (ForwardWindow::verdict),
  /// else null.
  const SampledVerdict* verdict(size_t w) const {
    return w < verdicts_.size() && verdicts_[w].next_token >= 0 ? &verdicts_[w] : nullptr;
  }
  /// For backends, after prepare / prepare_ids: window w's verdict.
  void set_verdict(size_t w, SampledVerdict v) {
    if (verdicts_.size() < rows_.size()) verdicts_.resize(rows_.size());
    verdicts_[w] = v;
  }
  /// Replaces the contents with one row per window (equal sizes).
  void assign(const std::vector<std::vector<float>>& rows);
  /// For backends: lays out `rows_per_window[w]` rows of `vocab` floats per window and
  /// returns the (uninitialised) storage of all rows, window by window.
  std::span<float> prepare(int32_t vocab, std::span<const int32_t> rows_per_window);
  /// For backends, ids-only forwards: the same layout, one argmax id per row instead of
  /// the row; returns the (uninitialised) ids, window by window.
  std::span<int32_t> prepare_ids(int32_t vocab, std::span<const int32_t> rows_per_window);

 private:
  void layout(int32_t vocab, std::span<const int32_t> rows_per_window);
  int32_t vocab_ = 0;
  std::vector<float> data_;
  std::vector<int32_t> ids_;  // ids-only forwards: one per row
  std::vector<SampledVerdict> verdicts_;  // per window; next_token -1: none
  std::vector<int64_t> first_;  // first row of each window
  std::vector<int32_t> rows_;   // rows of each window
};

/// The KvStore layout of a pool of `num_blocks` blocks of `block_size` tokens for a model
/// of `config`. device_pool: the pool lives in a device model's memory and the store
/// keeps only the books (host tensors off; prefix cache off unless the store is given
/// the model's block_copier()).
KvStoreConfig kv_store_layout(const ModelConfig& config, int32_t num_blocks, int32_t block_size, bool device_pool);

/// Logits rows a window asks for.
inline int32_t logit_rows(const ForwardWindow& w) {
  const auto n = static_cast<int32_t>(w.tokens.size());
  return w.logits == LogitsMode::all ? n : w.logits == LogitsMode::last ? 1 : 0;
}

/// Checks every window against the store and the model (non-empty, starts at or after
/// its committed length, reserved, below max_position_embeddings, token ids in the
/// vocabulary) and returns each window's start. Throws Error (invalid_argument, or
/// out_of_capacity past the model's positions) naming the sequence. `extra`: positions
/// after each window that must be reserved and within the model's positions too (the
/// later steps of a greedy chain).
std::vector<int32_t> window_starts(std::span<const ForwardWindow> windows, const KvStore& kv,
                                   const ModelConfig& config, int32_t extra = 0);

/// A device model's KV pool seen as memory, for a kv_write strategy that moves K/V rows
/// itself (the plugin host API: pipeline/plugin_instance.h). Every call is ordered on
/// the model's stream and may come from any thread; the model serialises them with its
/// forwards.
class DeviceKvPool {
 public:
  virtual ~DeviceKvPool() = default;
  virtual Device device() const = 0;
  /// The model's stream (a cudaStream_t), the one every call below is ordered on.
  virtual void* stream_handle() const = 0;
  /// `bytes` of device memory, or nullptr when the device has none left.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* ptr) = 0;
  /// Copies `bytes` (device or host memory on either side). Throws Error on failure.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  /// Rows [0, n) of k and v ([n, kv_dim] float32, device memory) into the pool of `layer`
  /// at slots[0..n) (host memory; the caller checks them). Throws Error on failure.
  virtual void write_slots(int32_t layer, const float* k, const float* v, const int64_t* slots, int64_t n) = 0;
};

class ForwardModel {
 public:
  virtual ~ForwardModel() = default;

  virtual const ModelConfig& config() const = 0;
  /// Where the forward runs; its stream orders the model's device work (CPU: a tag).
  virtual Device device() const = 0;
  virtual Stream stream() const { return Stream{device(), nullptr}; }

  /// The layout of the KvStore that goes with a pool of `num_blocks` blocks of
  /// `block_size` tokens. CPU: the store holds the pool in its host tensors. A device
  /// model holds the pool itself (allocate_kv_pool) and the store keeps only the books
  /// (block tables, slots, lengths): host_tensors and prefix_cache are then off.
  virtual KvStoreConfig kv_config(int32_t num_blocks, int32_t block_size) const = 0;
  /// Device models: allocates the device pool (once, before the first forward). CPU:
  /// nothing to do (the store allocates).
  virtual void allocate_kv_pool(int32_t /*num_blocks*/, int32_t /*block_size*/) {}
  /// Device models: copies a pool block on the device for the store's copy-on-write
  /// (KvStore's BlockCopier), queued in front of the next forward; callable from any
  /// thread. CPU: none (the store copies its host tensors).
  virtual BlockCopier block_copier() { return {}; }
  /// Device models: SpecPV block summaries computed where the pool lives (only the
  /// summaries cross to the host; kvstore/retrieval_index.h). CPU: none (the retrieval
  /// index reads the store's host tensors).
  virtual KeySummariser key_summariser() { return {}; }
  /// Device models: SpecPV retrieval kept on the device (block summaries per sequence,
  /// scores and top-k there; kvstore/retrieval_index.h), used with query taps that want
  /// device sums. Null: retrieval on the host (the CPU).
  virtual std::shared_ptr<DeviceRetrieval> device_retrieval() { return nullptr; }
  /// Device models: the pool as memory for a staging kv_write strategy (valid as long as
  /// the model). CPU: null (the store's host tensors are the pool).
  virtual DeviceKvPool* device_kv_pool() { return nullptr; }
  /// Bytes one block of `block_size` tokens takes in the pool (K and V, every layer).
  int64_t kv_block_bytes(int32_t block_size) const {
    return int64_t{2} * config().num_layers * block_size * config().kv_dim() *
           static_cast<int64_t>(dtype_size(kv_dtype()));
  }
  /// Element type of the model's K/V store (and so of a host tier attached to it): f32,
  /// or bf16 on a device that was asked for it (ModelOptions::kv_dtype).
  virtual DType kv_dtype() const { return DType::f32; }

  /// Offload (kvstore/README.md, "Host tier"): from now on the forward streams the
  /// host-tier K/V of its sequences through a layer ring of `slots` layer slots
  /// (kvstore/layer_ring.h); slots < 2 is Error(invalid_argument). CPU: the ring's
  /// copies run on a copy thread, or with `overlap` false on the forward's own thread
  /// (no overlap, for comparison); CUDA: a device ring loaded by a copy stream
  /// (model/cuda/device_ring.h), or with `overlap` false by copies in line on the
  /// model's stream. This default (backends without a ring) throws Error(unsupported).
  virtual void enable_layer_ring(int32_t slots, bool overlap = true);
  /// The layer ring's counters (zeros without a ring).
  virtual RingStats ring_stats() const { return {}; }
  /// Offload: where a host tier for this model's pool takes its memory (a device model:
  /// pinned memory, which its ring copies asynchronously; null: default_host_allocator)
  /// and how whole blocks move between the model's pool and that tier (the copier of
  /// KvStore::attach_host_tier; empty for the CPU, whose store copies its host tensors).
  virtual HostMemoryAllocator* host_memory_allocator() { return nullptr; }
  virtual HostTierCopier host_tier_copier() { return {}; }
  /// Lands every queued move between the pool and `kv`'s host tier, so the tier's
  /// memory is current for reads on the host (SpecPV summarises host-tier blocks there);
  /// false when the backend cannot (the caller then leaves the tier unread). This
  /// default: true on the CPU (its store copies at once), false on a device.
  virtual bool land_host_copies(const KvStore& /*kv*/) { return device().kind == DeviceKind::cpu; }

  /// Layer-wise prefill with asynchronous offload (issue 16 item 5; kvstore/README.md,
  /// "Layer-wise prefill"): the whole `prompt` of `seq` one layer at a time from position
  /// 0, each layer's K/V written straight to the sequence's host-tier blocks (the
  /// prompt's first h blocks, booked by KvStore::book_host_prefix) and its pool blocks
  /// (the rest, reserved), no sink; `out` gets the last position's logits (one window,
  /// one row). The caller commits the prompt past the host part after. The same bits as
  /// a chunked prefill with every block in the pool. Throws Error(out_of_capacity) or
  /// Error(unsupported) with nothing written when this model cannot run it (the caller
  /// prefills chunk by chunk instead: pipeline/prefill.h). CPU: Transformer::
  /// prefill_layerwise with a LayerPrefillWriter; CUDA: CudaTransformer::
  /// prefill_layerwise, its device buffers released after. This default: unsupported.
  virtual void prefill_layerwise(SeqId seq, std::span<const int32_t> prompt, const KvStore& kv, Logits& out);

  /// The most tokens (all windows together) one forward takes; callers split larger
  /// work. CPU: no limit.
  virtual int32_t max_forward_tokens() const { return INT32_MAX; }
  /// The longest greedy chain (forward_greedy_chain / launch_greedy_chain steps) the
  /// model runs without a host round trip per token. Longer chains give the same tokens,
  /// one host step at a time (slower, never wrong). CPU: no limit.
  virtual int32_t max_chain_steps() const { return INT32_MAX; }
  /// Whether forward answers ForwardWindow::verdict (a device backend: the rows stay on
  /// the device and only the verdicts come back). Default: no, the caller judges the
  /// rows itself.
  virtual bool computes_sampled_verdicts() const { return false; }

  /// Runs every window through the model. Preconditions (checked, see window_starts):
  /// each window's sequence has reserved [start, start + n) in `kv`. The windows' K/V go
  /// to `sink` layer by layer (a device model writes them into its pool and reports the
  /// rows with null pointers, or, when the sink stages_rows(), keeps them out of the
  /// pool and reports device rows: kvstore/kv_write_sink.h); `kv` is only read. Not
  /// re-entrant: one forward at a time per model (it owns its scratch).
  virtual void forward(std::span<const ForwardWindow> windows, const KvStore& kv, KvWriteSink& sink,
                       Logits& out) = 0;

  /// Greedy drafting of `steps` tokens per window in one call: runs `windows` (each
  /// window's token is the argmax of its last position), then steps - 1 one-token
  /// forwards in which each window feeds its previous token. `ids` gets steps x windows
  /// ids, step by step. Each window's sequence must have reserved
  /// [start, start + n + steps - 1); the K/V of every fed token go to `sink` (one report
  /// per step) and nothing is committed: the caller commits what it keeps. The same
  /// tokens as `steps` forward() calls; this default makes them, a device model runs the
  /// whole chain on the device without a host round trip per token.
  virtual void forward_greedy_chain(std::span<const ForwardWindow> windows, int32_t steps, const KvStore& kv,
                                    KvWriteSink& sink, std::vector<int32_t>& ids);

  /// A draft chain whose windows each draw their token greedily (temperature 0: the
  /// argmax) or by pure temperature sampling (no top-k / top-p): a window at temperature
  /// T > 0 draws step s's token from q = cpu::sampling_distribution(logits, {T}) with
  /// cpu::sample_from(q, uniforms[s * windows + w]), and feeds it to the next step.
  struct ChainSampling {
    std::span<const float> temperature;  ///< [windows]: 0 greedy, else > 0 and finite
    std::span<const double> uniforms;    ///< [steps x windows], step-major (greedy rows' unread)
    /// The caller can take q on this model's device: a model that keeps it there leaves
    /// `q` empty and gives the rows with sampled_chain_q() (others fill `q` as without).
    bool q_on_device = false;
  };
  /// forward_greedy_chain with ChainSampling: `ids` as there (steps x windows), `q` gets
  /// [steps x windows x vocab] floats, window w's distribution of step s at
  /// (s * windows + w) * vocab (greedy windows' rows unspecified). The same tokens and q as
  /// `steps` forward() calls followed by draft_sample with those uniforms; this default
  /// makes them, a device model samples on the device within the chain (the same q up to
  /// the last bits of its sums and exp, so a draw differs only where a uniform lands
  /// within rounding of a boundary of the cumulative distribution).
  virtual void forward_sampled_chain(std::span<const ForwardWindow> windows, int32_t steps,
                                     const ChainSampling& sampling, const KvStore& kv, KvWriteSink& sink,
                                     std::vector<int32_t>& ids, std::vector<float>& q);
  /// After forward_sampled_chain with q_on_device left `q` empty: where its q rows are on
  /// this model's device, laid out as `q` would be (data: step 0, window 0; stride: one
  /// vocabulary), valid until this model's next sampled chain. Default: none.
  virtual DeviceRows sampled_chain_q() const { return {}; }
  /// forward_sampled_chain launched without a host sync (a device model; one round in
  /// flight): the ids stay where the chain leaves them, as launch_greedy_chain_early's
  /// with every step early and slot -1 (`ids`: id step * windows + w, valid until this
  /// model's next forward or chain), and so do the q rows (sampling.q_on_device is
  /// required: sampled_chain_q gives them, their event the chain's). collect_greedy_chain
  /// then gives the ids to the host (no sync once the returned event is complete). The
  /// same tokens and q as forward_sampled_chain. This default (a model that keeps nothing
  /// on a device) throws Error(invalid_argument): the caller runs forward_sampled_chain.
  virtual Event launch_sampled_chain(std::span<const ForwardWindow> windows, int32_t steps,
                                     const ChainSampling& sampling, const KvStore& kv, KvWriteSink& sink,
                                     DeviceIds& ids);
  /// Copies `count` rows of `cols` floats from this model's device to `out` (host), after
  /// waiting for their event: the host's way to judge rows left on the device. Throws
  /// Error(internal) on a model with no device memory (this default).
  virtual void read_device_rows(const DeviceRows& rows, int32_t count, int32_t cols, float* out) const;

  /// forward_greedy_chain in two halves, so the caller can work (or another model can
  /// run) while the chain runs: launch_greedy_chain takes the same arguments and returns
  /// once the chain is queued (the sink is told about the rows then; they are in the
  /// pool for any later work on this model's stream); collect_greedy_chain waits for it
  /// and gives its ids. One chain at a time; a forward in between is allowed (it waits
  /// for the chain first). Throws Error(invalid_argument) when nothing was launched.
  /// This default runs the chain in launch (a host model has nothing to overlap with).
  /// Returns the event after the chain's work on this model's stream, ids copied back
  /// included (complete here): once it is complete, collect does not wait (a device
  /// model then takes the ids without a host sync).
  virtual Event launch_greedy_chain(std::span<const ForwardWindow> windows, int32_t steps, const KvStore& kv,
                                    KvWriteSink& sink);
  virtual void collect_greedy_chain(std::vector<int32_t>& ids);
  /// launch_greedy_chain that also gives, without a host sync, where the ids of the
  /// chain's first `early` steps (1..steps) lie before it ends: `early_ids` id
  /// step * windows + w is window w's id of that step (step-major, as collect gives
  /// them), and its event comes after those steps on this model's stream, so another
  /// stream can read them while the rest of the chain runs (the model drafter's drafts go
  /// to the verify forward this way: place_next_tokens). With `slot` -1 they are where
  /// the chain leaves them, valid until this model's next forward or chain; with a slot
  /// >= 0 (one per round in flight: scheduler.micro_batches) they are copied, behind
  /// their steps and before their event, into the slot's own buffer, valid until the next
  /// chain launched with the same slot. This default runs the chain at once: host memory,
  /// complete. A model that overrides launch_greedy_chain overrides this too.
  virtual Event launch_greedy_chain_early(std::span<const ForwardWindow> windows, int32_t steps, int32_t early,
                                          const KvStore& kv, KvWriteSink& sink, DeviceIds& early_ids,
                                          int32_t slot);

  /// Tokens of the next forward()'s windows that the host does not have: each placed
  /// token is read on this model's device from `at` (device memory of this model's
  /// device) after the forward's stream has waited for every event of `ready`, in front
  /// of the forward (its span holds a placeholder in [0, vocab) there). After that forward
  /// placed_tokens() gives their values, in `placed` order, copied back under the
  /// forward's one host sync. Dropped if the forward fails first. A device model only:
  /// this default throws Error(invalid_argument) (a host consumer reads host ids itself).
  struct PlacedToken {
    int32_t window = 0;  ///< index into the next forward's windows
    int32_t offset = 0;  ///< the token's index in that window
    const int32_t* at = nullptr;
  };
  virtual void place_next_tokens(std::span<const PlacedToken> placed, std::span<const Event> ready);
  virtual std::span<const int32_t> placed_tokens() const { return {}; }

  /// Work of another stream that the next forward() also waits for: when that forward
  /// returns, the work behind `e` is complete too. A device model makes its stream wait
  /// for `e` after the forward's own work, so the forward's one host sync covers both
  /// (the verifier's forward joins the drafter's draft-ahead chain, which the drafter
  /// then collects without a sync of its own; ARCHITECTURE.md section 4). This default
  /// waits on the host now (CPU events are complete).
  virtual void join_next_forward(const Event& e) { e.synchronize(); }

 private:
  std::vector<int32_t> launched_ids_;  // the default launch's result, until collected
  std::map<int32_t, std::vector<int32_t>> early_slots_;  // the default launch's early ids, by slot
  bool launched_ = false;
};

/// Throws Error(invalid_argument) unless `sampling` has a temperature (0, or positive and
/// finite) per window and a uniform per window and step (ForwardModel::forward_sampled_chain).
void check_chain_sampling(const ForwardModel::ChainSampling& sampling, size_t windows, int32_t steps);

}  // namespace specpipe
