#pragma once
/// The host side of one CUDA forward (CudaTransformer::forward and its greedy chains),
/// built without any CUDA call, as nano-vllm's ModelRunner.prepare_* is: from the windows,
/// a chain's step count and the KV store's books, every row's token id, position and pool
/// slot, the block tables, the attention windows, the logits rows, the shape that keys a
/// CUDA graph, and the metadata bytes the forward uploads in one fixed layout. Every
/// precondition of a forward is checked here, before the device is touched. Plain C++
/// (specpipe_model_cuda_plan), unit-tested without a GPU (tests/cuda/forward_plan_test.cpp).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cuda/attention_plan.h"
#include "kvstore/kv_store.h"
#include "model/config.h"
#include "model/forward_model.h"

namespace specpipe::cuda {

/// Most steps of one greedy chain (CudaTransformer::kMaxChainSteps).
constexpr int32_t kMaxChainSteps = 16;

/// Byte offsets of a forward's metadata in one buffer (on the device, and the pinned host
/// buffer it is uploaded from). One layout for every forward of a model, sized for
/// max_tokens rows: graphs bake these addresses. In order, each array 16-byte aligned:
///   slots         int64 [max_tokens]   pool slot of each row (staged rounds: the row)
///   tokens        int32 [max_tokens]   token id of each row
///   positions     int32 [max_tokens]   position of each row
///   token_window  int32 [max_tokens]   window of each row
///   logit_index   int32 [max_tokens]   row of each logits row
///   windows       AttentionWindowDesc [max_tokens]
///   tables        int32 [..chain)      the windows' block tables, back to back
///   chain         per chain step s = 1..kMaxChainSteps-1: int64 slots, int32 positions
///                 and window descriptors, [max_tokens] each
///   identity      int32 [max_tokens]   i -> i (a chain step's token -> window and
///                                      logits row -> token: one-token windows)
struct ForwardMetaLayout {
  size_t max_tokens = 0;
  size_t slots = 0, tokens = 0, positions = 0, token_window = 0, logit_index = 0, windows = 0, tables = 0;
  size_t chain = 0;             ///< first byte of chain step 1 (one past the block tables' room)
  size_t chain_step_bytes = 0;  ///< bytes of one chain step
  size_t identity = 0;
  size_t chain_bytes = 0;  ///< [chain, chain + chain_bytes): the chain steps and the identity
  size_t bytes() const { return chain + chain_bytes; }
  /// Block table entries the metadata holds (all windows together).
  size_t table_capacity() const { return (chain - tables) / 4; }
  size_t chain_slots(int32_t step) const { return chain + static_cast<size_t>(step - 1) * chain_step_bytes; }
  size_t chain_positions(int32_t step) const;
  size_t chain_windows(int32_t step) const;
};

/// The layout for forwards of at most `max_tokens` rows of a model of `config` over a pool
/// of `num_blocks` blocks of `block_size` tokens: a window's block table covers at most
/// the model's positions (+1: truncate keeps a sequence's first block) and, unless
/// `host_tier` (offload: a table also names host-tier blocks), the pool.
ForwardMetaLayout forward_meta_layout(const ModelConfig& config, int32_t max_tokens, int32_t num_blocks,
                                      int32_t block_size, bool host_tier = false);

/// What a forward is planned against: the GEMMs' row capacity, the device pool (0 blocks:
/// not allocated yet) and the metadata layout.
struct ForwardGeometry {
  int32_t max_tokens = 0;
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  ForwardMetaLayout meta;
};

/// One later step s >= 1 of a greedy chain: one token per window (its previous step's
/// argmax, on the device) at position start + n - 1 + s, every earlier position in the
/// pool, the window's block table.
struct ChainStepPlan {
  std::vector<int64_t> slots;                 ///< [windows]
  std::vector<int32_t> positions;             ///< [windows]
  std::vector<AttentionWindowDesc> windows;   ///< [windows]: {position, window, 1, table offset}
};

/// Everything a forward needs from the host, laid out row by row (window after window).
struct ForwardPlan {
  int32_t steps = 1;       ///< 1, or a greedy chain's steps
  bool chain = false;      ///< a greedy chain: one logits row (its argmax) per window and step
  bool stage = false;      ///< a staged round: K/V rows to the staging buffer, slots = rows
  int32_t total_tokens = 0;  ///< rows of step 0
  int32_t logit_rows = 0;    ///< logits rows of step 0
  std::vector<int32_t> tokens;       ///< [total_tokens]
  std::vector<int32_t> positions;    ///< [total_tokens]
  std::vector<int64_t> slots;        ///< [total_tokens]
  std::vector<int32_t> logit_index;  ///< [logit_rows]: the row each logits row reads
  std::vector<int32_t> block_tables; ///< every window's table, back to back
  AttentionPlan attention;           ///< step 0's windows and each row's window
  std::vector<ChainStepPlan> chain_steps;  ///< steps 1..steps-1
  /// Split-K chunks of the row that sees the most keys, in any step (the eager grid).
  int32_t max_chunks = 0;
  std::vector<int64_t> first_logit_row;    ///< [windows]: a window's first logits row
  std::vector<int32_t> window_logit_rows;  ///< [windows]
  /// The graph shape: (tokens, logits rows) per window, in order.
  std::vector<int32_t> shape;
  /// Offload: the host tier block each block of the layer ring's slots holds, in ring
  /// order (a sequence's host blocks in position order, sequence after sequence; empty
  /// when no window's sequence has K/V on the host tier). A window's block table gives
  /// its host blocks as ring_table_entry(ring block) (kernels/cuda/attention_plan.h).
  std::vector<int32_t> ring_host_blocks;
  /// The metadata bytes [0, upload_bytes) a forward uploads: up to the end of the used
  /// block tables. A chain also uploads [chain, chain + chain_bytes).
  size_t upload_bytes = 0;
  /// SpecPV (ForwardWindow::view): when some window attends to a partial view of its
  /// prefix, every layer's own attention windows and block tables (a view differs from
  /// layer to layer); empty otherwise. Layer l's windows are layer_windows[l * windows(),
  /// (l + 1) * windows()), its tables layer_tables[l * layer_table_len, ...): a view's
  /// blocks in position order with prefix_len the view's length, a window without a view
  /// its whole table. Attention gathers the view from the pool (view_meta_bytes layout).
  std::vector<AttentionWindowDesc> layer_windows;
  std::vector<int32_t> layer_tables;
  int32_t layer_table_len = 0;

  int32_t windows() const { return static_cast<int32_t>(window_logit_rows.size()); }
  /// Whether some window attends to a partial view (layer_windows).
  bool views() const { return !layer_windows.empty(); }
  /// Whether the forward streams host-tier K/V through the layer ring.
  bool streams_host_kv() const { return !ring_host_blocks.empty(); }
  /// Argmax ids a forward hands back: one per window and step (chains), else per logits row.
  int32_t ids() const { return chain ? steps * windows() : logit_rows; }
};

/// Throws Error(invalid_argument) unless `kv`'s layout matches the model and the device
/// pool of `g` (allocated).
void check_store_layout(const KvStore& kv, const ModelConfig& config, const ForwardGeometry& g);

/// Plans a forward (steps 1, chain false) or a greedy chain (chain true, steps in
/// [1, kMaxChainSteps]) of `windows` over `kv`. stage: a staged round (not for chains).
/// Throws Error, naming what is wrong, unless: the store's layout matches the model and
/// the pool, there are windows, the pool exists, every window is valid for the store and
/// the model (window_starts, with steps - 1 positions more for a chain), at most
/// max_tokens tokens in all, and the block tables fit the metadata, and no greedy chain
/// reads host-tier K/V (Error(unsupported): a chain's steps would each need the ring).
/// A window's partial view (ForwardWindow::view) must give every layer a length in
/// [0, start] and ceil(length / block_size) pool blocks, and is refused in chains and
/// over host-tier K/V.
/// `kv` is only read.
ForwardPlan plan_forward(std::span<const ForwardWindow> windows, int32_t steps, bool chain, bool stage,
                         const KvStore& kv, const ModelConfig& config, const ForwardGeometry& geometry);

/// Bytes of one layer's part of a view forward's metadata (its windows, then its block
/// tables at view_tables_offset, 16-byte aligned): the least per-layer stride for `plan`.
size_t view_layer_bytes(const ForwardPlan& plan);
size_t view_tables_offset(const ForwardPlan& plan);
/// Writes a view forward's per-layer metadata into `host`, layer l at l * stride
/// (stride >= view_layer_bytes; host holds num_layers strides).
void pack_view_meta(const ForwardPlan& plan, int32_t num_layers, size_t stride, std::span<unsigned char> host);

/// The key of the plan's CUDA graph: its shape, then what else changes the captured work
/// (copy_logits, steps, stage, timing_skip).
std::vector<int32_t> graph_key(const ForwardPlan& plan, bool copy_logits, int32_t timing_skip);

/// Writes the plan's metadata into `host` (at least meta.bytes() bytes, in `meta`'s
/// layout): [0, plan.upload_bytes), and for a chain of steps > 1 the chain area. Bytes it
/// does not write are left as they are.
void pack_forward_meta(const ForwardPlan& plan, const ForwardMetaLayout& meta, std::span<unsigned char> host);

}  // namespace specpipe::cuda
