#pragma once
/// Causal GQA attention of windows of new tokens over [committed prefix in the paged pool
/// + the window's own dense K/V], on the GPU. One kernel pair serves prefill chunks,
/// single-token decode and speculative verify windows. CPU reference: cpu::attention
/// (kernels/cpu/attention.h).
///
/// A split-K chunk kernel (grid: chunk x kv head x query row) writes per (row, head,
/// chunk) a max, a sum of exponentials and the unnormalised value sum; the row's chunks
/// are then merged in ascending order, by the last chunk block of (row, kv head) to
/// finish when the batch has counters (one launch), else by a combine kernel (two). See
/// attention_plan.h for why this is batch invariant: a row's result depends only on its
/// query and keys [0, p].
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/attention_plan.h"

namespace specpipe::cuda {

struct AttentionShape {
  int32_t num_heads;     ///< query heads
  int32_t num_kv_heads;  ///< num_heads % num_kv_heads == 0, group of at most 16
  int32_t head_dim;      ///< at most 256
  float scale;           ///< usually 1 / sqrt(head_dim)
};

/// One layer's pool (kvstore/kv_tensors.h layout, elements of `dtype`) and the batch's
/// block tables. A table entry e >= 0 is pool block e; e < 0 is block ring_block_of(e) of
/// the layer's ring slot (host-tier K/V the layer ring loaded, laid out like the pool:
/// offload, model/cuda/device_ring.h). Only the addresses differ: the same keys give the
/// same bits.
///
/// dtype f32 or bf16 (BF16 storage halves the K/V bytes read and moved; the kernels widen
/// each element to FP32 exactly and accumulate in FP32, in the same order as for FP32
/// storage). The pool, the ring slot and the batch's dense window K/V are all of it, so
/// a key gives the same floats wherever it is read from: a row's bits stay independent
/// of its window and batch.
struct PagedPool {
  const void* k;               ///< [slots, kv_heads, head_dim]; read
  const void* v;               ///< same layout; read
  int64_t slot_stride;         ///< elements per slot (kv_heads * head_dim)
  int32_t block_size;
  const int32_t* block_tables; ///< all windows' block tables, back to back; read
  const void* ring_k = nullptr;  ///< the ring slot's K [ring blocks, block_size, kv_heads, head_dim]; read
  const void* ring_v = nullptr;  ///< its V, same layout
  DType dtype = DType::f32;    ///< f32 or bf16: the elements of k, v, ring_k, ring_v and the batch's k, v
};

struct AttentionBatch {
  const float* q;  ///< [total_tokens, ld_q]: num_heads * head_dim used, RoPE applied; read
  const void* k;   ///< [total_tokens, ld_kv] of the pool's dtype: the windows' own keys; read
  const void* v;   ///< [total_tokens, ld_kv] of the pool's dtype: the windows' own values; read
  float* out;      ///< [total_tokens, ld_out]: num_heads * head_dim written
  int64_t ld_q, ld_kv, ld_out;
  const AttentionWindowDesc* windows;  ///< [plan.windows.size()] in device memory; read
  const int32_t* token_window;         ///< [total_tokens] in device memory; read
  int32_t total_tokens;
  int32_t max_chunks;                  ///< plan.max_chunks
  float* workspace;                    ///< plan.workspace_floats(num_heads, head_dim); scratch
  /// [total_tokens * num_kv_heads] chunk counters (AttentionPlan::counters): all zero
  /// before a launch, and each launch leaves them zero. nullptr: a second kernel merges.
  uint32_t* counters = nullptr;
  /// The fewest rows of any window of the batch (AttentionPlan::min_window_rows), 0 when
  /// not given. Batches whose every window has more than 16 rows (prefill chunks) take the
  /// prefill kernel (attention_prefill.cu); a token's bits are the same on every path.
  int32_t min_window_rows = 0;
  /// Every window's pool keys [0, prefix_len) were written before this forward began (its
  /// metadata upload is a full barrier in the stream): the decode kernel may load them
  /// before waiting for the kernel before. False for a chain's later steps, whose prefix
  /// ends in rows earlier steps of the same launch wrote.
  bool prefix_settled = false;
};

/// Enqueues the chunk kernel, and the combine kernel when batch.counters is null, on
/// `stream`. Returns cudaErrorInvalidValue for an unsupported shape (head_dim > 256, a
/// group over 16, heads not divisible, over 65,535 chunks) or a pool dtype other than
/// f32 / bf16, else the launch status.
cudaError_t attention(const AttentionShape& shape, const PagedPool& pool, const AttentionBatch& batch,
                      cudaStream_t stream);

/// The first version of the chunk kernel (value sums one (head, dim) chain per thread
/// step): the same arithmetic in the same order, kept so checks can compare the current
/// kernel with it bit for bit. Not for the forward.
cudaError_t attention_reference(const AttentionShape& shape, const PagedPool& pool, const AttentionBatch& batch,
                                cudaStream_t stream);

/// The same as attention(), but the combine writes each output as BF16 bits (round to nearest even, as
/// f32_to_bf16) to out_bf16 ([total_tokens, batch.ld_out]) instead of FP32 to batch.out:
/// bitwise f32_to_bf16 of what attention() writes, one launch less in the forward.
cudaError_t attention_bf16(const AttentionShape& shape, const PagedPool& pool, const AttentionBatch& batch,
                           uint16_t* out_bf16, cudaStream_t stream);

/// Variants of the decode and verify-window launches (issue 16 item 2), each giving every
/// other path's bits (the arithmetic and its orders are unchanged; only who loads what and
/// where from differs), chosen at launch: bit 1 merges a row's chunks in a second kernel
/// with a block per (row, query head) (the split path's head merge; decode: instead of the
/// chunk kernel's last block, windows: instead of a block per (row, kv head)); bit 2: a
/// BF16 chunk block copies its keys to shared memory in 16-byte pieces (cp.async) instead
/// of loading 2 bytes a lane; bit 4: the chunk kernel built for two blocks an SM (64
/// registers a thread; head_dim 33..128, one value chain a thread); bit 8: that build with
/// fewer shared-memory and shuffle instructions a chunk (groups up to 4, values staged):
/// each score pass's 16 dot products summed by one reduce-scatter instead of a butterfly
/// each, and a thread's value chains for 2 dims x up to 2 heads, each staged value pair read
/// once for all of them; bit 16 (with bit 8): that build for three blocks an SM (40
/// registers, its shared arrays sized for groups of 4; opt-in); bit 32: the verify-window
/// kernel with select-free reduce-scatters (keys and slots loaded in a lane-permuted order),
/// value chains of 2 dims x up to 6 slots a thread and BF16 keys staged by cp.async; bit 64
/// (with bit 32; head_dim 64 or 128): that kernel built for its head_dim, a slot's row
/// found by a multiply instead of a division sequence, the value chains spread over every
/// thread, and a chunk of settled pool keys (AttentionBatch::prefix_settled) located and
/// its copies issued before waiting for the kernel before (only q waits); bit 128 (with bit
/// 64): that build with fewer instructions (a lane's query dims one 16-byte shared-memory
/// load, the queries stored lane-major in the order the lane scores them; a score's
/// key-count test one comparison; value chains of 4 dims x up to 3 slots a thread; unsigned
/// indices; the GQA group's multiplier from the host); bit 1024 (with bits 1 and 8, FP32
/// K/V): kAttentionStreamChunks below; bit 256 (with 1024): kAttentionStreamTight; bit 512:
/// kAttentionWindowStepPairs; bit 2048 (with 256 and 1024): kAttentionStreamWide. The default,
/// kDefaultAttentionVariant (bits 1, 2, 4, 8, 32, 64, 128, 256, 512, 1024, 2048), won the A/Bs
/// of kernels/cuda/README.md ("Eleventh session", "Twelfth session", "Thirteenth session",
/// "Fourteenth session, verify windows", "Fifteenth session, window", "Seventeenth session,
/// chunk", "Eighteenth session, chunk", "Nineteenth session, window", "Nineteenth session,
/// chunk"); SPECPIPE_ATTENTION_VARIANT
/// (0..4095, read on first use) overrides it.
constexpr int kAttentionHeadMerge = 1;
constexpr int kAttentionStageKeys = 2;
constexpr int kAttentionTwoBlocks = 4;
constexpr int kAttentionLeanChunk = 8;
constexpr int kAttentionThreeBlocks = 16;
constexpr int kAttentionLeanWindow = 32;
constexpr int kAttentionFastWindow = 64;
constexpr int kAttentionTightWindow = 128;
/// Bit 1024 (with bit 8's two-blocks lean build and the head merge; FP32 K/V whose rows take
/// 16-byte copies; where a wave of two blocks an SM leaves each block at least two
/// chunks): the decode chunk kernel's streaming build. Y blocks a (row, kv head), the grid
/// one wave, block y taking the row's chunks y, y + Y, ...; its keys and values stream
/// through a two-slot shared-memory ring of 64-key tiles (cp.async), the next tile in
/// flight while one is scored or summed (kernels/cuda/README.md "Seventeenth session,
/// chunk").
constexpr int kAttentionStreamChunks = 1024;
/// Bit 256 (with bit 1024, head_dim 128 and a GQA group of 4: the 8B and 4B shapes): that
/// streaming kernel built for the shape, its head_dim and group compile-time constants, so
/// its copies, query addresses and bounds tests fold and its score passes sum by the
/// select-free reduce-scatter (the same arithmetic), for FP32 K/V and, in a four-slot ring
/// of 16 KB tiles, BF16 K/V (which 1024 alone leaves to bit 8's kernel); with bit 1, for decode
/// steps of 256 chunks (32K keys) or more, the head merge as a block per (row, query head, 32
/// dims) that copies its records in batches (kernels/cuda/README.md "Eighteenth session, chunk").
constexpr int kAttentionStreamTight = 256;
/// Bit 512 (with bit 128, the window kernel's lean build): its score passes take two 4-slot
/// steps at a time, the two reduce-scatters' shuffle chains interleaved, the softmax a
/// thread's slots two at a time, and with FP32 keys the values' copies issued after the first
/// pass's key loads (the same arithmetic; kernels/cuda/README.md "Nineteenth session, window").
constexpr int kAttentionWindowStepPairs = 512;
/// Bit 2048 (with bits 256 and 1024): that build's value chains on 8 warps (one dim x
/// two heads a thread) instead of 4 (two dims x two heads), and its BF16 K/V in 128-key
/// tiles (a chunk's keys, then its values, through a two-slot ring of 32 KB tiles: two tile
/// barriers a chunk instead of four); the same chains in the same order
/// (kernels/cuda/README.md "Nineteenth session, chunk").
constexpr int kAttentionStreamWide = 2048;
constexpr int kAttentionUsedBits =
    255 | kAttentionStreamTight | kAttentionWindowStepPairs | kAttentionStreamChunks | kAttentionStreamWide;
constexpr int kAttentionVariants = 4096;
constexpr int kDefaultAttentionVariant =
    239 | kAttentionStreamTight | kAttentionWindowStepPairs | kAttentionStreamChunks | kAttentionStreamWide;
int attention_variant();
/// For checks and A/B timings: the variant every later launch takes.
void set_attention_variant(int variant);

/// Whether batches of long windows (AttentionBatch::min_window_rows over 16, head_dim 128)
/// take the prefill kernel, which stages each K/V chunk once for a tile of rows (the
/// same bits as the chunk kernel; kernels/cuda/README.md "Prefill attention"). On unless
/// SPECPIPE_ATTENTION_PREFILL=0 (read on first use: the chunk kernel, for A/B timings).
bool attention_prefill_enabled();
/// For checks and A/B timings: whether every later launch may take the prefill kernel.
void set_attention_prefill(bool on);

}  // namespace specpipe::cuda
