#pragma once
/// Dense projections y = x W^T on the GPU (CPU reference: cpu::linear).
///
/// Three implementations with the same contract, each batch invariant for every m
/// (a row's result never depends on m or on the other rows; kernels/cuda/README.md):
///   LtGemm        cuBLASLt, one algorithm pinned per shape (no split-K, no reduction
///                 scheme), picked once by the heuristic at m = max_m and reused for
///                 every m after cublasLtMatmulAlgoCheck accepted it for each m.
///   gemm_rows_bf16 a plain kernel for small m: a warp per output column, a fixed
///                 per-lane FMA chain over k and a fixed butterfly across lanes.
///   gemm_mma_bf16 tensor cores streaming W once for up to 64 rows: decode and verify
///                 windows at the memory's rate (gemm_mma.cu).
/// BF16 path: W bf16, x converted to bf16 (cuda::f32_to_bf16), FP32 accumulate, FP32 y.
/// F32 path (LtGemm only): everything float32, FP32 compute (no TF32).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

namespace specpipe::cuda {

enum class GemmPrecision { bf16, f32 };

struct GemmShape {
  int64_t n;    ///< output features (rows of W)
  int64_t k;    ///< input features
  int64_t ldx;  ///< row stride of x in elements
  int64_t ldy;  ///< row stride of y in floats
  int32_t max_m = 64;
  GemmPrecision precision = GemmPrecision::bf16;
};

class LtGemm {
 public:
  LtGemm() = default;
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  /// Creates the descriptors for m = 1..max_m, asks the heuristic (at m = max_m) for
  /// candidates without split-K or reduction, and pins the first that AlgoCheck accepts
  /// for every m; allocates the workspace it needs. Returns CUBLAS_STATUS_SUCCESS,
  /// CUBLAS_STATUS_NOT_SUPPORTED when no candidate fits every m, or the first error.
  cublasStatus_t init(cublasLtHandle_t handle, const GemmShape& shape);

  /// y[0:m, 0:n] = x[0:m] W^T. x: [m, ldx] bf16 bits (or float for f32); read.
  /// w: [n, k] row-major (a torch Linear weight), same element type; read.
  /// y: [m, ldy] float32; written. 1 <= m <= max_m.
  cublasStatus_t run(const void* x, const void* w, float* y, int32_t m, cudaStream_t stream) const;

  /// "algo 23 tile 18 stages 9 splitk 1 reduction 0 swizzle 0 custom 0 cluster 0 ws 0".
  const std::string& description() const { return description_; }

 private:
  void release();

  cublasLtHandle_t handle_ = nullptr;
  GemmShape shape_{};
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t w_layout_ = nullptr;
  std::vector<cublasLtMatrixLayout_t> x_layouts_, y_layouts_;  // index m - 1
  cublasLtMatmulAlgo_t algo_{};
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::string description_;
};

/// y[r, j] = sum_k x[r, k] * w[j, k] for r < m, j < n, in one fixed order per output:
/// lane l of the warp owning column j accumulates k = 8l + 256t + e (t ascending, e < 8)
/// with fmaf, then a butterfly over the 32 lanes. x: [m, ldx] bf16 bits; w: [n, k] bf16
/// row-major; y: [m, ldy] float32 written. Requires k % 8 == 0, ldx % 8 == 0 and 16-byte
/// aligned x and w (returns cudaErrorInvalidValue otherwise).
cudaError_t gemm_rows_bf16(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t n, int64_t k, float* y,
                           int64_t ldy, int32_t m, cudaStream_t stream);

/// Rows gemm_mma_bf16 serves in one pass over W; more rows take more passes.
constexpr int32_t kMaxMmaRows = 64;

/// The same y = x W^T as gemm_rows_bf16 with tensor cores (bf16 products, f32 sums): a
/// block per 16 output columns, its 4 warps each summing every 4th 32-wide k step with
/// m16n8k16 mma, the warps' sums added in warp order. The order depends on k only, so a
/// row's bits do not depend on m or the other rows. overlap_previous launches it with
/// programmatic dependent launch (sm_90): its first weight loads are issued while the
/// kernel before it on the stream finishes, and x is read only after that kernel's writes
/// are visible. Requires k % 32 == 0, ldx % 8 == 0 and 16-byte aligned x and w
/// (cudaErrorInvalidValue otherwise).
cudaError_t gemm_mma_bf16(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t n, int64_t k, float* y,
                          int64_t ldy, int32_t m, cudaStream_t stream, bool overlap_previous = false);

/// An MLP's gate and up projections and its SiLU gate in one launch (the forward's
/// gate_up GEMM and silu_gate_bf16 without the FP32 round trip between them):
/// yb[r, i] = bf16(silu(x W_gate^T) * (x W_up^T)) for r < m, i < n, bitwise what
/// gemm_mma_bf16 over [W_gate; W_up] then silu_gate_bf16 give. w: the 2n x k rows of
/// [W_gate; W_up] laid out by interleave_gate_up. Requires n % 8 == 0 and gemm_mma_bf16's
/// conditions (cudaErrorInvalidValue otherwise).
cudaError_t gemm_mma_silu_bf16(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t n, int64_t k, uint16_t* yb,
                               int64_t ldyb, int32_t m, cudaStream_t stream, bool overlap_previous = false);

/// The RoPE and K/V epilogue of gemm_mma_rope_kv_bf16: what qk_norm_rope_kv (no QK-norm)
/// reads besides the GEMM's output. cos, sin: [positions, head_dim / 2] (the RopeTable's);
/// positions, slots: one per row of x; rows_k, rows_v: FP32 K/V rows, row slot s at
/// s * slot_stride (the pool's layer, a staging buffer or a dense slot).
struct QkvRope {
  const float* cos = nullptr;
  const float* sin = nullptr;
  const int32_t* positions = nullptr;
  const int64_t* slots = nullptr;
  float* rows_k = nullptr;
  float* rows_v = nullptr;
  int64_t slot_stride = 0;
  int32_t q_dim = 0, kv_dim = 0, head_dim = 0;
};

/// The qkv projection and qk_norm_rope_kv (without QK-norm) in one launch, bitwise what
/// gemm_mma_bf16 over [W_q; W_k; W_v] then qk_norm_rope_kv give (y's q and k rotated in
/// place, k and v written to their slots): no launch and no FP32 round trip between them.
/// w: the (q_dim + 2 kv_dim) x k rows laid out by interleave_rope_halves, so a 16-feature
/// tile holds 8 dims of a q or k head and the 8 dims half a head further, the pairs RoPE
/// rotates together. y: [m, ldy], ldy >= q_dim + 2 kv_dim. Requires head_dim % 16 == 0,
/// q_dim and kv_dim multiples of head_dim, and gemm_mma_bf16's conditions
/// (cudaErrorInvalidValue otherwise). Every gemm_mma variant applies.
cudaError_t gemm_mma_rope_kv_bf16(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t k, float* y, int64_t ldy,
                                  int32_t m, const QkvRope& rope, cudaStream_t stream, bool overlap_previous = false);

/// How gemm_mma_bf16 / gemm_mma_silu_bf16 stream W; every variant gives the same bits (a
/// warp's k steps are summed in ascending order and the warps in warp order in each).
/// Bit 1: deeper register buffers (8 steps, not 4, per warp and buffer) where the grid
/// leaves at most two blocks an SM (o_proj and down_proj of an 8B shape at m <= 8).
/// Bit 2 (up to 16 rows): persistent blocks where the grid needs more than one wave
/// (gate_up, lm_head): each block takes an equal share of the 16-feature tiles, the next
/// tile's weights loading during a tile's cross-warp sum and store.
/// Bit 4 (launches that overlap the kernel before): a one-wave grid lets the next kernel
/// launch as it starts (faster for the 0.6B shape, slower for the 8B one: off).
/// Bit 8: the same only for one row (a decode step or a draft chain's step) where W is at
/// most kEarlyLaunchMaxWeightBytes, a GEMM that streams its weights in about the time a
/// launch takes (every layer GEMM of the 0.6B shape, none of the 8B or 4B shapes, whose
/// GEMMs the next kernels' waiting blocks slow down). Not for verify windows: with it the
/// demo target's 5-row verify forward took 0.421 ms instead of 0.337 under load at one
/// client (serve_env_ab.sh, H200), its speculation 1.33-1.39x plain instead of 1.52-1.57x.
/// Bit 64 (with bit 1's deep buffers, W over kEarlyLaunchMaxWeightBytes): each warp
/// loads the next iteration's x fragments as it issues an iteration's mma, so refilling a
/// weight buffer never waits for its x (the 8B shape's o_proj and down_proj; the 0.6B
/// shape's GEMMs keep variant 11's kernels, its down_proj lost 1-2% of the step with it). Bits 16 and 32 (the next kernel launched one or
/// two iterations before a deep-buffer grid's end) were measured slower and are unused.
/// Bit 128 (up to 16 rows, W over kEarlyLaunchMaxWeightBytes, any kernel of bits 1-64):
/// the weight loads ask L2 to fetch the whole aligned 256 bytes of a miss
/// (`ld.global.nc.L2::256B`), the four warps' 64-byte pieces of a feature row at one step
/// in one DRAM request; the same values are loaded. The 8B shape's gate_up / down GEMMs
/// read at 83 / 79% of DRAM's peak instead of 79 / 75% (ncu), its step is 1.5-4.3%
/// shorter; smaller weights (the demo pair's, the 0.6B shape's layers) keep plain loads.
/// 0: one block per tile, 4-step buffers (the first kernel). The default, 203 (3 won the
/// A/B of kernels/cuda/README.md's "Tenth session", 8 its "Thirteenth session", 64 its
/// "Seventeenth session, decode", 128 its "Twentieth session, gemm");
/// SPECPIPE_GEMM_MMA_VARIANT (0..255, read on first use) overrides it (75: the default
/// before bit 128, 11 before bit 64).
constexpr int kDefaultMmaVariant = 203;
constexpr int kMmaVariantMask = 255;
constexpr int64_t kEarlyLaunchMaxWeightBytes = int64_t{16} << 20;
int gemm_mma_variant();
/// For checks and A/B timings: the variant every later launch takes.
void set_gemm_mma_variant(int variant);

/// Host: [W_gate; W_up] (2n rows of k, gate rows first) -> gemm_mma_silu_bf16's layout,
/// 8 gate rows then the same 8 features' up rows (its 16-row tiles). n % 8 == 0.
void interleave_gate_up(const uint16_t* gate_up, int64_t n, int64_t k, uint16_t* out);

/// Host: [W_q; W_k; W_v] (k columns) -> gemm_mma_rope_kv_bf16's layout: in each q and k
/// head, dims c .. c + 7 then c + head_dim / 2 .. + 7 for c = 0, 8, ..; W_v as it is.
/// head_dim % 16 == 0.
void interleave_rope_halves(const uint16_t* qkv, int64_t q_dim, int64_t kv_dim, int64_t head_dim, int64_t k,
                            uint16_t* out);

}  // namespace specpipe::cuda
