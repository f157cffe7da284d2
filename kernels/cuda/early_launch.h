#pragma once
/// A per-thread switch for gemm.h's variant bit 8: whether the one-row GEMMs this thread
/// launches (or captures into a CUDA graph) let the next kernel launch early.
///
/// Bit 8 pays where one-row GEMMs run alone (a decode step, whose next kernel's launch it
/// hides). A draft model drafting ahead runs its chain beside the target's verify
/// forward: there the next kernel's early blocks, waiting on the SMs, slow the verify
/// beside them (demo pair, one client, through the server, H100: the draft model at
/// gamma 4 6,982 against 6,434 tokens/s, median of 4 alternated servers; gamma 3 6,915
/// against 6,870; docs/BENCHMARKS.md section 8). So a CudaTransformer whose options turn
/// one_row_early_launch off holds a NoOneRowEarlyLaunch while it launches a forward;
/// every other model keeps the variant's choice. The same bits either way: an early
/// launch only moves when the next kernel's blocks are scheduled.
/// SPECPIPE_ONE_ROW_EARLY_LAUNCH=1 in the environment (read once) makes every scope
/// inactive, as before the switch: for A/B timings in one build (serve_env_ab.sh).
namespace specpipe::cuda {

/// False while a NoOneRowEarlyLaunch is alive on the calling thread; true otherwise.
bool one_row_early_launch();

/// While alive (and `active`): one-row GEMMs launched from this thread take no early
/// launch from bit 8 (bit 4, every one-wave grid, is not affected). Scopes nest.
class NoOneRowEarlyLaunch {
 public:
  explicit NoOneRowEarlyLaunch(bool active = true);
  ~NoOneRowEarlyLaunch();
  NoOneRowEarlyLaunch(const NoOneRowEarlyLaunch&) = delete;
  NoOneRowEarlyLaunch& operator=(const NoOneRowEarlyLaunch&) = delete;

 private:
  bool previous_;
};

}  // namespace specpipe::cuda
