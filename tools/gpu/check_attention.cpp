// cuda::attention against cpu::attention, and its batch invariance: a token's output is
// bitwise the same in a verify window of any size, in plain decode, and beside other
// windows in a batch.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "core/dtype.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"
#include "tools/gpu/check_support.h"

namespace specpipe::gpu_check {
namespace {

constexpr int32_t kBlockSize = 16;
int64_t g_bf16_mismatches = 0;  // attention_bf16 vs f32_to_bf16(attention), over every gpu_attention call
int64_t g_bf16_runs = 0;
int64_t g_ref_mismatches = 0;  // attention vs attention_reference (the first kernel), bits
int64_t g_settled_mismatches = 0;  // attention with prefix_settled vs without (early loads), bits
// BF16 K/V storage: attention over a BF16 pool and window vs the FP32 kernels over the same
// values widened to floats (exact), and vs the BF16 reference kernel: bits, every launch.
int64_t g_kv_bf16_mismatches = 0, g_kv_bf16_ref_mismatches = 0;

std::vector<float> widen(const std::vector<uint16_t>& b) {
  std::vector<float> x(b.size());
  for (size_t i = 0; i < b.size(); ++i) x[i] = bf16_to_f32(b[i]);
  return x;
}

/// A layer's pool with some sequences in it, on the host and the device.
struct PoolFixture {
  int32_t kv_heads, head_dim;
  int64_t stride;
  std::vector<float> k, v;
  DeviceBuffer<float> dk, dv;
  int32_t next_block = 0;

  PoolFixture(int32_t kv, int32_t hd, int32_t blocks, uint32_t seed)
      : kv_heads(kv), head_dim(hd), stride(int64_t{kv} * hd),
        k(random_floats(static_cast<size_t>(blocks) * kBlockSize * stride, seed)),
        v(random_floats(static_cast<size_t>(blocks) * kBlockSize * stride, seed + 1)) {}
  // The same pool as BF16 bits (bk, bv) and those widened back to floats (rk, rv).
  DeviceBuffer<uint16_t> bk, bv;
  DeviceBuffer<float> rk, rv;
  void upload() {
    dk = DeviceBuffer<float>(k);
    dv = DeviceBuffer<float>(v);
    const auto kb = to_bf16(k), vb = to_bf16(v);
    bk = DeviceBuffer<uint16_t>(kb);
    bv = DeviceBuffer<uint16_t>(vb);
    rk = DeviceBuffer<float>(widen(kb));
    rv = DeviceBuffer<float>(widen(vb));
  }
  /// A block table for `positions` positions, its blocks taken in a shuffled order.
  std::vector<int32_t> table(int32_t positions, uint32_t seed) {
    const int32_t count = (positions + kBlockSize - 1) / kBlockSize;
    std::vector<int32_t> t(static_cast<size_t>(count));
    std::iota(t.begin(), t.end(), next_block);
    next_block += count;
    std::shuffle(t.begin(), t.end(), std::mt19937(seed));
    return t;
  }
  int64_t slot(const std::vector<int32_t>& table, int32_t pos) const {
    return int64_t{table[static_cast<size_t>(pos / kBlockSize)]} * kBlockSize + pos % kBlockSize;
  }
};

struct Window {
  int32_t prefix_len;
  int32_t n;
  const std::vector<int32_t>* table;
  const float* q;  // [n, H*hd]
  const float* k;  // [n, KV*hd]
  const float* v;
};

/// A batch of windows on the device: the queries and the windows' own K/V (FP32, and as
/// BF16 bits), the plan's metadata, the workspace and zeroed counters; `b` is the batch
/// over them with the counters (the chunk kernel's last block merging: the forward's way).
struct DeviceWindows {
  std::vector<float> k, v;  // the windows' K/V on the host
  cuda::AttentionPlan plan;
  DeviceBuffer<float> dq, dk, dv, dout, ws;
  DeviceBuffer<uint16_t> dkb, dvb;
  DeviceBuffer<uint32_t> counters;
  DeviceBuffer<int32_t> dtables, dtoken;
  DeviceBuffer<cuda::AttentionWindowDesc> ddesc;
  cuda::AttentionBatch b{};

  DeviceWindows(const cuda::AttentionShape& s, const std::vector<Window>& windows) {
    const int64_t ldq = int64_t{s.num_heads} * s.head_dim, ldkv = int64_t{s.num_kv_heads} * s.head_dim;
    std::vector<cuda::AttentionWindowSpec> specs;
    std::vector<int32_t> tables;
    std::vector<float> q;
    for (const Window& w : windows) {
      specs.push_back({w.prefix_len, w.n, static_cast<int32_t>(tables.size())});
      tables.insert(tables.end(), w.table->begin(), w.table->end());
      q.insert(q.end(), w.q, w.q + w.n * ldq);
      k.insert(k.end(), w.k, w.k + w.n * ldkv);
      v.insert(v.end(), w.v, w.v + w.n * ldkv);
    }
    plan = cuda::plan_attention(specs);
    dq = DeviceBuffer<float>(q);
    dk = DeviceBuffer<float>(k);
    dv = DeviceBuffer<float>(v);
    dkb = DeviceBuffer<uint16_t>(to_bf16(k));
    dvb = DeviceBuffer<uint16_t>(to_bf16(v));
    dout = DeviceBuffer<float>(static_cast<size_t>(plan.total_tokens * ldq));
    ws = DeviceBuffer<float>(static_cast<size_t>(plan.workspace_floats(s.num_heads, s.head_dim)));
    counters = DeviceBuffer<uint32_t>(std::vector<uint32_t>(static_cast<size_t>(plan.counters(s.num_kv_heads)), 0));
    dtables = DeviceBuffer<int32_t>(tables);
    dtoken = DeviceBuffer<int32_t>(plan.token_window);
    ddesc = DeviceBuffer<cuda::AttentionWindowDesc>(plan.windows);
    b = {dq.get(),   dk.get(),          dv.get(),        dout.get(), ldq,           ldkv, ldq, ddesc.get(),
         dtoken.get(), plan.total_tokens, plan.max_chunks, ws.get(),  counters.get(), plan.min_window_rows()};
  }

  /// The pool over `pool`'s FP32 or BF16 copy (dtype) and `b` over the windows' own K/V of
  /// that type.
  std::pair<cuda::PagedPool, cuda::AttentionBatch> typed(const PoolFixture& pool, DType dtype) const {
    const bool bf16 = dtype == DType::bf16;
    cuda::PagedPool p{bf16 ? static_cast<const void*>(pool.bk.get()) : pool.dk.get(),
                      bf16 ? static_cast<const void*>(pool.bv.get()) : pool.dv.get(), pool.stride, kBlockSize,
                      dtables.get()};
    p.dtype = dtype;
    cuda::AttentionBatch typed_b = b;
    if (bf16) {
      typed_b.k = dkb.get();
      typed_b.v = dvb.get();
    }
    return {p, typed_b};
  }
};

/// Runs the windows as one GPU batch; returns out [total, H*hd].
std::vector<float> gpu_attention(const cuda::AttentionShape& s, PoolFixture& pool, const std::vector<Window>& windows,
                                 cudaStream_t stream) {
  DeviceWindows dw(s, windows);
  const auto& k = dw.k;
  const auto& v = dw.v;
  const cuda::AttentionBatch& b = dw.b;
  const cuda::PagedPool p{pool.dk.get(), pool.dv.get(), pool.stride, kBlockSize, dw.dtables.get()};
  CUDA_OK(cuda::attention(s, p, b, stream));
  auto out = dw.dout.download();
  // attention_bf16 (the forward's fused output cast) must give f32_to_bf16 of `out`, bit for bit;
  // run without counters, it also checks the two-launch merge (combine kernel) against the one-launch one.
  DeviceBuffer<uint16_t> dout_bf16(out.size());
  cuda::AttentionBatch two_launches = b;
  two_launches.counters = nullptr;
  CUDA_OK(cuda::attention_bf16(s, p, two_launches, dout_bf16.get(), stream));
  const auto got_bf16 = dout_bf16.download();
  for (size_t i = 0; i < out.size(); ++i) g_bf16_mismatches += got_bf16[i] != f32_to_bf16(out[i]);
  ++g_bf16_runs;
  // The batch again into an output of its own: on the first kernel version (reference), or
  // with the pool prefix declared settled (AttentionBatch::prefix_settled, as a forward's
  // first step; the pool was uploaded before: settled chunks load before the PDL wait, the
  // same loads). Both must give `out`'s bits.
  const auto again = [&](bool reference, bool settled) {
    DeviceBuffer<float> dagain(out.size());
    cuda::AttentionBatch copy = b;
    copy.out = dagain.get();
    copy.prefix_settled = settled;
    if (reference) copy.counters = nullptr;
    CUDA_OK(reference ? cuda::attention_reference(s, p, copy, stream) : cuda::attention(s, p, copy, stream));
    const auto got = dagain.download();
    int64_t mismatches = 0;
    for (size_t i = 0; i < out.size(); ++i) mismatches += std::memcmp(&got[i], &out[i], sizeof(float)) != 0;
    return mismatches;
  };
  g_ref_mismatches += again(true, false);
  g_settled_mismatches += again(false, true);

  // BF16 storage: the pool and the window's K/V as BF16 bits; the FP32 kernels over the
  // same values widened must give the same bits (the BF16 kernels widen exactly, then run
  // the FP32 arithmetic), and so must the BF16 reference kernel.
  DeviceBuffer<float> dkr(widen(to_bf16(k))), dvr(widen(to_bf16(v))), dout_r(out.size()), dout_b(out.size()),
      dout_bref(out.size());
  const cuda::PagedPool pr{pool.rk.get(), pool.rv.get(), pool.stride, kBlockSize, dw.dtables.get()};
  cuda::PagedPool pb{pool.bk.get(), pool.bv.get(), pool.stride, kBlockSize, dw.dtables.get()};
  pb.dtype = DType::bf16;
  cuda::AttentionBatch br = b, bb = b;
  br.k = dkr.get();
  br.v = dvr.get();
  br.out = dout_r.get();
  bb.k = dw.dkb.get();
  bb.v = dw.dvb.get();
  bb.out = dout_b.get();
  CUDA_OK(cuda::attention(s, pr, br, stream));
  CUDA_OK(cuda::attention(s, pb, bb, stream));
  bb.out = dout_bref.get();
  bb.counters = nullptr;
  CUDA_OK(cuda::attention_reference(s, pb, bb, stream));
  const auto out_r = dout_r.download(), out_b = dout_b.download(), out_bref = dout_bref.download();
  for (size_t i = 0; i < out.size(); ++i) {
    g_kv_bf16_mismatches += std::memcmp(&out_r[i], &out_b[i], sizeof(float)) != 0;
    g_kv_bf16_ref_mismatches += std::memcmp(&out_bref[i], &out_b[i], sizeof(float)) != 0;
  }
  return out;
}

std::vector<float> cpu_attention(const cuda::AttentionShape& s, const PoolFixture& pool, const Window& w) {
  const int64_t ldq = int64_t{s.num_heads} * s.head_dim, ldkv = int64_t{s.num_kv_heads} * s.head_dim;
  std::vector<float> out(static_cast<size_t>(w.n * ldq), 0.0f);
  const cpu::AttentionShape cs{s.num_heads, s.num_kv_heads, s.head_dim, s.scale};
  const cpu::AttentionWindow cw{{pool.k.data(), pool.v.data(), pool.stride, w.table->data(), kBlockSize, w.prefix_len},
                                w.q, w.k, w.v, ldq, ldkv, w.n, out.data(), ldq};
  cpu::attention(cs, std::span<const cpu::AttentionWindow>(&cw, 1));
  return out;
}

cuda::AttentionShape shape_of(int32_t heads, int32_t kv, int32_t hd) {
  return {heads, kv, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
}

void check_accuracy(Report& report, cudaStream_t stream, int32_t heads, int32_t kv, int32_t hd,
                    const std::vector<std::pair<int32_t, int32_t>>& prefix_and_n, uint32_t seed) {
  const cuda::AttentionShape s = shape_of(heads, kv, hd);
  const int64_t ldq = int64_t{heads} * hd, ldkv = int64_t{kv} * hd;
  int32_t blocks = 0;
  for (auto [p, n] : prefix_and_n) blocks += (p + n + kBlockSize - 1) / kBlockSize;
  PoolFixture pool(kv, hd, blocks, seed);
  pool.upload();
  std::vector<std::vector<int32_t>> tables;
  std::vector<std::vector<float>> qs, ks, vs;
  for (size_t i = 0; i < prefix_and_n.size(); ++i) {
    auto [p, n] = prefix_and_n[i];
    tables.push_back(pool.table(p + n, seed + 10 + static_cast<uint32_t>(i)));
    qs.push_back(random_floats(static_cast<size_t>(n * ldq), seed + 100 + static_cast<uint32_t>(i), -2.0f, 2.0f));
    ks.push_back(random_floats(static_cast<size_t>(n * ldkv), seed + 200 + static_cast<uint32_t>(i), -2.0f, 2.0f));
    vs.push_back(random_floats(static_cast<size_t>(n * ldkv), seed + 300 + static_cast<uint32_t>(i)));
  }
  std::vector<Window> windows;
  std::vector<float> ref;
  for (size_t i = 0; i < prefix_and_n.size(); ++i) {
    windows.push_back({prefix_and_n[i].first, prefix_and_n[i].second, &tables[i], qs[i].data(), ks[i].data(),
                       vs[i].data()});
    const auto r = cpu_attention(s, pool, windows.back());
    ref.insert(ref.end(), r.begin(), r.end());
  }
  const auto got = gpu_attention(s, pool, windows, stream);
  std::string name = fmt::format("attention_vs_cpu h{} kv{} hd{} windows", heads, kv, hd);
  for (auto [p, n] : prefix_and_n) name += fmt::format(" {}+{}", p, n);
  report.compare(name, got, ref, 1e-4);
}

/// One sequence at prefix P with a window of 9 tokens whose K/V are also in the pool (as
/// after the window was accepted): window sizes 1..9, one-token decode at P + i, and the
/// window batched beside others must all give the same bits per token.
void check_invariance(Report& report, cudaStream_t stream) {
  const int32_t heads = 32, kv = 8, hd = 128, P = 250, N = 9;  // positions 250..258 cross the chunk edge at 256
  const cuda::AttentionShape s = shape_of(heads, kv, hd);
  const int64_t ldq = int64_t{heads} * hd, ldkv = int64_t{kv} * hd;
  PoolFixture pool(kv, hd, 200, 901);
  const auto table = pool.table(P + N, 902);
  const auto other_a = pool.table(1000 + 4, 903), other_b = pool.table(2, 904);
  const auto q = random_floats(static_cast<size_t>(N * ldq), 905, -2.0f, 2.0f);
  const auto k = random_floats(static_cast<size_t>(N * ldkv), 906, -2.0f, 2.0f);
  const auto v = random_floats(static_cast<size_t>(N * ldkv), 907);
  for (int32_t i = 0; i < N; ++i) {  // the window's K/V also in its pool slots
    const int64_t slot = pool.slot(table, P + i);
    std::copy_n(k.begin() + i * ldkv, ldkv, pool.k.begin() + slot * pool.stride);
    std::copy_n(v.begin() + i * ldkv, ldkv, pool.v.begin() + slot * pool.stride);
  }
  pool.upload();
  const auto full = gpu_attention(s, pool, {{P, N, &table, q.data(), k.data(), v.data()}}, stream);

  std::vector<float> decode, sizes_got, sizes_ref;
  for (int32_t i = 0; i < N; ++i) {
    const auto row = gpu_attention(
        s, pool, {{P + i, 1, &table, q.data() + i * ldq, k.data() + i * ldkv, v.data() + i * ldkv}}, stream);
    decode.insert(decode.end(), row.begin(), row.end());
  }
  report.bitwise("attention_invariance decode(P+i) == window9 row i", decode.data(), full.data(), full.size());
  for (int32_t n = 1; n <= N; ++n) {
    const auto out = gpu_attention(s, pool, {{P, n, &table, q.data(), k.data(), v.data()}}, stream);
    sizes_got.insert(sizes_got.end(), out.begin(), out.end());
    sizes_ref.insert(sizes_ref.end(), full.begin(), full.begin() + n * ldq);
  }
  report.bitwise("attention_invariance window sizes 1..9", sizes_got.data(), sizes_ref.data(), sizes_ref.size());

  const auto oq = random_floats(static_cast<size_t>(6 * ldq), 908), ok = random_floats(static_cast<size_t>(6 * ldkv), 909);
  const auto batched = gpu_attention(s, pool,
                                     {{1000, 4, &other_a, oq.data(), ok.data(), ok.data()},
                                      {P, N, &table, q.data(), k.data(), v.data()},
                                      {0, 2, &other_b, oq.data() + 4 * ldq, ok.data() + 4 * ldkv, ok.data()}},
                                     stream);
  report.bitwise("attention_invariance batched beside other windows", batched.data() + 4 * ldq, full.data(),
                 full.size());
  // Beside a 20-token window (a prefill chunk): 29 rows, over kStageMaxRows, so the values
  // are read from global memory instead of staged in shared memory; the same bits.
  const auto other_c = pool.table(20, 910);
  const auto pq = random_floats(static_cast<size_t>(20 * ldq), 911);
  const auto pk = random_floats(static_cast<size_t>(20 * ldkv), 912);
  const auto unstaged = gpu_attention(
      s, pool, {{0, 20, &other_c, pq.data(), pk.data(), pk.data()}, {P, N, &table, q.data(), k.data(), v.data()}},
      stream);
  report.bitwise("attention_invariance beside a prefill chunk (values not staged)", unstaged.data() + 20 * ldq,
                 full.data(), full.size());
}

/// Verify windows on the window kernel (2..16 rows a batch: each chunk's K/V loaded once for
/// a group of a window's rows): one sequence at a long prefix P whose window of N tokens is
/// also in the pool. Decode at P + i (one row: the chunk kernel), every window [P, P + n)
/// and every window [P + a, P + N) must give window N's rows bit for bit.
void check_window_invariance(Report& report, cudaStream_t stream, int32_t heads, int32_t kv, int32_t hd, int32_t P,
                             int32_t N, uint32_t seed) {
  const cuda::AttentionShape s = shape_of(heads, kv, hd);
  const int64_t ldq = int64_t{heads} * hd, ldkv = int64_t{kv} * hd;
  PoolFixture pool(kv, hd, (P + N) / kBlockSize + 2, seed);
  const auto table = pool.table(P + N, seed + 1);
  const auto q = random_floats(static_cast<size_t>(N * ldq), seed + 2, -2.0f, 2.0f);
  const auto k = random_floats(static_cast<size_t>(N * ldkv), seed + 3, -2.0f, 2.0f);
  const auto v = random_floats(static_cast<size_t>(N * ldkv), seed + 4);
  for (int32_t i = 0; i < N; ++i) {
    const int64_t slot = pool.slot(table, P + i);
    std::copy_n(k.begin() + i * ldkv, ldkv, pool.k.begin() + slot * pool.stride);
    std::copy_n(v.begin() + i * ldkv, ldkv, pool.v.begin() + slot * pool.stride);
  }
  pool.upload();
  const auto full = gpu_attention(s, pool, {{P, N, &table, q.data(), k.data(), v.data()}}, stream);
  const std::string name = fmt::format("attention_window h{} kv{} hd{} P{} N{}", heads, kv, hd, P, N);
  std::vector<float> decode;
  for (int32_t i = 0; i < N; ++i) {
    const auto row = gpu_attention(
        s, pool, {{P + i, 1, &table, q.data() + i * ldq, k.data() + i * ldkv, v.data() + i * ldkv}}, stream);
    decode.insert(decode.end(), row.begin(), row.end());
  }
  report.bitwise(name + ": decode(P+i) == window row i", decode.data(), full.data(), full.size());
  std::vector<float> got, want;
  for (int32_t n = 2; n < N; ++n) {
    const auto out = gpu_attention(s, pool, {{P, n, &table, q.data(), k.data(), v.data()}}, stream);
    got.insert(got.end(), out.begin(), out.end());
    want.insert(want.end(), full.begin(), full.begin() + n * ldq);
  }
  report.bitwise(name + ": windows [P, P+n), n = 2.." + std::to_string(N - 1), got.data(), want.data(), want.size());
  got.clear();
  want.clear();
  for (int32_t a = 1; a + 2 <= N; ++a) {
    const auto out = gpu_attention(
        s, pool, {{P + a, N - a, &table, q.data() + a * ldq, k.data() + a * ldkv, v.data() + a * ldkv}}, stream);
    got.insert(got.end(), out.begin(), out.end());
    want.insert(want.end(), full.begin() + a * ldq, full.end());
  }
  report.bitwise(name + ": windows [P+a, P+N)", got.data(), want.data(), want.size());
}

/// Whether time_attention times `variant` besides the one in force (every variant is
/// checked): variant 0, the paired window build (47) and the default's low seven bits with
/// bits 128, 256 and 1024 off and on (111, 239, 367, 495, 1135, 1263, 1391, 1519; bit 256
/// changes the kernels only with 1024), and with bit 2048 where it changes them (3439,
/// 3567: with 256 and 1024). Timing all would cost the device
/// about 45 s a call for 256 of them.
bool timed_variant(int variant) {
  const int base = variant & ~(cuda::kAttentionTightWindow | cuda::kAttentionStreamChunks |
                               cuda::kAttentionStreamTight | cuda::kAttentionStreamWide);
  return variant == 0 || variant == 47 || base == (cuda::kDefaultAttentionVariant & 127);
}

/// Attention alone at the Llama-3-8B shape, decode and a 5-token window at the end of a
/// long prefix, FP32 and BF16 K/V, in every variant of attention.h: a check that every
/// variant writes variant 0's bits, and for the timed ones (timed_variant; eager,
/// back-to-back launches, mean of 50) one timing entry per case with each variant's
/// microseconds and K/V read rate.
void time_attention(Report& report, cudaStream_t stream) {
  const int32_t heads = 32, kv = 8, hd = 128;  // Llama-3-8B
  const cuda::AttentionShape s = shape_of(heads, kv, hd);
  const int64_t ldq = int64_t{heads} * hd, ldkv = int64_t{kv} * hd;
  const int default_variant = cuda::attention_variant();
  int64_t mismatches = 0, compared = 0;
  // 8,240: a last chunk of 48 keys (its second key and value tiles empty in the streaming
  // build, bit 1024), in the second chunk of its block.
  for (int32_t context : {4096, 8192, 8240, 32768, 131072}) {
    PoolFixture pool(kv, hd, context / kBlockSize + 1, 950);
    pool.upload();
    const auto table = pool.table(context + 9, 951);
    const auto q = random_floats(static_cast<size_t>(9 * ldq), 952), k = random_floats(static_cast<size_t>(9 * ldkv), 953);
    for (const DType dtype : {DType::f32, DType::bf16}) {
      const bool bf16 = dtype == DType::bf16;
      for (int32_t n : {1, 5}) {
        DeviceWindows dw(s, {{context - n, n, &table, q.data(), k.data(), k.data()}});
        const auto typed = dw.typed(pool, dtype);
        const cuda::PagedPool& p = typed.first;
        cuda::AttentionBatch b = typed.second;
        b.prefix_settled = true;  // the pool was uploaded before, as a forward's first step
        const double kv_bytes = 2.0 * context * ldkv * (bf16 ? 2 : 4);
        nlohmann::json us_of, rate_of;
        std::vector<float> first;
        for (int variant = 0; variant < cuda::kAttentionVariants; ++variant) {
          if ((variant & ~cuda::kAttentionUsedBits) != 0) continue;  // an unused bit: the same kernels
          // Bit 2048 changes the kernels only with 256 and 1024 (elsewhere: the same kernels).
          constexpr int kWideNeeds = cuda::kAttentionStreamTight | cuda::kAttentionStreamChunks;
          if ((variant & cuda::kAttentionStreamWide) != 0 && (variant & kWideNeeds) != kWideNeeds) continue;
          const bool timed = variant == default_variant || timed_variant(variant);
          cuda::set_attention_variant(variant);
          CUDA_OK(cuda::attention(s, p, b, stream));
          const auto out = dw.dout.download();
          if (variant == 0) first = out;
          for (size_t i = 0; i < out.size(); ++i) mismatches += std::memcmp(&out[i], &first[i], sizeof(float)) != 0;
          ++compared;
          if (!timed) continue;
          const double us = time_us(stream, 5, 50, [&] { cuda::attention(s, p, b, stream); });
          us_of[std::to_string(variant)] = us;
          rate_of[std::to_string(variant)] = kv_bytes / us * 1e-3;
        }
        report.timing({{"name", fmt::format("attention llama3-8b {} context {} window {}", bf16 ? "bf16" : "fp32",
                                            context, n)},
                       {"us", us_of[std::to_string(default_variant)]},
                       {"kv_bytes", kv_bytes},
                       {"variant_us", us_of},
                       {"variant_kv_read_GBps", rate_of}});
      }
    }
  }
  cuda::set_attention_variant(default_variant);
  report.exact_count(fmt::format("attention variants 1..{} == variant 0 bitwise (timed shapes, FP32 and BF16 K/V)",
                                 cuda::kAttentionVariants - 1),
                     mismatches,
                     fmt::format("{} launches compared", compared));
}

/// Prefill chunks on the prefill kernel (every window over 16 rows; attention_prefill.cu) at
/// the long-context shapes (32 / 8 heads, head_dim 128: Qwen3-4B, Llama-3.1-8B): windows at
/// long prefixes crossing chunk edges, several in a batch (gpu_attention: the bits against
/// the first kernel, FP32 and BF16 K/V); and a 1,024-row chunk at the end of 8K and 32K
/// prompts, FP32 and BF16 K/V, against the chunk kernel (the prefill kernel off) bit for
/// bit, as the variants against variant 0. With timing, both paths timed (eager, mean of 5).
void check_prefill(Report& report, cudaStream_t stream, bool timing) {
  const int32_t heads = 32, kv = 8, hd = 128;
  const cuda::AttentionShape s = shape_of(heads, kv, hd);
  const int64_t ldq = int64_t{heads} * hd, ldkv = int64_t{kv} * hd;
  {
    PoolFixture pool(kv, hd, (8300 + 32800 + 17) / kBlockSize + 3, 970);
    pool.upload();
    const auto ta = pool.table(8300, 971), tb = pool.table(32800, 972), tc = pool.table(17, 973);
    const auto q = random_floats(static_cast<size_t>(417 * ldq), 974, -2.0f, 2.0f);
    const auto k = random_floats(static_cast<size_t>(417 * ldkv), 975, -2.0f, 2.0f);
    const auto v = random_floats(static_cast<size_t>(417 * ldkv), 976);
    // Rows 0..299 cross 8,064 and 8,192; 300..399 cross 32,768; a 17-row prompt.
    gpu_attention(s, pool,
                  {{8000, 300, &ta, q.data(), k.data(), v.data()},
                   {32700, 100, &tb, q.data() + 300 * ldq, k.data() + 300 * ldkv, v.data() + 300 * ldkv},
                   {0, 17, &tc, q.data() + 400 * ldq, k.data() + 400 * ldkv, v.data() + 400 * ldkv}},
                  stream);
  }
  const bool enabled = cuda::attention_prefill_enabled();
  int64_t mismatches = 0, compared = 0;
  for (int32_t context : {8192, 32768}) {
    // Without timing (compute-sanitizer's runs) 128 rows at 32K.
    const int32_t n = timing || context == 8192 ? 1024 : 128;
    PoolFixture pool(kv, hd, context / kBlockSize + 1, 980);
    pool.upload();
    const auto table = pool.table(context, 981);
    const auto q = random_floats(static_cast<size_t>(n * ldq), 982, -2.0f, 2.0f);
    const auto k = random_floats(static_cast<size_t>(n * ldkv), 983, -2.0f, 2.0f);
    const auto v = random_floats(static_cast<size_t>(n * ldkv), 984);
    DeviceWindows dw(s, {{context - n, n, &table, q.data(), k.data(), v.data()}});
    for (const DType dtype : {DType::f32, DType::bf16}) {
      const bool bf16 = dtype == DType::bf16;
      const auto typed = dw.typed(pool, dtype);
      const cuda::PagedPool& p = typed.first;
      const cuda::AttentionBatch& b = typed.second;
      std::vector<float> chunk_out;
      double us[2] = {0, 0};
      for (const bool prefill : {false, true}) {
        cuda::set_attention_prefill(prefill);
        CUDA_OK(cuda::attention(s, p, b, stream));
        const auto out = dw.dout.download();
        if (!prefill) chunk_out = out;
        for (size_t i = 0; prefill && i < out.size(); ++i)
          mismatches += std::memcmp(&out[i], &chunk_out[i], sizeof(float)) != 0;
        compared += prefill;
        if (timing) us[prefill] = time_us(stream, 1, 5, [&] { cuda::attention(s, p, b, stream); });
      }
      if (timing)
        report.timing({{"name", fmt::format("attention prefill h32 kv8 hd128 {} context {} rows {}",
                                            bf16 ? "bf16" : "fp32", context, n)},
                       {"us", us[1]},
                       {"chunk_kernel_us", us[0]},
                       {"speedup", us[0] / us[1]},
                       {"rows_per_s", n / us[1] * 1e6},
                       {"fma_per_s", 2.0 * n * heads * (context - n / 2.0) * hd / us[1] * 1e6}});
    }
  }
  cuda::set_attention_prefill(enabled);
  report.exact_count("attention prefill kernel == chunk kernel bitwise (1,024-row chunks at 8K and 32K, FP32 and "
                     "BF16 K/V; 128 rows at 32K without timing)",
                     mismatches, fmt::format("{} launches compared", compared));
}

}  // namespace

/// Two host threads launching the window kernel at once on their own streams, one with 16-row
/// and one with 3-row windows of the same shape: the same kernel asking different dynamic
/// shared memory, as the draft and target models do on the draft actor's and the verifier's
/// threads with micro-batches. The opt-in cap is one process-wide attribute of the kernel:
/// when each launch set it to its own need, one thread could lower it between the other's
/// set and launch ("attention: invalid argument" under load, issue 18; it only rises since
/// e177294). Every launch must succeed and give the bits of the same launch run alone.
void check_concurrent_launches(Report& report) {
  const int32_t heads = 32, kv = 8, hd = 128, P = 8060, kLaunches = 300;
  const cuda::AttentionShape s = shape_of(heads, kv, hd);
  const int64_t ldq = int64_t{heads} * hd, ldkv = int64_t{kv} * hd;
  struct Run {
    int32_t rows = 0;
    std::unique_ptr<PoolFixture> pool;
    std::vector<int32_t> table;
    std::vector<float> q, k, v, alone;
    std::unique_ptr<DeviceWindows> dw;
    cudaStream_t stream = nullptr;
    int64_t failed_launches = 0, mismatches = 0;
    std::string first_error;
  };
  Run runs[2];
  for (int i = 0; i < 2; ++i) {
    Run& r = runs[i];
    const uint32_t seed = 951 + 10 * static_cast<uint32_t>(i);
    r.rows = i == 0 ? 16 : 3;
    r.pool = std::make_unique<PoolFixture>(kv, hd, (P + r.rows + kBlockSize - 1) / kBlockSize, seed);
    r.pool->upload();
    r.table = r.pool->table(P + r.rows, seed + 1);
    r.q = random_floats(static_cast<size_t>(r.rows * ldq), seed + 2, -2.0f, 2.0f);
    r.k = random_floats(static_cast<size_t>(r.rows * ldkv), seed + 3, -2.0f, 2.0f);
    r.v = random_floats(static_cast<size_t>(r.rows * ldkv), seed + 4);
    r.dw = std::make_unique<DeviceWindows>(s, std::vector<Window>{{P, r.rows, &r.table, r.q.data(), r.k.data(), r.v.data()}});
    CUDA_OK(cudaStreamCreate(&r.stream));
  }
  auto launch = [&](Run& r) {
    const cuda::PagedPool p{r.pool->dk.get(), r.pool->dv.get(), r.pool->stride, kBlockSize, r.dw->dtables.get()};
    return cuda::attention(s, p, r.dw->b, r.stream);
  };
  for (Run& r : runs) {  // alone first: the reference bits
    CUDA_OK(launch(r));
    CUDA_OK(cudaStreamSynchronize(r.stream));
    r.alone = r.dw->dout.download();
  }
  auto hammer = [&](Run& r) {
    for (int32_t n = 0; n < kLaunches; ++n) {
      if (const cudaError_t e = launch(r); e != cudaSuccess) {
        if (r.failed_launches++ == 0) r.first_error = cudaGetErrorString(e);
        cudaGetLastError();
      }
      if (n % 50 == 49 && cudaStreamSynchronize(r.stream) == cudaSuccess) {
        std::vector<float> got(r.alone.size());
        if (cudaMemcpy(got.data(), r.dw->dout.get(), got.size() * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
          ++r.failed_launches;
          continue;
        }
        for (size_t j = 0; j < got.size(); ++j) r.mismatches += std::memcmp(&got[j], &r.alone[j], sizeof(float)) != 0;
      }
    }
    cudaStreamSynchronize(r.stream);
  };
  std::thread other([&] { hammer(runs[1]); });
  hammer(runs[0]);
  other.join();
  for (Run& r : runs) {
    report.exact_count(fmt::format("attention launched from two threads at once ({}-row windows): failed launches", r.rows),
                       r.failed_launches, r.first_error.empty() ? fmt::format("{} launches", kLaunches) : r.first_error);
    report.exact_count(fmt::format("attention launched from two threads at once ({}-row windows) == alone, bitwise", r.rows),
                       r.mismatches);
    cudaStreamDestroy(r.stream);
  }
}

void check_attention(Report& report, cudaStream_t stream, const Options& options) {
  check_accuracy(report, stream, 32, 8, 128, {{0, 5}, {300, 1}, {1000, 9}}, 801);
  check_accuracy(report, stream, 16, 8, 64, {{37, 3}, {128, 1}}, 811);
  check_accuracy(report, stream, 16, 8, 128, {{4000, 2}}, 821);
  check_accuracy(report, stream, 14, 2, 64, {{255, 2}, {0, 1}}, 831);  // group of 7
  check_accuracy(report, stream, 32, 8, 128, {{0, 24}, {500, 3}}, 841);  // 27 rows: values not staged
  check_invariance(report, stream);
  // Windows on the window kernel (at most 16 rows a batch) at long prefixes, crossing chunk
  // edges (rows of one window with different chunk counts), groups 1..8, head_dim 64 / 128;
  // groups of 5, 7 and 8 cut a 16-row window into two row groups (64 slots at most).
  check_accuracy(report, stream, 8, 8, 128, {{4093, 5}, {127, 3}, {0, 2}, {300, 6}}, 851);  // group 1
  check_accuracy(report, stream, 16, 8, 64, {{8060, 16}}, 852);                             // group 2
  check_accuracy(report, stream, 24, 8, 128, {{20090, 7}, {1000, 9}}, 853);                 // group 3
  check_accuracy(report, stream, 32, 8, 128, {{32760, 16}}, 854);                           // group 4
  check_accuracy(report, stream, 40, 8, 64, {{8060, 16}}, 855);                             // group 5
  check_accuracy(report, stream, 48, 8, 128, {{5000, 11}, {130, 3}, {255, 2}}, 856);        // group 6
  check_accuracy(report, stream, 28, 4, 128, {{2040, 16}}, 857);                            // group 7
  check_accuracy(report, stream, 64, 8, 128, {{8060, 16}}, 858);                            // group 8
  check_accuracy(report, stream, 32, 4, 64, {{1000, 9}, {250, 7}}, 859);                    // group 8, hd 64
  check_window_invariance(report, stream, 32, 8, 128, 8060, 16, 861);                     // crosses 8064
  check_window_invariance(report, stream, 16, 8, 128, 32762, 9, 862);                     // qwen3-0.6b-like, crosses 32768
  check_window_invariance(report, stream, 64, 8, 64, 4090, 16, 863);                      // group 8, crosses 4096
  // The demo target's shape (6 / 2 heads, head_dim 64): a 6-row window asks 47,456 bytes of
  // dynamic shared memory, under 48 KB alone, over it with the kernel's static ones.
  check_accuracy(report, stream, 6, 2, 64, {{300, 6}}, 871);
  check_window_invariance(report, stream, 6, 2, 64, 1000, 9, 872);
  check_concurrent_launches(report);
  // Batches whose every window has over 16 rows: the prefill kernel at head_dim 128 (tiles
  // of 32 / group rows, a tile crossing a window's end, chunk edges), groups 1, 2, 4, 7, 16.
  check_accuracy(report, stream, 32, 8, 128, {{0, 41}, {1000, 33}}, 881);  // group 4
  check_accuracy(report, stream, 16, 8, 128, {{37, 120}}, 882);            // group 2 (Qwen3-0.6B)
  check_accuracy(report, stream, 28, 4, 128, {{255, 20}, {0, 17}}, 883);   // group 7: 4-row tiles
  check_accuracy(report, stream, 8, 8, 128, {{100, 70}}, 884);             // group 1: 32-row tiles
  check_accuracy(report, stream, 64, 4, 128, {{130, 20}, {3, 18}}, 885);   // group 16: 2-row tiles
  check_prefill(report, stream, options.timing);
  report.exact_count("attention_bf16 == f32_to_bf16(attention)", g_bf16_mismatches,
                     fmt::format("{} launches compared", g_bf16_runs));
  report.exact_count("attention == attention_reference (first kernel) bitwise", g_ref_mismatches,
                     fmt::format("{} launches compared", g_bf16_runs));
  report.exact_count("attention with a settled prefix == without, bitwise", g_settled_mismatches,
                     fmt::format("{} launches compared", g_bf16_runs));
  report.exact_count("attention over a BF16 K/V store == the FP32 kernels over the same values, bitwise",
                     g_kv_bf16_mismatches, fmt::format("{} launches compared", g_bf16_runs));
  report.exact_count("attention over a BF16 K/V store == attention_reference over it, bitwise",
                     g_kv_bf16_ref_mismatches, fmt::format("{} launches compared", g_bf16_runs));
  if (options.timing) time_attention(report, stream);
}

}  // namespace specpipe::gpu_check
