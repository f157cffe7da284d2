// GEMMs (cuBLASLt with a pinned algorithm, the small-m row kernel, the tensor-core
// weight-streaming kernel) against cpu::linear, their batch invariance for m = 1..80,
// and their speed at Llama-3-8B shapes against the device-to-device copy bandwidth.
#include <cublasLt.h>

#include <bit>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/dtype.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/packed_matrix.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/early_launch.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "tools/gpu/check_support.h"

namespace specpipe::gpu_check {
namespace {

void lt_ok(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cublas status " + std::to_string(static_cast<int>(st)));
}

std::vector<float> round_bf16(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(x[i]));
  return r;
}

std::vector<float> cpu_linear(DType t, const void* w, int64_t n, int64_t k, const std::vector<float>& x, int64_t m,
                              int64_t ldx, int64_t ldy) {
  const cpu::PackedMatrix packed(t, w, n, k);
  std::vector<float> y(static_cast<size_t>(m * ldy), 0.0f);
  const cpu::LinearTarget target{&packed, nullptr, y.data(), ldy, false};
  cpu::linear(x.data(), m, k, ldx, std::span<const cpu::LinearTarget>(&target, 1));
  return y;
}

/// The four implementations behind one signature: y[0:m] from x (bf16 or f32 on the device).
struct GemmImpl {
  std::string name;
  bool bf16;
  std::function<void(const void* x, const void* w, float* y, int32_t m)> run;
};

std::vector<GemmImpl> implementations(cublasLtHandle_t lt, const cuda::GemmShape& base, cudaStream_t stream,
                                      std::vector<std::unique_ptr<cuda::LtGemm>>& keep, Report& report,
                                      const std::string& tag) {
  std::vector<GemmImpl> out;
  for (auto precision : {cuda::GemmPrecision::bf16, cuda::GemmPrecision::f32}) {
    cuda::GemmShape shape = base;
    shape.precision = precision;
    auto g = std::make_unique<cuda::LtGemm>();
    const std::string name = precision == cuda::GemmPrecision::bf16 ? "lt_bf16" : "lt_f32";
    if (cublasStatus_t st = g->init(lt, shape); st != CUBLAS_STATUS_SUCCESS) {
      report.fail("gemm " + name + " init " + tag, "cublas status " + std::to_string(static_cast<int>(st)));
      continue;
    }
    report.info("algo " + name + " " + tag, g->description());
    cuda::LtGemm* p = g.get();
    keep.push_back(std::move(g));
    out.push_back({name, precision == cuda::GemmPrecision::bf16,
                   [p, stream](const void* x, const void* w, float* y, int32_t m) {
                     lt_ok(p->run(x, w, y, m, stream), "LtGemm::run");
                   }});
  }
  const int64_t n = base.n, k = base.k, ldx = base.ldx, ldy = base.ldy;
  out.push_back({"rows_bf16", true, [=](const void* x, const void* w, float* y, int32_t m) {
                   CUDA_OK(cuda::gemm_rows_bf16(static_cast<const uint16_t*>(x), ldx, static_cast<const uint16_t*>(w),
                                                n, k, y, ldy, m, stream));
                 }});
  out.push_back({"mma_bf16", true, [=](const void* x, const void* w, float* y, int32_t m) {
                   CUDA_OK(cuda::gemm_mma_bf16(static_cast<const uint16_t*>(x), ldx, static_cast<const uint16_t*>(w),
                                               n, k, y, ldy, m, stream));
                 }});
  return out;
}

void check_accuracy_and_invariance(Report& report, cublasLtHandle_t lt, cudaStream_t stream) {
  // n not a multiple of 16 (gemm_mma's tile edge); M over 64 (its second pass over W).
  const int64_t n = 1528, k = 1024, ldx = k + 64, ldy = n + 32;
  const int32_t M = 80;
  const auto w = random_floats(static_cast<size_t>(n * k), 1001, -0.1f, 0.1f);
  const auto w16 = to_bf16(w);
  const auto x = random_floats(static_cast<size_t>(M * ldx), 1002, -2.0f, 2.0f);
  DeviceBuffer<float> dw32(w), dx32(x), dy(static_cast<size_t>(M * ldy));
  DeviceBuffer<uint16_t> dw16(w16), dx16(static_cast<size_t>(M * ldx));
  CUDA_OK(cuda::f32_to_bf16(dx32.get(), M, k, ldx, dx16.get(), ldx, stream));

  std::vector<std::unique_ptr<cuda::LtGemm>> keep;
  const auto impls = implementations(lt, {n, k, ldx, ldy, M}, stream, keep, report, "n1528 k1024");
  const int32_t m_acc = 7;
  const auto ref_bf16x = cpu_linear(DType::bf16, w16.data(), n, k, round_bf16(x), m_acc, ldx, ldy);
  const auto ref_f32x = cpu_linear(DType::bf16, w16.data(), n, k, x, m_acc, ldx, ldy);
  const auto ref_f32 = cpu_linear(DType::f32, w.data(), n, k, x, m_acc, ldx, ldy);
  auto rows_of = [&](const std::vector<float>& y, int32_t m) {
    std::vector<float> r;
    for (int32_t i = 0; i < m; ++i) r.insert(r.end(), y.begin() + i * ldy, y.begin() + i * ldy + n);
    return r;
  };
  for (const GemmImpl& g : impls) {
    const void* dx = g.bf16 ? static_cast<const void*>(dx16.get()) : dx32.get();
    const void* dwp = g.bf16 ? static_cast<const void*>(dw16.get()) : dw32.get();
    g.run(dx, dwp, dy.get(), m_acc);
    const auto y = rows_of(dy.download(), m_acc);
    if (g.bf16) {
      report.compare("gemm " + g.name + " vs cpu (x rounded to bf16)", y, rows_of(ref_bf16x, m_acc), 1e-4);
      report.compare("gemm " + g.name + " vs cpu (x float32)", y, rows_of(ref_f32x, m_acc), 1e-2);
    } else {
      report.compare("gemm " + g.name + " vs cpu float32", y, rows_of(ref_f32, m_acc), 1e-5);
    }

    // Invariance: the rows of m = 1..64 against m = 64, and a row moved among others.
    g.run(dx, dwp, dy.get(), M);
    const auto full = dy.download();
    std::vector<float> got, want;
    for (int32_t m = 1; m <= M; ++m) {
      g.run(dx, dwp, dy.get(), m);
      const auto part = dy.download();
      const auto a = rows_of(part, m), b = rows_of(full, m);
      got.insert(got.end(), a.begin(), a.end());
      want.insert(want.end(), b.begin(), b.end());
    }
    report.bitwise("gemm_invariance " + g.name + " m=1..80", got.data(), want.data(), got.size());

    // Row 5 of x placed at rows 0 and 8 of other matrices (m = 9 and m = M).
    auto moved = random_floats(x.size(), 1003, -2.0f, 2.0f);
    for (int32_t at : {0, 8}) std::copy_n(x.begin() + 5 * ldx, ldx, moved.begin() + at * ldx);
    DeviceBuffer<float> dm32(moved);
    DeviceBuffer<uint16_t> dm16(moved.size());
    CUDA_OK(cuda::f32_to_bf16(dm32.get(), M, k, ldx, dm16.get(), ldx, stream));
    const void* dm = g.bf16 ? static_cast<const void*>(dm16.get()) : dm32.get();
    got.clear();
    want.clear();
    for (int32_t m : {9, M}) {
      g.run(dm, dwp, dy.get(), m);
      const auto y2 = dy.download();
      for (int32_t at : {0, 8}) {
        got.insert(got.end(), y2.begin() + at * ldy, y2.begin() + at * ldy + n);
        want.insert(want.end(), full.begin() + 5 * ldy, full.begin() + 5 * ldy + n);
      }
    }
    report.bitwise("gemm_invariance " + g.name + " row moved among other rows", got.data(), want.data(), got.size());
  }
}

/// gemm_mma_silu_bf16 over the interleaved weights == gemm_mma_bf16 over [W_gate; W_up]
/// then silu_gate_bf16, bit for bit, for 1..80 rows (80: a second pass over W).
void check_silu_epilogue(Report& report, cudaStream_t stream) {
  const int64_t n = 264, k = 512, ldx = k + 32;  // n: 33 tiles of 8 features
  const int32_t M = 80;
  const auto w16 = to_bf16(random_floats(static_cast<size_t>(2 * n * k), 1101, -0.1f, 0.1f));
  std::vector<uint16_t> interleaved(w16.size());
  cuda::interleave_gate_up(w16.data(), n, k, interleaved.data());
  const auto x = random_floats(static_cast<size_t>(M * ldx), 1102, -2.0f, 2.0f);
  DeviceBuffer<float> dx32(x), dgu(static_cast<size_t>(M * 2 * n));
  DeviceBuffer<uint16_t> dw(w16), dwi(interleaved), dx16(static_cast<size_t>(M * ldx)),
      want(static_cast<size_t>(M * n)), got(static_cast<size_t>(M * n));
  CUDA_OK(cuda::f32_to_bf16(dx32.get(), M, k, ldx, dx16.get(), ldx, stream));
  std::vector<uint16_t> got_all, want_all;
  for (int32_t m : {1, 5, 8, 9, 16, 33, 64, 80}) {
    CUDA_OK(cuda::gemm_mma_bf16(dx16.get(), ldx, dw.get(), 2 * n, k, dgu.get(), 2 * n, m, stream));
    CUDA_OK(cuda::silu_gate_bf16(dgu.get(), dgu.get() + n, 2 * n, m, n, want.get(), n, stream));
    CUDA_OK(cuda::gemm_mma_silu_bf16(dx16.get(), ldx, dwi.get(), n, k, got.get(), n, m, stream, true));
    const auto a = got.download(), b = want.download();
    got_all.insert(got_all.end(), a.begin(), a.begin() + m * n);
    want_all.insert(want_all.end(), b.begin(), b.begin() + m * n);
  }
  int64_t differ = 0;
  for (size_t i = 0; i < got_all.size(); ++i) differ += got_all[i] != want_all[i];
  report.exact_count("gemm_mma_silu_bf16 == gemm_mma_bf16 + silu_gate_bf16 (m = 1..80)", differ,
                     fmt::format("{} outputs compared", got_all.size()));
}

/// Floats of a and b (n each) whose bits differ.
int64_t bits_differing(const float* a, const float* b, int64_t n) {
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i]);
  return differ;
}

/// gemm_mma_rope_kv_bf16 over the interleaved weights == gemm_mma_bf16 over [W_q; W_k; W_v]
/// then qk_norm_rope_kv (no QK-norm), bit for bit: q, k and v in y and the K/V slots, for
/// m = 1..80 rows (80: a second pass over W), in every gemm_mma variant (the 8B shape's
/// heads take one-wave grids, 40 x 4 heads of 128 the persistent one at m <= 16, and
/// 8 + 2 x 2 heads of 128 over k = 8,192 (24 MiB) deep buffers with bit 64's pipelined x
/// loads at m <= 8).
void check_rope_epilogue(Report& report, cudaStream_t stream) {
  struct Shape { int32_t heads, kv, hd; int64_t k; };
  const int32_t M = 80, max_pos = 4096;
  const int64_t num_slots = 128;
  const int before = cuda::gemm_mma_variant();
  for (const Shape sh : {Shape{32, 8, 128, 512}, Shape{14, 2, 64, 256}, Shape{160, 40, 128, 128},
                         Shape{8, 2, 128, 8192}}) {
    const int64_t qd = int64_t{sh.heads} * sh.hd, kvd = int64_t{sh.kv} * sh.hd, n = qd + 2 * kvd, k = sh.k;
    const int64_t ldy = n + 8, ldx = k + 32;
    const auto w16 = to_bf16(random_floats(static_cast<size_t>(n * k), 1301, -0.1f, 0.1f));
    std::vector<uint16_t> interleaved(w16.size());
    cuda::interleave_rope_halves(w16.data(), qd, kvd, sh.hd, k, interleaved.data());
    const auto x = random_floats(static_cast<size_t>(M * ldx), 1302, -2.0f, 2.0f);
    const cpu::RopeTable table(sh.hd, 500000.0, max_pos, {});
    const std::vector<float> cos(table.cos(0), table.cos(0) + int64_t{max_pos} * sh.hd / 2);
    const std::vector<float> sin(table.sin(0), table.sin(0) + int64_t{max_pos} * sh.hd / 2);
    std::vector<int32_t> positions(M);
    std::vector<int64_t> slots(M);
    for (int32_t r = 0; r < M; ++r) {
      positions[static_cast<size_t>(r)] = (r * 797 + 13) % max_pos;
      slots[static_cast<size_t>(r)] = (r * 37 + 5) % num_slots;  // distinct: 37 is prime to 128
    }
    const auto pool = random_floats(static_cast<size_t>(num_slots * kvd), 1303);
    DeviceBuffer<float> dx32(x), dcos(cos), dsin(sin), ya(static_cast<size_t>(M * ldy)), yb(static_cast<size_t>(M * ldy)),
        ak(pool), av(pool), bk(pool), bv(pool);
    DeviceBuffer<int32_t> dpos(positions);
    DeviceBuffer<int64_t> dslots(slots);
    DeviceBuffer<uint16_t> dw(w16), dwi(interleaved), dx16(static_cast<size_t>(M * ldx));
    CUDA_OK(cuda::f32_to_bf16(dx32.get(), M, k, ldx, dx16.get(), ldx, stream));
    for (int variant : {0, 1, 2, 3, 4, 8, 11, 15, 75, 79, 128, 203, 207}) {
      cuda::set_gemm_mma_variant(variant);
      int64_t differ = 0, compared = 0;
      for (int32_t m : {1, 3, 5, 8, 9, 16, 33, 64, 80}) {
        CUDA_OK(cuda::gemm_mma_bf16(dx16.get(), ldx, dw.get(), n, k, ya.get(), ldy, m, stream, true));
        CUDA_OK(cuda::qk_norm_rope_kv(ya.get(), ya.get() + qd, ya.get() + qd + kvd, ldy, sh.heads, sh.kv, sh.hd,
                                      nullptr, nullptr, 1e-6f, dcos.get(), dsin.get(), dpos.get(), dslots.get(), m,
                                      ak.get(), av.get(), kvd, stream));
        const cuda::QkvRope rope{dcos.get(), dsin.get(), dpos.get(), dslots.get(), bk.get(), bv.get(), kvd,
                                 static_cast<int32_t>(qd), static_cast<int32_t>(kvd), sh.hd};
        CUDA_OK(cuda::gemm_mma_rope_kv_bf16(dx16.get(), ldx, dwi.get(), k, yb.get(), ldy, m, rope, stream, true));
        const auto a = ya.download(), b = yb.download();
        for (int64_t r = 0; r < m; ++r) {
          const size_t row = static_cast<size_t>(r * ldy);
          differ += bits_differing(&a[row], &b[row], n);
        }
        compared += m * n;
        for (const auto& [p, q] : {std::pair{&ak, &bk}, std::pair{&av, &bv}}) {
          const auto pa = p->download(), pb = q->download();
          differ += bits_differing(pa.data(), pb.data(), static_cast<int64_t>(pa.size()));
          compared += static_cast<int64_t>(pa.size());
        }
      }
      report.exact_count(fmt::format("gemm_mma_rope_kv_bf16 == gemm_mma_bf16 + qk_norm_rope_kv (heads {} kv {} hd {} k "
                                     "{}, variant {}, m = 1..80)",
                                     sh.heads, sh.kv, sh.hd, k, variant),
                         differ, fmt::format("{} outputs compared (y, K and V slots)", compared));
    }
  }
  cuda::set_gemm_mma_variant(before);
}

/// Every gemm_mma variant (gemm.h: deep buffers, persistent blocks, the early
/// launch of the next kernel, always or for small weights) == the plain kernel
/// bit for bit, on shapes that take each: 256 tiles (deep at m <= 8), a ragged last tile,
/// more tiles than an H100 holds at once (persistent) with an odd number of iterations a
/// tile, the SiLU epilogue over persistent blocks, and the 0.6B shape's down_proj and
/// SiLU gate_up (weights small enough for bit 8's early launch).
void check_mma_variants(Report& report, cudaStream_t stream) {
  struct Shape { int64_t n, k; bool silu; };
  const Shape shapes[] = {{4096, 4096, false}, {4088, 14336, false}, {19208, 1536, false}, {9608, 1024, true},
                          {1024, 3072, false}, {3072, 1024, true}};
  const int32_t M = 64;
  const int before = cuda::gemm_mma_variant();
  for (const Shape& sh : shapes) {
    const int64_t n = sh.n, k = sh.k, rows = sh.silu ? 2 * n : n;
    const auto w16 = to_bf16(random_floats(static_cast<size_t>(rows * k), 1201, -0.1f, 0.1f));
    const auto x = random_floats(static_cast<size_t>(M * k), 1202, -2.0f, 2.0f);
    DeviceBuffer<float> dx32(x), dy(static_cast<size_t>(M * n));
    DeviceBuffer<uint16_t> dw(w16), dx16(static_cast<size_t>(M * k)), dyb(static_cast<size_t>(M * n));
    CUDA_OK(cuda::f32_to_bf16(dx32.get(), M, k, k, dx16.get(), k, stream));
    // Outputs of every m in {1, 3, 8, 9, 16, 33, 64}, as raw bits.
    auto outputs = [&](int variant) {
      cuda::set_gemm_mma_variant(variant);
      std::vector<uint32_t> bits;
      for (int32_t m : {1, 3, 8, 9, 16, 33, 64}) {
        if (sh.silu) {
          CUDA_OK(cuda::gemm_mma_silu_bf16(dx16.get(), k, dw.get(), n, k, dyb.get(), n, m, stream, true));
          const auto y = dyb.download();
          bits.insert(bits.end(), y.begin(), y.begin() + m * n);
        } else {
          CUDA_OK(cuda::gemm_mma_bf16(dx16.get(), k, dw.get(), n, k, dy.get(), n, m, stream, true));
          const auto y = dy.download();
          for (int64_t i = 0; i < m * n; ++i) bits.push_back(std::bit_cast<uint32_t>(y[static_cast<size_t>(i)]));
        }
      }
      return bits;
    };
    const auto plain = outputs(0);
    // Bits 0-15 in every combination; the pipelined x loads (64) alone, with deep buffers,
    // and over 11 and 15; the wide L2 fetch (128) alone and over each of bits 1, 2, 3, 11,
    // 75 and 79's kernels.
    std::vector<int> variants;
    for (int variant = 1; variant <= 15; ++variant) variants.push_back(variant);
    for (int variant : {64, 65, 75, 79, 128, 129, 130, 131, 139, 203, 207}) variants.push_back(variant);
    for (int variant : variants) {
      const auto got = outputs(variant);
      int64_t differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += got[i] != plain[i];
      report.exact_count(fmt::format("gemm_mma variant {} == variant 0 ({} n {} k {}, m = 1..64)", variant,
                                     sh.silu ? "silu" : "bf16", n, k),
                         differ, fmt::format("{} outputs compared", got.size()));
    }
    // The default under a draft's scope (early_launch.h: bit 8 off on this thread).
    const cuda::NoOneRowEarlyLaunch scope;
    const auto got = outputs(cuda::kDefaultMmaVariant);
    int64_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i] != plain[i];
    report.exact_count(fmt::format("gemm_mma default without one-row early launch == variant 0 ({} n {} k {})",
                                   sh.silu ? "silu" : "bf16", n, k),
                       differ, fmt::format("{} outputs compared", got.size()));
  }
  cuda::set_gemm_mma_variant(before);
  // The scope is the calling thread's, nests, and ends with its object.
  int64_t wrong = !cuda::one_row_early_launch();
  {
    const cuda::NoOneRowEarlyLaunch outer;
    bool other = false;
    std::thread([&] { other = cuda::one_row_early_launch(); }).join();
    wrong += cuda::one_row_early_launch() + !other;
    {
      const cuda::NoOneRowEarlyLaunch inner;
      const cuda::NoOneRowEarlyLaunch off(false);
      wrong += cuda::one_row_early_launch();
    }
    wrong += cuda::one_row_early_launch();
  }
  wrong += !cuda::one_row_early_launch();
  report.exact_count("NoOneRowEarlyLaunch: per thread, nested, restored", wrong);
}

double copy_bandwidth_GBps(Report& report, cudaStream_t stream) {
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer<uint8_t> a(bytes), b(bytes);
  const double us = time_us(stream, 3, 10, [&] { cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, stream); });
  const double gbps = 2.0 * static_cast<double>(bytes) / us * 1e-3;  // bytes read + written
  report.timing({{"name", "device copy 1 GiB"}, {"us", us}, {"GBps_read_plus_write", gbps}});
  return gbps;
}

void time_llama8b(Report& report, cublasLtHandle_t lt, cudaStream_t stream) {
  const double bw = copy_bandwidth_GBps(report, stream);
  struct Mat { const char* name; int64_t n, k; double per_token; };  // per_token: times per decode step
  const Mat mats[] = {{"qkv", 6144, 4096, 32}, {"o_proj", 4096, 4096, 32}, {"gate_up", 28672, 4096, 32},
                      {"down", 4096, 14336, 32}, {"lm_head", 128256, 4096, 1}};
  std::map<std::string, double> step_us;  // impl@m -> GEMM time of one decode step
  double step_floor_us = 0;
  for (const Mat& mat : mats) {
    const int64_t n = mat.n, k = mat.k;
    const double bytes = 2.0 * static_cast<double>(n * k);
    const double floor_us = bytes / bw * 1e-3;
    step_floor_us += floor_us * mat.per_token;
    DeviceBuffer<uint16_t> w(static_cast<size_t>(n * k)), x(static_cast<size_t>(64 * k));
    DeviceBuffer<float> y(static_cast<size_t>(64 * n));
    CUDA_OK(cudaMemset(w.get(), 0x3c, w.size() * 2));  // bf16 ~0.0115: finite, non-zero
    CUDA_OK(cudaMemset(x.get(), 0x3c, x.size() * 2));
    cuda::LtGemm g;
    lt_ok(g.init(lt, {n, k, k, n, 64, cuda::GemmPrecision::bf16}), "LtGemm::init (timing)");
    report.info(std::string("algo lt_bf16 timing ") + mat.name, g.description());
    for (int32_t m : {1, 5, 8, 9, 16}) {
      const double lt_us = time_us(stream, 3, 20, [&] { lt_ok(g.run(x.get(), w.get(), y.get(), m, stream), "run"); });
      const double rows_us = time_us(stream, 3, 20, [&] {
        CUDA_OK(cuda::gemm_rows_bf16(x.get(), k, w.get(), n, k, y.get(), n, m, stream));
      });
      const double mma_us = time_us(stream, 3, 20, [&] {
        CUDA_OK(cuda::gemm_mma_bf16(x.get(), k, w.get(), n, k, y.get(), n, m, stream));
      });
      // Back to back with programmatic dependent launch: each launch's first weight loads
      // overlap the end of the one before (as after the row kernels in a forward).
      const double pdl_us = time_us(stream, 3, 20, [&] {
        CUDA_OK(cuda::gemm_mma_bf16(x.get(), k, w.get(), n, k, y.get(), n, m, stream, true));
      });
      // The same back to back in variants of gemm_mma (gemm.h), m = 1 and 5.
      nlohmann::json variants_us = nlohmann::json::object();
      if (m == 1 || m == 5) {
        const int before = cuda::gemm_mma_variant();
        for (int variant : {0, 1, 2, 3, 11, 75, 203}) {
          cuda::set_gemm_mma_variant(variant);
          const double us = time_us(stream, 3, 20, [&] {
            CUDA_OK(cuda::gemm_mma_bf16(x.get(), k, w.get(), n, k, y.get(), n, m, stream, true));
          });
          variants_us[std::to_string(variant)] = us;
          step_us["mma_pdl_v" + std::to_string(variant) + "_bf16@m" + std::to_string(m)] += us * mat.per_token;
        }
        cuda::set_gemm_mma_variant(before);
      }
      const std::string at = "@m" + std::to_string(m);
      step_us["lt_bf16" + at] += lt_us * mat.per_token;
      step_us["rows_bf16" + at] += rows_us * mat.per_token;
      step_us["mma_bf16" + at] += mma_us * mat.per_token;
      step_us["mma_pdl_bf16" + at] += pdl_us * mat.per_token;
      report.timing({{"name", std::string("gemm llama3-8b ") + mat.name + " m " + std::to_string(m)},
                     {"n", n}, {"k", k}, {"floor_us", floor_us},
                     {"lt_bf16_us", lt_us}, {"lt_bf16_x_floor", lt_us / floor_us},
                     {"rows_bf16_us", rows_us}, {"rows_bf16_x_floor", rows_us / floor_us},
                     {"mma_bf16_us", mma_us}, {"mma_bf16_x_floor", mma_us / floor_us},
                     {"mma_pdl_bf16_us", pdl_us}, {"mma_pdl_bf16_x_floor", pdl_us / floor_us},
                     {"mma_pdl_variant_us", variants_us}});
    }
  }
  nlohmann::json step = {{"name", "gemm llama3-8b one decode step (32 layers + lm_head)"},
                         {"floor_us", step_floor_us}};
  for (const auto& [key, us] : step_us) step[key + "_us"] = us, step[key + "_x_floor"] = us / step_floor_us;
  report.timing(step);
}

}  // namespace

void check_gemm(Report& report, cudaStream_t stream, const Options& options) {
  cublasLtHandle_t lt = nullptr;
  lt_ok(cublasLtCreate(&lt), "cublasLtCreate");
  std::unique_ptr<cublasLtContext, decltype(&cublasLtDestroy)> guard(lt, cublasLtDestroy);
  check_accuracy_and_invariance(report, lt, stream);
  check_silu_epilogue(report, stream);
  check_rope_epilogue(report, stream);
  check_mma_variants(report, stream);
  if (options.timing) time_llama8b(report, lt, stream);
}

}  // namespace specpipe::gpu_check
