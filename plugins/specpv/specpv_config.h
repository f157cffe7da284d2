#pragma once
/// The SpecPV plugin's config block (the pipeline YAML's plugins.<name>.config), parsed
/// and checked once at create().
#include <cstdint>
#include <string>

namespace specpv {

struct SpecpvConfig {
  /// exact: partial verdicts are provisional until a full round agrees (lossless);
  /// approximate: they are final (the SpecPV paper's behaviour, not lossless).
  bool approximate = false;
  int32_t sink_tokens = 64;        ///< the first tokens, always in view
  int32_t retrieval_tokens = 512;  ///< retrieved blocks per layer x block size
  int32_t window_tokens = 256;     ///< the most recent tokens
  int32_t buffer_tokens = 128;     ///< most tokens since the last full verification
  int32_t refresh_interval = 4;    ///< partial rounds between full ones (>= 1)
  /// Per sequence, halve the partial rounds before the next full one after a full round
  /// that rolled back (down to 1) and double them after one that did not (up to
  /// refresh_interval): fewer held tokens wasted where the view keeps missing.
  bool adaptive_interval = false;
  /// How a refresh re-selects the retrieved blocks: by Quest's bound on the block
  /// summaries (`retrieval_by: quest`, the default) or by the attention mass its full
  /// verification gives each block (`attention_mass`: better choices on the CPU; on the
  /// GPU its kernels cost a 130K full round 2.4x for no fewer rollbacks, README).
  bool by_mass = false;
  int32_t block_size = 16;         ///< from the host's model description

  int32_t retrieval_blocks() const { return retrieval_tokens / block_size; }
  /// sink + retrieval + window + buffer.
  int64_t budget() const;
};

/// Parses `json` (an object; unknown keys are errors). Throws std::invalid_argument with
/// a message naming the key for a config that cannot work: refresh_interval < 1, fewer
/// retrieval tokens than one block, negative budgets, an unknown mode or retrieval_by.
SpecpvConfig parse_config(const std::string& json, int32_t block_size);

}  // namespace specpv
