#pragma once
/// Speculation statistics, per request and aggregated (ARCHITECTURE.md section 10).
#include <cstdint>
#include <vector>

namespace specpipe {

/// SpecPV (the verify_view slot): how a request's rounds were verified. Partial rounds
/// attend to a partial view of the K/V; `exact` ones hold their tokens back until a full
/// round agrees (a disagreement rolls back), `approximate` ones are final (not lossless).
struct ViewStats {
  int64_t full_rounds = 0, exact_rounds = 0, approximate_rounds = 0;
  int64_t partial_proposed = 0, partial_accepted = 0;  ///< drafts judged under partial views
  int64_t full_proposed = 0, full_accepted = 0;        ///< new drafts judged by full rounds
  int64_t rollbacks = 0;           ///< full rounds that found a provisional token wrong
  int64_t rolled_back_tokens = 0;  ///< provisional tokens dropped by them
  int64_t refreshes = 0;           ///< full rounds that re-selected the retrieved blocks
  int64_t forced_full = 0;         ///< partial views asked for and not given (reasons: engine metrics)
  // Host tier (offload): what partial and full rounds moved over PCIe.
  int64_t partial_host_bytes = 0;  ///< host K/V bytes partial rounds streamed (0 unless a fallback)
  int64_t full_host_bytes = 0;     ///< host K/V bytes full rounds streamed
  int64_t view_copy_bytes = 0;     ///< host -> pool bytes of view copies (after refreshes)
  int64_t view_host_blocks = 0;    ///< view blocks partial rounds read from pool copies (x layers)
  int64_t view_dropped_blocks = 0; ///< host-tier view blocks without a copy, left out (x layers)
  int64_t view_copy_refusals = 0;  ///< refreshes whose copies the pool could not hold
  int64_t host_fallbacks = 0;      ///< partial rounds that read the whole prefix (no copies)
  // Verify time (SpecStats::verify_ms) of the rounds of each kind: where it goes.
  double partial_verify_ms = 0, full_verify_ms = 0;

  int64_t partial_rounds() const { return exact_rounds + approximate_rounds; }
  /// "full" (no partial round), "exact", "approximate" or "mixed".
  const char* mode() const;
  void merge(const ViewStats& o);
};

struct SpecStats {
  int64_t requests = 0;       ///< requests aggregated here (1 for one request)
  int64_t rounds = 0;         ///< target verify forwards (a plain decode step counts as one)
  int64_t proposed = 0;       ///< draft tokens proposed
  int64_t accepted = 0;       ///< draft tokens accepted
  int64_t generated = 0;      ///< tokens returned to clients (after stop truncation)
  std::vector<int64_t> accepted_hist;  ///< [k] = rounds that accepted exactly k drafts
  std::vector<int32_t> accepted_per_round;  ///< per request only: k of every round
  int64_t prompt_tokens = 0, cached_prompt_tokens = 0;
  int64_t draft_failures = 0;  ///< rounds whose drafter failed and ran without drafts
  int64_t drafted_ahead = 0;   ///< rounds whose drafts were made during the previous round
  /// Engine-wide (scheduler.micro_batches > 1): rounds started while another round was in
  /// flight, and the most rounds in flight at once.
  int64_t overlapped_rounds = 0;
  int64_t max_rounds_in_flight = 0;
  double prefill_ms = 0;    ///< target + draft prompt forwards
  double draft_ms = 0;      ///< drafter compute in rounds
  double verify_ms = 0;     ///< target forward + acceptance in rounds
  double commit_ms = 0;     ///< KV reserve / commit / truncate
  /// Round wall time not spent in the three above nor in queued_ms: the hops between
  /// the actors.
  double messaging_ms = 0;
  /// Round wall time spent waiting for a stage busy with other work: with
  /// scheduler.micro_batches > 1, another round's drafting or verification (the
  /// kv-router holds a round back while the store is lent to another's forward).
  double queued_ms = 0;
  double wall_ms = 0;       ///< submit to final token
  ViewStats view;           ///< SpecPV partial / full rounds

  double acceptance_rate() const { return proposed ? static_cast<double>(accepted) / static_cast<double>(proposed) : 0.0; }
  /// Tokens produced per target forward: (accepted + rounds) / rounds.
  double tokens_per_step() const { return rounds ? static_cast<double>(accepted + rounds) / static_cast<double>(rounds) : 0.0; }
  /// The rounds' wall time: drafting, verification, KV work, messaging and queueing.
  double round_ms() const { return draft_ms + verify_ms + commit_ms + messaging_ms + queued_ms; }
  double mean_accepted() const { return rounds ? static_cast<double>(accepted) / static_cast<double>(rounds) : 0.0; }

  /// Records one round of this request: `proposed` drafts, `accepted` of them.
  void add_round(int32_t proposed_now, int32_t accepted_now);
  /// Adds another request's (or aggregate's) counters and times; per-round lists are
  /// not merged.
  void merge(const SpecStats& other);
};

}  // namespace specpipe
