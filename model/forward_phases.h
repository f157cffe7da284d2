#pragma once
/// Where a CPU forward's time goes, phase by phase (bench/cpu_floor_bench --phases).
///
/// Off unless a profile is attached (Transformer::set_phase_profile): then each phase
/// boundary costs one test of a null pointer. Attached, every boundary reads the steady
/// clock once and adds the time since the previous boundary to the phase that just
/// ended, so the phases of a forward sum to its wall time. Parallel phases are timed on
/// the calling thread, i.e. until the region's last chunk is done.
#include <array>
#include <chrono>
#include <cstdint>

namespace specpipe {

struct ForwardPhaseProfile {
  enum Phase : int {
    embed,         ///< token embeddings
    norm,          ///< the two RMSNorms in front of attention and MLP
    qkv,           ///< q, k, v projections (one GEMM region)
    qk_norm_rope,  ///< per-head QK-norm and RoPE of q and k
    kv_write,      ///< the window's K/V through the sink (and the attention's set-up)
    attention,     ///< attention over prefix and window (with the layer ring's wait)
    o_proj,        ///< o_proj with the residual add
    gate_up,       ///< gate and up projections (one GEMM region)
    silu,          ///< silu(gate) * up
    down,          ///< down_proj with the residual add
    head_norm,     ///< gathering the logits rows and the final RMSNorm
    lm_head,       ///< the LM head GEMM
    other,         ///< the rest: window starts, scratch, the layer ring's set-up
    count
  };
  static constexpr std::array<const char*, count> kNames = {
      "embed", "norm", "qkv", "qk_norm_rope", "kv_write", "attention", "o_proj",
      "gate_up", "silu", "down", "head_norm", "lm_head", "other"};

  std::array<int64_t, count> ns{};  ///< summed over the forwards
  int64_t forwards = 0;

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void reset() { *this = {}; }
  int64_t total_ns() const {
    int64_t t = 0;
    for (int64_t v : ns) t += v;
    return t;
  }
};

/// The boundaries of one forward (the Transformer keeps one; a null profile makes every
/// call a no-op).
class PhaseClock {
 public:
  void start(ForwardPhaseProfile* profile) {
    profile_ = profile;
    if (profile_) {
      ++profile_->forwards;
      last_ = ForwardPhaseProfile::now_ns();
    }
  }
  /// Ends `phase`: the time since the previous boundary is added to it.
  void end(ForwardPhaseProfile::Phase phase) {
    if (!profile_) return;
    const int64_t t = ForwardPhaseProfile::now_ns();
    profile_->ns[phase] += t - last_;
    last_ = t;
  }

 private:
  ForwardPhaseProfile* profile_ = nullptr;
  int64_t last_ = 0;
};

}  // namespace specpipe
