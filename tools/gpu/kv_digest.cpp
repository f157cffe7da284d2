// Per-layer K/V digests of a sequence (kv_digest.h).
#include "tools/gpu/kv_digest.h"

#include <cstring>

#include "core/dtype.h"

namespace specpipe::gpu_tool {
namespace {

/// FNV-1a over 32-bit words: order-sensitive, every bit of every element counts.
void mix(uint64_t& h, const float* row, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, row + i, 4);
    h = (h ^ bits) * 1099511628211ull;
  }
}

/// Row `slot` of a host tier layer (K or V data) as floats.
const float* host_row(const void* data, DType dtype, int64_t slot, int64_t kvd, std::vector<float>& widened) {
  if (dtype == DType::f32) return static_cast<const float*>(data) + slot * kvd;
  const auto* bits = static_cast<const uint16_t*>(data) + slot * kvd;
  widened.resize(static_cast<size_t>(kvd));
  for (int64_t i = 0; i < kvd; ++i) widened[static_cast<size_t>(i)] = bf16_to_f32(bits[i]);
  return widened.data();
}

}  // namespace

std::vector<uint64_t> kv_digest(CudaTransformer& m, const KvStore& kv, SeqId seq, int32_t n) {
  const KvStoreConfig& kc = kv.config();
  const int64_t kvd = int64_t{kc.num_kv_heads} * kc.head_dim;
  const int32_t B = kc.block_size;
  const HostKvTier* host = kv.host_tier();
  const int32_t host_end = host ? kv.host_blocks(seq) * B : 0;
  std::vector<uint64_t> digests;
  std::vector<float> k, v, wk, wv;
  for (int32_t l = 0; l < kc.num_layers; ++l) {
    m.read_pool(l, k, v);
    uint64_t h = 14695981039346656037ull;
    for (int32_t pos = 0; pos < n; ++pos) {
      if (pos < host_end) {
        const int64_t slot = int64_t{kv.host_block_table(seq)[static_cast<size_t>(pos / B)]} * B + pos % B;
        mix(h, host_row(host->k_data(l), host->layout().dtype, slot, kvd, wk), kvd);
        mix(h, host_row(host->v_data(l), host->layout().dtype, slot, kvd, wv), kvd);
      } else {
        const int64_t slot = kv.slot(seq, pos);
        mix(h, k.data() + slot * kvd, kvd);
        mix(h, v.data() + slot * kvd, kvd);
      }
    }
    digests.push_back(h);
  }
  return digests;
}

}  // namespace specpipe::gpu_tool
