#include "kvstore/host_tier.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "kvstore/kv_tensors.h"

namespace specpipe {
namespace {

class AlignedAllocator final : public HostMemoryAllocator {
 public:
  void* allocate(size_t bytes) override {
    const size_t rounded = (bytes + 63) / 64 * 64;  // aligned_alloc wants a multiple
    return std::aligned_alloc(64, rounded);
  }
  void release(void* memory, size_t) override { std::free(memory); }
};

/// The number of blocks `bytes` holds; throws for a bad layout or a budget too small.
int32_t blocks_for(const HostTierLayout& layout, int64_t bytes) {
  const std::pair<const char*, int32_t> sizes[] = {{"num_layers", layout.num_layers},
                                                   {"num_kv_heads", layout.num_kv_heads},
                                                   {"head_dim", layout.head_dim},
                                                   {"block_size", layout.block_size}};
  for (const auto& [name, value] : sizes)
    if (value < 1) fail(ErrorCode::invalid_argument, "KV host tier: {} must be >= 1, got {}", name, value);
  const int64_t block = HostKvTier::block_bytes(layout);
  if (bytes < block)
    fail(ErrorCode::invalid_argument, "KV host tier: host_bytes: {} bytes hold no KV block of {} bytes", bytes,
         block);
  const int64_t blocks = bytes / block;
  if (blocks > INT32_MAX)
    fail(ErrorCode::invalid_argument, "KV host tier: host_bytes: {} bytes are more than {} blocks", bytes, INT32_MAX);
  return static_cast<int32_t>(blocks);
}

}  // namespace

std::string HostMemoryAllocator::failure(size_t bytes) const {
  return fmt::format("cannot allocate {} bytes of host memory", bytes);
}

HostMemoryAllocator& default_host_allocator() {
  static AlignedAllocator allocator;
  return allocator;
}

int64_t HostKvTier::block_bytes(const HostTierLayout& l) {
  if (l.dtype != DType::f32 && l.dtype != DType::bf16)
    fail(ErrorCode::invalid_argument, "KV host tier: dtype {} (K/V are F32 or BF16)", dtype_name(l.dtype));
  return int64_t{2} * l.num_layers * l.block_size * l.num_kv_heads * l.head_dim *
         static_cast<int64_t>(dtype_size(l.dtype));
}

HostKvTier::HostKvTier(const HostTierLayout& layout, int64_t bytes, HostMemoryAllocator* allocator)
    : layout_(layout),
      blocks_(blocks_for(layout, bytes)),
      allocator_(allocator ? allocator : &default_host_allocator()) {
  allocated_bytes_ = static_cast<size_t>(int64_t{blocks_.num_blocks()} * block_bytes());
  memory_ = static_cast<unsigned char*>(allocator_->allocate(allocated_bytes_));
  if (!memory_)
    fail(ErrorCode::out_of_capacity, "KV host tier: {} ({} blocks of {} bytes)", allocator_->failure(allocated_bytes_),
         blocks_.num_blocks(), block_bytes());
}

HostKvTier::~HostKvTier() { allocator_->release(memory_, allocated_bytes_); }

int32_t HostKvTier::allocate() {
  if (blocks_.available() == 0)
    fail(ErrorCode::out_of_capacity, "out of KV host tier blocks: all {} are in use ({} bytes)", total_blocks(),
         bytes());
  return blocks_.allocate().block;
}

void HostKvTier::release(int32_t block) { blocks_.release(block); }

unsigned char* HostKvTier::layer_base(int32_t layer, int32_t which) {
  if (layer < 0 || layer >= layout_.num_layers)
    fail(ErrorCode::invalid_argument, "KV host tier: layer {} is outside [0, {})", layer, layout_.num_layers);
  const int64_t per_tensor = int64_t{total_blocks()} * block_tensor_bytes();
  return memory_ + (int64_t{layer} * 2 + which) * per_tensor;
}

float* HostKvTier::floats(int32_t layer, int32_t which) {
  if (layout_.dtype != DType::f32)
    fail(ErrorCode::invalid_argument, "KV host tier: its K/V are {}, not F32 (k_data / v_data)",
         dtype_name(layout_.dtype));
  return reinterpret_cast<float*>(layer_base(layer, which));
}

void copy_block_to_host(const KvTensors& pool, HostKvTier& tier, int32_t pool_block, int32_t host_block) {
  const int64_t floats = tier.block_floats();
  for (int32_t layer = 0; layer < tier.layout().num_layers; ++layer) {
    std::copy_n(pool.k(layer) + pool_block * floats, floats, tier.k(layer) + host_block * floats);
    std::copy_n(pool.v(layer) + pool_block * floats, floats, tier.v(layer) + host_block * floats);
  }
}

void copy_block_to_pool(const HostKvTier& tier, KvTensors& pool, int32_t host_block, int32_t pool_block) {
  const int64_t floats = tier.block_floats();
  for (int32_t layer = 0; layer < tier.layout().num_layers; ++layer) {
    std::copy_n(tier.k(layer) + host_block * floats, floats, pool.k(layer) + pool_block * floats);
    std::copy_n(tier.v(layer) + host_block * floats, floats, pool.v(layer) + pool_block * floats);
  }
}

}  // namespace specpipe
