#pragma once
/// The host tier of the KV store (ARCHITECTURE.md section 5, "Host tier"): host memory
/// paged like the pool, holding the oldest full committed blocks of long sequences
/// when the pool fills. Per layer, K and V are [host_blocks, block_size, kv_heads,
/// head_dim] elements of the layout's dtype (float32 as KvTensors; bf16 for a CUDA pool
/// of BF16 K/V), the layout of the pool, so a block moves between the tiers as one
/// contiguous copy per layer and K/V.
///
/// Its blocks are counted by a BlockPool of their own (free list only: host blocks are
/// never hashed or shared). Not thread-safe: the KvStore that owns it is mutated by one
/// owner (the KV-router); a forward's layer ring only reads it, while no mutation runs.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "kvstore/block_pool.h"

namespace specpipe {

/// Where a host tier's memory comes from. The CPU backend takes plain pages; a CUDA
/// backend gives pinned memory (cudaHostAlloc), which its copy streams need to copy
/// asynchronously.
class HostMemoryAllocator {
 public:
  virtual ~HostMemoryAllocator() = default;
  /// `bytes` of memory aligned to 64 bytes, or nullptr when the system has none left
  /// (never throws). Contents undefined.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* memory, size_t bytes) = 0;
  /// Why allocate(bytes) returned nullptr, for the tier's Error(out_of_capacity): the
  /// default names the bytes; a pinned allocator says they cannot be pinned and why.
  virtual std::string failure(size_t bytes) const;
};

/// The CPU backend's allocator (std::aligned_alloc: pages are only touched when used).
HostMemoryAllocator& default_host_allocator();

struct HostTierLayout {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;
  DType dtype = DType::f32;  ///< element type of K and V: f32 or bf16 (the pool's)
};

class HostKvTier {
 public:
  /// As many blocks as `bytes` holds (K and V of every layer per block). Throws
  /// Error(invalid_argument) naming the field for a layout size < 1 or a budget that
  /// holds no block ("host_bytes: 1000 bytes hold no KV block of 131072 bytes"), and
  /// Error(out_of_capacity) when the allocator has no memory; nothing stays allocated
  /// then. `allocator` (default: default_host_allocator()) must outlive the tier.
  HostKvTier(const HostTierLayout& layout, int64_t bytes, HostMemoryAllocator* allocator = nullptr);
  ~HostKvTier();
  HostKvTier(const HostKvTier&) = delete;
  HostKvTier& operator=(const HostKvTier&) = delete;

  const HostTierLayout& layout() const { return layout_; }
  /// Bytes of one block: K and V of every layer. Throws Error(invalid_argument) for a
  /// dtype other than f32 / bf16.
  static int64_t block_bytes(const HostTierLayout& layout);
  int64_t block_bytes() const { return block_bytes(layout_); }
  int64_t bytes() const { return int64_t{total_blocks()} * block_bytes(); }  ///< what it holds
  int64_t slot_stride() const { return int64_t{layout_.num_kv_heads} * layout_.head_dim; }

  int32_t total_blocks() const { return blocks_.num_blocks(); }
  int32_t free_blocks() const { return blocks_.available(); }
  int32_t used_blocks() const { return blocks_.num_used(); }
  /// Takes a free block; Error(out_of_capacity) when none is left.
  int32_t allocate();
  /// Returns a block taken by allocate().
  void release(int32_t block);
  bool in_use(int32_t block) const { return blocks_.ref_count(block) > 0; }

  /// K / V of `layer` of an f32 tier: [total_blocks, block_size, kv_heads, head_dim];
  /// slot s of a block b starts at k(layer) + (b * block_size + s) * slot_stride().
  /// Error(invalid_argument) for a bf16 tier (its elements are not floats: k_data).
  float* k(int32_t layer) { return floats(layer, 0); }
  float* v(int32_t layer) { return floats(layer, 1); }
  const float* k(int32_t layer) const { return const_cast<HostKvTier*>(this)->floats(layer, 0); }
  const float* v(int32_t layer) const { return const_cast<HostKvTier*>(this)->floats(layer, 1); }
  /// The same of any dtype: elements of element_bytes() each (a device copies them as bytes).
  void* k_data(int32_t layer) { return layer_base(layer, 0); }
  void* v_data(int32_t layer) { return layer_base(layer, 1); }
  const void* k_data(int32_t layer) const { return const_cast<HostKvTier*>(this)->layer_base(layer, 0); }
  const void* v_data(int32_t layer) const { return const_cast<HostKvTier*>(this)->layer_base(layer, 1); }
  int64_t block_floats() const { return int64_t{layout_.block_size} * slot_stride(); }  ///< elements of one layer's K (or V)
  int64_t element_bytes() const { return static_cast<int64_t>(dtype_size(layout_.dtype)); }
  int64_t block_tensor_bytes() const { return block_floats() * element_bytes(); }  ///< bytes of one layer's K (or V)

 private:
  unsigned char* layer_base(int32_t layer, int32_t which);
  float* floats(int32_t layer, int32_t which);

  HostTierLayout layout_;
  BlockPool blocks_;
  HostMemoryAllocator* allocator_;
  size_t allocated_bytes_ = 0;
  unsigned char* memory_ = nullptr;  // [layers][K, V][blocks, block_size, kv_heads, head_dim]
};

class KvTensors;

/// One whole block (every layer, K and V) between a float32 pool on the host and the
/// tier: the store's in-line copies and the CPU's copy thread (async_write_back.h).
void copy_block_to_host(const KvTensors& pool, HostKvTier& tier, int32_t pool_block, int32_t host_block);
void copy_block_to_pool(const HostKvTier& tier, KvTensors& pool, int32_t host_block, int32_t pool_block);

}  // namespace specpipe
