// Row-wise kernels and KV writes against their CPU references.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "core/dtype.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/kv_cache.h"
#include "tools/gpu/check_support.h"

namespace specpipe::gpu_check {
namespace {

void check_embedding(Report& report, cudaStream_t stream) {
  const int64_t vocab = 1000, dim = 264, ld = 280;
  const std::vector<int32_t> tokens = {0, 999, 17, 17, 512, 3, 998};
  const auto values = random_floats(static_cast<size_t>(vocab * dim), 11);
  DeviceBuffer<int32_t> d_tokens(tokens);
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    std::vector<uint16_t> half(values.size());
    for (size_t i = 0; i < values.size(); ++i) half[i] = t == DType::bf16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
    const void* host_table = t == DType::f32 ? static_cast<const void*>(values.data()) : half.data();
    const size_t bytes = values.size() * dtype_size(t);
    DeviceBuffer<uint8_t> table(bytes);
    CUDA_OK(cudaMemcpy(table.get(), host_table, bytes, cudaMemcpyHostToDevice));
    std::vector<float> ref(tokens.size() * ld, 0.0f);
    cpu::embedding(t, host_table, vocab, dim, tokens, ref.data(), ld);
    DeviceBuffer<float> out(ref.size());
    CUDA_OK(cuda::embedding(t, table.get(), dim, d_tokens.get(), static_cast<int32_t>(tokens.size()), out.get(), ld,
                            stream));
    report.compare(std::string("embedding_") + std::string(dtype_name(t)), out.download(), ref, 0.0);
  }
}

void check_norms(Report& report, cudaStream_t stream, const Options& options) {
  const float eps = 1e-6f;
  {  // layer RMSNorm: rows of 4096 features, row stride wider than the row
    const int64_t rows = 7, dim = 4096, ld = 4096 + 64;
    auto x = random_floats(static_cast<size_t>(rows * ld), 21, -3.0f, 3.0f);
    auto w = random_floats(static_cast<size_t>(dim), 22, 0.5f, 1.5f);
    std::vector<float> ref(x.size(), 0.0f);
    cpu::rms_norm(x.data(), ld, w.data(), eps, rows, dim, ref.data(), ld);
    DeviceBuffer<float> dx(x), dw(w), dy(x.size());
    CUDA_OK(cuda::rms_norm(dx.get(), ld, dw.get(), eps, rows, 1, dim, dy.get(), ld, stream));
    report.compare("rms_norm", dy.download(), ref, 1e-5);
    if (options.timing) {
      const double us = time_us(stream, 10, 200, [&] { cuda::rms_norm(dx.get(), ld, dw.get(), eps, 1, 1, dim, dy.get(), ld, stream); });
      report.timing({{"name", "rms_norm rows 1 dim 4096"}, {"us", us}});
    }
  }
  {  // per-head QK-norm: 8 heads of 128 per row, in place
    const int64_t rows = 5, heads = 8, dim = 128, ld = heads * dim + 32;
    auto x = random_floats(static_cast<size_t>(rows * ld), 23, -3.0f, 3.0f);
    auto w = random_floats(static_cast<size_t>(dim), 24, 0.5f, 1.5f);
    std::vector<float> ref = x;
    for (int64_t r = 0; r < rows; ++r)
      cpu::rms_norm(ref.data() + r * ld, dim, w.data(), eps, heads, dim, ref.data() + r * ld, dim);
    DeviceBuffer<float> dx(x), dw(w);
    CUDA_OK(cuda::rms_norm(dx.get(), ld, dw.get(), eps, rows, static_cast<int32_t>(heads), dim, dx.get(), ld, stream));
    report.compare("qk_norm", dx.download(), ref, 1e-5);
  }
}

void check_rope(Report& report, cudaStream_t stream, const Options& options) {
  const int32_t head_dim = 128, heads = 40, max_pos = 8192;  // 32 q heads + 8 k heads side by side
  const int64_t rows = 6, ld = heads * head_dim + 16;
  const cpu::RopeTable table(head_dim, 500000.0, max_pos, {});
  const std::vector<int32_t> positions = {0, 1, 4095, 8191, 77, 5000};
  auto x = random_floats(static_cast<size_t>(rows * ld), 31);
  std::vector<float> ref = x;
  for (int64_t r = 0; r < rows; ++r) cpu::apply_rope(table, positions[static_cast<size_t>(r)], ref.data() + r * ld, heads);
  const std::vector<float> cos(table.cos(0), table.cos(0) + int64_t{max_pos} * head_dim / 2);
  const std::vector<float> sin(table.sin(0), table.sin(0) + int64_t{max_pos} * head_dim / 2);
  DeviceBuffer<float> dcos(cos), dsin(sin), dx(x);
  DeviceBuffer<int32_t> dpos(positions);
  CUDA_OK(cuda::rope(dcos.get(), dsin.get(), head_dim, dpos.get(), rows, dx.get(), ld, heads, stream));
  report.compare("rope", dx.download(), ref, 0.0);
  if (options.timing) {
    const double us = time_us(stream, 10, 200, [&] { cuda::rope(dcos.get(), dsin.get(), head_dim, dpos.get(), 1, dx.get(), ld, heads, stream); });
    report.timing({{"name", "rope rows 1 heads 40 head_dim 128"}, {"us", us}});
  }
}

void check_silu(Report& report, cudaStream_t stream, const Options& options) {
  const int64_t rows = 5, n = 14336, ld = n + 8;
  auto gate = random_floats(static_cast<size_t>(rows * ld), 41, -8.0f, 8.0f);
  auto up = random_floats(static_cast<size_t>(rows * ld), 42, -2.0f, 2.0f);
  std::vector<float> ref(gate.size(), 0.0f);
  cpu::silu_gate(gate.data(), up.data(), ref.data(), rows, n, ld);
  DeviceBuffer<float> dg(gate), du(up), dout(gate.size());
  CUDA_OK(cuda::silu_gate(dg.get(), du.get(), dout.get(), rows, n, ld, stream));
  report.compare("silu_gate", dout.download(), ref, 1e-5);
  if (options.timing) {
    const double us = time_us(stream, 10, 200, [&] { cuda::silu_gate(dg.get(), du.get(), dout.get(), 1, n, ld, stream); });
    report.timing({{"name", "silu_gate rows 1 n 14336"}, {"us", us}});
  }
}

void check_bf16_conversion(Report& report, cudaStream_t stream) {
  const int64_t rows = 3, cols = 4096, ld = 4100;
  auto x = random_floats(static_cast<size_t>(rows * ld), 51, -1e4f, 1e4f);
  x[0] = std::numeric_limits<float>::infinity();
  x[1] = std::numeric_limits<float>::quiet_NaN();
  x[2] = 1.00390625f;  // exactly between two bf16 values: rounds to even
  x[3] = -0.0f;
  DeviceBuffer<float> dx(x);
  DeviceBuffer<uint16_t> dy(static_cast<size_t>(rows * cols));
  CUDA_OK(cuda::f32_to_bf16(dx.get(), rows, cols, ld, dy.get(), cols, stream));
  const auto got = dy.download();
  int64_t mismatches = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      mismatches += got[static_cast<size_t>(r * cols + c)] != f32_to_bf16(x[static_cast<size_t>(r * ld + c)]);
  report.exact_count("f32_to_bf16", mismatches);
}

void check_argmax(Report& report, cudaStream_t stream, const Options& options) {
  const int64_t rows = 4, vocab = 151936, ld = vocab + 64;
  auto logits = random_floats(static_cast<size_t>(rows * ld), 61, -10.0f, 10.0f);
  logits[static_cast<size_t>(ld + 5000)] = 50.0f;  // a tie: the lower index wins
  logits[static_cast<size_t>(ld + 90000)] = 50.0f;
  std::fill(logits.begin() + 2 * ld, logits.begin() + 3 * ld, 1.0f);  // all equal: index 0
  logits[static_cast<size_t>(3 * ld + vocab - 1)] = 99.0f;           // the last column
  DeviceBuffer<float> dl(logits);
  DeviceBuffer<int32_t> dout(static_cast<size_t>(rows));
  CUDA_OK(cuda::argmax(dl.get(), rows, vocab, ld, dout.get(), stream));
  const auto got = dout.download();
  int64_t mismatches = 0;
  for (int64_t r = 0; r < rows; ++r)
    mismatches += got[static_cast<size_t>(r)] !=
                  cpu::argmax(std::span<const float>(logits.data() + r * ld, static_cast<size_t>(vocab)));
  report.exact_count("argmax", mismatches);
  if (options.timing) {
    const double us = time_us(stream, 10, 200, [&] { cuda::argmax(dl.get(), 1, 128256, ld, dout.get(), stream); });
    report.timing({{"name", "argmax rows 1 vocab 128256"}, {"us", us}});
  }
}


int64_t count_diff(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  int64_t n = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += a[i] != b[i];
  return n;
}

int64_t count_diff(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

/// The forward's fused kernels against the unfused sequences they replace: bit for bit.
void check_fused(Report& report, cudaStream_t stream) {
  const float eps = 1e-5f;
  {  // rms_norm_bf16 == f32_to_bf16(rms_norm), and the residual variant
    const int64_t rows = 9, dim = 4096, ld = 4096 + 64;
    auto x = random_floats(static_cast<size_t>(rows * ld), 121, -3.0f, 3.0f);
    auto t = random_floats(static_cast<size_t>(rows * ld), 122, -3.0f, 3.0f);
    auto w = random_floats(static_cast<size_t>(dim), 123, 0.5f, 1.5f);
    auto bias = random_floats(static_cast<size_t>(dim), 124, -0.5f, 0.5f);
    DeviceBuffer<float> dx(x), dt(t), dw(w), dbias(bias), dy(x.size());
    DeviceBuffer<uint16_t> ref(static_cast<size_t>(rows * dim)), got(static_cast<size_t>(rows * dim));
    CUDA_OK(cuda::rms_norm(dx.get(), ld, dw.get(), eps, rows, 1, dim, dy.get(), ld, stream));
    CUDA_OK(cuda::f32_to_bf16(dy.get(), rows, dim, ld, ref.get(), dim, stream));
    CUDA_OK(cuda::rms_norm_bf16(dx.get(), ld, dw.get(), eps, rows, dim, got.get(), dim, stream));
    report.exact_count("fused rms_norm_bf16 bitwise", count_diff(got.download(), ref.download()));
    for (bool with_bias : {false, true}) {
      // reference: the residual add on the host (one IEEE add or two, no contraction), then
      // the unfused norm and cast on the device
      std::vector<float> xr = x;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < dim; ++c) {
          const size_t o = static_cast<size_t>(r * ld + c);
          const float add = with_bias ? t[o] + bias[static_cast<size_t>(c)] : t[o];
          xr[o] = x[o] + add;
        }
      DeviceBuffer<float> dxr(xr), dx2(x);
      CUDA_OK(cuda::rms_norm(dxr.get(), ld, dw.get(), eps, rows, 1, dim, dy.get(), ld, stream));
      CUDA_OK(cuda::f32_to_bf16(dy.get(), rows, dim, ld, ref.get(), dim, stream));
      CUDA_OK(cuda::residual_rms_norm_bf16(dx2.get(), dt.get(), with_bias ? dbias.get() : nullptr, ld, dw.get(), eps,
                                           rows, dim, got.get(), dim, stream));
      const auto x2 = dx2.download();
      report.exact_count(with_bias ? "fused residual_rms_norm_bf16 bias bitwise" : "fused residual_rms_norm_bf16 bitwise",
                         count_diff(got.download(), ref.download()) + count_diff(x2, xr));
    }
  }
  {  // embedding_rms_norm_bf16 == embedding, then rms_norm_bf16
    const int64_t vocab = 1000, dim = 4096, rows = 7;
    auto table = random_floats(static_cast<size_t>(vocab * dim), 141, -2.0f, 2.0f);
    std::vector<uint16_t> table_bf16;
    for (float f : table) table_bf16.push_back(f32_to_bf16(f));
    const std::vector<int32_t> ids{5, 999, 0, 5, 123, 456, 77};
    auto w = random_floats(static_cast<size_t>(dim), 142, 0.5f, 1.5f);
    DeviceBuffer<uint16_t> dtable(table_bf16), ref(static_cast<size_t>(rows * dim)), got(static_cast<size_t>(rows * dim));
    DeviceBuffer<int32_t> dids(ids);
    DeviceBuffer<float> dw(w), xref(static_cast<size_t>(rows * dim)), xgot(static_cast<size_t>(rows * dim));
    CUDA_OK(cuda::embedding(DType::bf16, dtable.get(), dim, dids.get(), static_cast<int32_t>(rows), xref.get(), dim, stream));
    CUDA_OK(cuda::rms_norm_bf16(xref.get(), dim, dw.get(), eps, rows, dim, ref.get(), dim, stream));
    CUDA_OK(cuda::embedding_rms_norm_bf16(DType::bf16, dtable.get(), dim, dids.get(), static_cast<int32_t>(rows),
                                          xgot.get(), dim, dw.get(), eps, got.get(), dim, stream));
    report.exact_count("fused embedding_rms_norm_bf16 bitwise",
                       count_diff(got.download(), ref.download()) + count_diff(xgot.download(), xref.download()));
  }
  {  // silu_gate_bf16 == f32_to_bf16(silu_gate)
    const int64_t rows = 5, n = 14336, ld = 2 * n;
    auto gu = random_floats(static_cast<size_t>(rows * ld), 131, -8.0f, 8.0f);
    DeviceBuffer<float> dgu(gu), dout(gu.size());
    DeviceBuffer<uint16_t> ref(static_cast<size_t>(rows * n)), got(static_cast<size_t>(rows * n));
    CUDA_OK(cuda::silu_gate(dgu.get(), dgu.get() + n, dout.get(), rows, n, ld, stream));
    CUDA_OK(cuda::f32_to_bf16(dout.get(), rows, n, ld, ref.get(), n, stream));
    CUDA_OK(cuda::silu_gate_bf16(dgu.get(), dgu.get() + n, ld, rows, n, got.get(), n, stream));
    report.exact_count("fused silu_gate_bf16 bitwise", count_diff(got.download(), ref.download()));
  }
  // qk_norm_rope_kv == q/k rms_norm, rope q, rope k, kv_scatter
  struct Shape {
    int32_t heads, kv, hd;
  };
  for (const Shape sh : {Shape{32, 8, 128}, Shape{16, 8, 64}, Shape{14, 2, 64}}) {
    for (bool norm : {false, true}) {
      const int64_t rows = 7, qd = int64_t{sh.heads} * sh.hd, kvd = int64_t{sh.kv} * sh.hd, ld = qd + 2 * kvd + 8;
      const int32_t max_pos = 4096;
      const cpu::RopeTable table(sh.hd, 500000.0, max_pos, {});
      const std::vector<float> cos(table.cos(0), table.cos(0) + int64_t{max_pos} * sh.hd / 2);
      const std::vector<float> sin(table.sin(0), table.sin(0) + int64_t{max_pos} * sh.hd / 2);
      const std::vector<int32_t> positions = {0, 1, 4095, 77, 78, 2000, 3};
      const std::vector<int64_t> slots = {40, 3, 17, 16, 63, 0, 21};
      const int64_t num_slots = 64;
      auto qkv = random_floats(static_cast<size_t>(rows * ld), 141, -3.0f, 3.0f);
      auto qw = random_floats(static_cast<size_t>(sh.hd), 142, 0.5f, 1.5f);
      auto kw = random_floats(static_cast<size_t>(sh.hd), 143, 0.5f, 1.5f);
      auto pool = random_floats(static_cast<size_t>(num_slots * kvd), 144);
      DeviceBuffer<float> dcos(cos), dsin(sin), dqw(qw), dkw(kw);
      DeviceBuffer<int32_t> dpos(positions);
      DeviceBuffer<int64_t> dslots(slots);
      DeviceBuffer<float> a(qkv), ak(pool), av(pool), b(qkv), bk(pool), bv(pool);
      float* q = a.get();
      float* k = a.get() + qd;
      if (norm) {
        CUDA_OK(cuda::rms_norm(q, ld, dqw.get(), eps, rows, sh.heads, sh.hd, q, ld, stream));
        CUDA_OK(cuda::rms_norm(k, ld, dkw.get(), eps, rows, sh.kv, sh.hd, k, ld, stream));
      }
      CUDA_OK(cuda::rope(dcos.get(), dsin.get(), sh.hd, dpos.get(), rows, q, ld, sh.heads, stream));
      CUDA_OK(cuda::rope(dcos.get(), dsin.get(), sh.hd, dpos.get(), rows, k, ld, sh.kv, stream));
      CUDA_OK(cuda::kv_scatter(k, a.get() + qd + kvd, ld, kvd, dslots.get(), static_cast<int32_t>(rows), ak.get(),
                               av.get(), kvd, DType::f32, stream));
      CUDA_OK(cuda::qk_norm_rope_kv(b.get(), b.get() + qd, b.get() + qd + kvd, ld, sh.heads, sh.kv, sh.hd,
                                    norm ? dqw.get() : nullptr, norm ? dkw.get() : nullptr, eps, dcos.get(),
                                    dsin.get(), dpos.get(), dslots.get(), rows, bk.get(), bv.get(), kvd, stream));
      const int64_t diff = count_diff(b.download(), a.download()) + count_diff(bk.download(), ak.download()) +
                           count_diff(bv.download(), av.download());
      report.exact_count(fmt::format("fused qk_norm_rope_kv heads {} kv {} hd {}{} bitwise", sh.heads, sh.kv, sh.hd,
                                     norm ? " qk-norm" : ""),
                         diff);
      // A BF16 store: the pool slots and the dense window rows get f32_to_bf16 of the same
      // K/V, q and k in place as above.
      {
        std::vector<uint16_t> pool_b(pool.size());
        for (size_t i = 0; i < pool.size(); ++i) pool_b[i] = f32_to_bf16(pool[i]);
        DeviceBuffer<float> c(qkv);
        DeviceBuffer<uint16_t> ck(pool_b), cv(pool_b), dense(static_cast<size_t>(rows * 2 * kvd));
        CUDA_OK(cuda::qk_norm_rope_kv_bf16(c.get(), c.get() + qd, c.get() + qd + kvd, ld, sh.heads, sh.kv, sh.hd,
                                           norm ? dqw.get() : nullptr, norm ? dkw.get() : nullptr, eps, dcos.get(),
                                           dsin.get(), dpos.get(), dslots.get(), rows, ck.get(), cv.get(), false,
                                           kvd, dense.get(), dense.get() + kvd, 2 * kvd, stream));
        const std::vector<float> want = a.download();
        const std::vector<uint16_t> gk = ck.download(), gv = cv.download(), gd = dense.download();
        const auto wk = ak.download(), wv = av.download();
        int64_t wrong = count_diff(c.download(), want);
        for (size_t i = 0; i < gk.size(); ++i) wrong += (gk[i] != f32_to_bf16(wk[i])) + (gv[i] != f32_to_bf16(wv[i]));
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t e = 0; e < kvd; ++e) {
            wrong +=
                gd[static_cast<size_t>(r * 2 * kvd + e)] != f32_to_bf16(want[static_cast<size_t>(r * ld + qd + e)]);
            wrong += gd[static_cast<size_t>(r * 2 * kvd + kvd + e)] !=
                     f32_to_bf16(want[static_cast<size_t>(r * ld + qd + kvd + e)]);
          }
        report.exact_count(fmt::format("fused qk_norm_rope_kv_bf16 heads {} kv {} hd {}{} bitwise", sh.heads, sh.kv,
                                       sh.hd, norm ? " qk-norm" : ""),
                           wrong);
      }
    }
  }
}

}  // namespace

void check_elementwise(Report& report, cudaStream_t stream, const Options& options) {
  check_embedding(report, stream);
  check_norms(report, stream, options);
  check_rope(report, stream, options);
  check_silu(report, stream, options);
  check_bf16_conversion(report, stream);
  check_argmax(report, stream, options);
  check_fused(report, stream);
}

void check_kv(Report& report, cudaStream_t stream) {
  const int64_t num_slots = 16 * 16, stride = 8 * 128, ld = stride + 32;
  auto pool_k = random_floats(static_cast<size_t>(num_slots * stride), 71);
  auto pool_v = random_floats(static_cast<size_t>(num_slots * stride), 72);
  {  // scatter of 10 window rows into scattered slots (CPU reference: write_rows_to_pool's copy)
    const std::vector<int64_t> slots = {200, 3, 17, 16, 255, 0, 100, 101, 64, 31};
    const auto k = random_floats(slots.size() * ld, 73), v = random_floats(slots.size() * ld, 74);
    std::vector<float> ref_k = pool_k, ref_v = pool_v;
    for (size_t r = 0; r < slots.size(); ++r) {
      std::copy_n(k.begin() + static_cast<int64_t>(r) * ld, stride, ref_k.begin() + slots[r] * stride);
      std::copy_n(v.begin() + static_cast<int64_t>(r) * ld, stride, ref_v.begin() + slots[r] * stride);
    }
    DeviceBuffer<float> dk(k), dv(v), dpk(pool_k), dpv(pool_v);
    DeviceBuffer<int64_t> dslots(slots);
    CUDA_OK(cuda::kv_scatter(dk.get(), dv.get(), ld, stride, dslots.get(), static_cast<int32_t>(slots.size()),
                             dpk.get(), dpv.get(), stride, DType::f32, stream));
    report.compare("kv_scatter_k", dpk.download(), ref_k, 0.0);
    report.compare("kv_scatter_v", dpv.download(), ref_v, 0.0);
    // A BF16 pool: every written element f32_to_bf16 of the row's (round to nearest even),
    // the others untouched.
    std::vector<uint16_t> bk(pool_k.size()), bv(pool_v.size());
    for (size_t i = 0; i < bk.size(); ++i) bk[i] = f32_to_bf16(pool_k[i]), bv[i] = f32_to_bf16(pool_v[i]);
    DeviceBuffer<uint16_t> dbk(bk), dbv(bv);
    CUDA_OK(cuda::kv_scatter(dk.get(), dv.get(), ld, stride, dslots.get(), static_cast<int32_t>(slots.size()),
                             dbk.get(), dbv.get(), stride, DType::bf16, stream));
    const auto gk = dbk.download(), gv = dbv.download();
    int64_t wrong = 0;
    for (size_t i = 0; i < gk.size(); ++i) wrong += (gk[i] != f32_to_bf16(ref_k[i])) + (gv[i] != f32_to_bf16(ref_v[i]));
    report.exact_count("kv_scatter into a BF16 pool == f32_to_bf16 of the rows", wrong,
                       fmt::format("{} elements", 2 * gk.size()));
  }
  {  // window commit: 4 windows, verdicts on the device, partial / none / all accepted
    const std::vector<int32_t> n = {4, 1, 6, 3}, accepted = {2, 1, 0, 3}, first = {0, 4, 5, 11};
    std::vector<int64_t> slots(14);
    for (size_t r = 0; r < slots.size(); ++r) slots[r] = static_cast<int64_t>((r * 37 + 5) % num_slots);
    const auto k = random_floats(slots.size() * ld, 75), v = random_floats(slots.size() * ld, 76);
    std::vector<float> ref_k = pool_k, ref_v = pool_v;
    for (size_t w = 0; w < n.size(); ++w)
      for (int32_t i = 0; i < accepted[w]; ++i) {
        const int64_t r = first[w] + i;
        std::copy_n(k.begin() + r * ld, stride, ref_k.begin() + slots[static_cast<size_t>(r)] * stride);
        std::copy_n(v.begin() + r * ld, stride, ref_v.begin() + slots[static_cast<size_t>(r)] * stride);
      }
    DeviceBuffer<float> dk(k), dv(v), dpk(pool_k), dpv(pool_v);
    DeviceBuffer<int64_t> dslots(slots);
    DeviceBuffer<int32_t> dn(n), dacc(accepted), dfirst(first);
    CUDA_OK(cuda::kv_commit_window(dk.get(), dv.get(), ld, stride, dslots.get(), dfirst.get(), dn.get(), dacc.get(),
                                   static_cast<int32_t>(n.size()), 6, dpk.get(), dpv.get(), stride, DType::f32,
                                   stream));
    report.compare("kv_commit_window_k", dpk.download(), ref_k, 0.0);
    report.compare("kv_commit_window_v", dpv.download(), ref_v, 0.0);
  }
}

}  // namespace specpipe::gpu_check
