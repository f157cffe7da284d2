#pragma once
/// The messages between the pipeline's actors (ARCHITECTURE.md sections 3-4). They are
/// per round or per admission batch, never per layer or kernel, and carry owned data
/// only (vectors, tensor handles): nothing in them points into another actor's state.
///
///   admission:  scheduler -AdmitWork-> kv-router -PrefillWork-> verifier
///               -PrefillDone-> kv-router -AdmitDone-> scheduler
///               (with offload, kv-router -PrefillWork-> verifier -PrefillDone-> again,
///               once per prefill chunk)
///               (and scheduler -DraftStart-> draft, which prefills its own KV)
///   round:      scheduler -DraftWork-> draft -ReserveWork-> kv-router -VerifyWork->
///               verifier -VerifyDone-> kv-router -RoundDone-> scheduler
///               (a SpecPV refresh round: verifier -RetrievalWork-> retrieval
///               -RetrievalDone-> verifier before its VerifyDone)
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/sampling.h"
#include "kvstore/async_write_back.h"
#include "kvstore/block_summaries.h"
#include "kvstore/kv_store.h"
#include "kvstore/partial_view.h"
#include "pipeline/drafter.h"
#include "pipeline/gamma.h"
#include "pipeline/generation.h"
#include "pipeline/rng.h"
#include "pipeline/spec_stats.h"

namespace specpipe::actors {

class ResponseSink;

/// A client's request (engine -> scheduler).
struct SubmitRequest {
  RequestId id = 0;
  std::vector<int32_t> prompt;
  GenerationParams params;
  std::vector<std::string> stop;  ///< stop strings
  int32_t gamma = -1;             ///< drafts per round; -1 = the pipeline's default
  std::shared_ptr<ResponseSink> sink;
};

struct CancelRequest {
  RequestId id = 0;
};

/// Asks the scheduler for the aggregate statistics; answered with a SpecStats.
struct StatsQuery {};
/// Asks the kv-router (target KV) or the draft actor (draft KV, if any) how full its
/// store is; answered with a KvOccupancy (total_blocks 0: no store).
struct KvQuery {};
/// Asks the kv-router (kv_write) or the scheduler (verify_plan) for its strategy's
/// counters; answered with a JSON text.
struct StrategyMetricsQuery {};

// ---- admission ---------------------------------------------------------------

struct AdmitItem {
  RequestId request = 0;
  std::vector<int32_t> context;  ///< the prompt without its last token (that one is pending)
  SeqId seq = -1;                ///< filled by the kv-router
  int32_t cached = 0;            ///< context tokens found in the prefix cache
  /// Context [0, prefilled) is committed; the verifier's next pass prefills
  /// [prefilled, prefill_end). Without offload one pass covers the whole context; with
  /// it the kv-router commits chunk by chunk (moving older blocks to the host tier in
  /// between), so a prompt may be longer than the pool.
  int32_t prefilled = 0;
  int32_t prefill_end = 0;
  /// Offload's layer-wise prefill (pipeline/prefill.h, book_layerwise): the kv-router
  /// booked the context's first host blocks and reserved the rest; the verifier's pass
  /// runs the whole context layer by layer and clears this flag when the model refused
  /// (the kv-router then gives the booking back and prefills chunk by chunk).
  bool layerwise = false;
  bool layerwise_refused = false;
  std::string error;             ///< non-empty: this item failed (and holds no KV)
};

struct AdmitBatch {
  int64_t batch = 0;
  std::vector<AdmitItem> items;
  double prefill_ms = 0, commit_ms = 0;
};
struct AdmitWork { AdmitBatch b; };    ///< scheduler -> kv-router
/// kv-router -> verifier. `fence`: the offload actor's moves to the host so far (CPU copy
/// thread); the forward waits on it before it reads the host tier or writes the pool.
struct PrefillWork {
  AdmitBatch b;
  CopyFence fence;
};
struct PrefillDone { AdmitBatch b; };  ///< verifier -> kv-router
struct AdmitDone { AdmitBatch b; };    ///< kv-router -> scheduler

/// scheduler -> draft: new sequences (their context), and ended ones.
struct DraftStart { AdmitBatch b; };
struct DraftFinish { std::vector<RequestId> requests; };
/// scheduler -> kv-router: sequences whose KV is no longer needed.
struct ReleaseWork { std::vector<SeqId> seqs; };

// ---- rounds ------------------------------------------------------------------

/// One sequence's part of a round; fields are filled in as the round moves on.
/// SpecPV over the host tier, per round item (summed into ViewStats).
struct HostViewTraffic {
  int64_t streamed_bytes = 0;   ///< host-tier K/V the window's forward streamed (ring loads)
  int64_t copy_bytes = 0;       ///< host -> pool bytes of the view copies made after it
  int32_t copied_blocks = 0;    ///< view blocks (summed over layers) read from pool copies
  int32_t dropped_blocks = 0;   ///< view blocks on the host with no copy, left out
  bool copies_refused = false;  ///< the pool could not hold the copies (kv-router)
  bool fallback = false;        ///< a partial round that read the whole prefix instead
};

struct RoundItem {
  RequestId request = 0;
  SeqId seq = -1;
  std::vector<int32_t> appended;  ///< context tokens new since the previous round (drafter)
  /// Decided tokens whose K/V are not in the pool because the kv_write strategy failed
  /// to commit them last round: the window recomputes them first.
  std::vector<int32_t> recompute;
  int32_t pending = -1;           ///< the target's latest token, not yet in its KV
  /// SpecPV exact mode, on the full round after partial ones: the tokens accepted under
  /// partial views, not yet sent to the client, verified again between pending and the
  /// new drafts as if they were drafts. `accepted` counts over provisional + drafts.
  std::vector<int32_t> provisional;
  /// The kv-router truncates the sequence to this length before reserving (-1: no): a
  /// full round after partial ones recomputes the K/V those wrote over partial views.
  int32_t rewind_to = -1;
  /// The drafter keeps this many tokens of its context before `appended` (-1: all): a
  /// rollback of provisional tokens.
  int32_t draft_rewind = -1;
  /// verify_view: this round attends to a partial view of the prefix (sink, retrieved
  /// blocks, recent region: kvstore/partial_view.h) with these budgets.
  bool partial = false;
  /// A partial round whose verdict is final (approximate: not lossless).
  bool final_verdicts = false;
  /// A full round that re-selects the retrieved blocks from its queries (budget says
  /// which blocks may be retrieved).
  bool refresh = false;
  /// A refresh that selects by the round's attention mass (where the forward gives it).
  bool refresh_by_mass = false;
  ViewBudget budget;
  /// Tokens of the sequence's KV (after any rewind) last checked by a full verification.
  int32_t verified = 0;
  /// SpecPV over the host tier (kvstore/README.md, "Partial views of host-tier
  /// sequences"). Verifier, after a refresh: per layer, the block indices (ascending)
  /// the next partial views read - sink, retrieved, recent - of which the kv-router
  /// copies those on the host tier into the pool (empty: nothing to do).
  std::vector<std::vector<int32_t>> view_sets;
  HostViewTraffic host_view;  ///< verifier and kv-router: what the round moved and read
  int32_t gamma = 0;
  cpu::SamplingParams sampling;
  Rng rng{0};                     ///< the request's stream, travelling with its work
  std::vector<int32_t> drafts;    ///< draft: the proposal
  bool drafted_ahead = false;     ///< draft: the proposal was drafted during the previous round
  /// draft: not null when `drafts` are placeholders and the drafts are on the drafter's
  /// device (Proposal::on_device); the verifier's forward reads them there and fills
  /// `drafts` in from its results (ARCHITECTURE.md section 4).
  DeviceIds device_drafts;
  int32_t q_row = -1;             ///< draft: first row of its q in RoundBatch::q (-1: none)
  /// draft: not null (q_row -1) when its q rows stayed on the drafter's device
  /// (Proposal::q_on_device): the target copies them on the device for its verdict.
  DeviceRows q_device;
  int32_t accepted = 0;           ///< verifier: k
  int32_t next_token = -1;        ///< verifier: correction or bonus token
  std::string error;              ///< non-empty: the item failed; its KV was left as before
  bool kv_redo = false;           ///< kv-router: the accepted rows did not reach the pool

  /// The verify window: recompute, then pending, then the provisional tokens and drafts.
  std::vector<int32_t> window() const;
  /// Its layout (sizes, the verdict's first row, what a verdict commits).
  WindowLayout layout() const {
    return {static_cast<int32_t>(recompute.size()), static_cast<int32_t>(provisional.size()),
            static_cast<int32_t>(drafts.size())};
  }
  /// What the verdict judges: provisional tokens, then drafts.
  std::vector<int32_t> chain() const;
};

struct RoundTimes {
  double draft_ms = 0, reserve_ms = 0, verify_ms = 0, commit_ms = 0;
  /// The drafter's prefill of new prompts inside its proposals (Drafter::take_prefill_ms),
  /// and at admission (ModelDrafter::prefill_when_idle; reported by the round after it):
  /// counted as prefill (SpecStats::prefill_ms), not in draft_ms.
  double draft_prefill_ms = 0;
  int32_t draft_failures = 0;  ///< rounds the drafter failed and ran without drafts
  /// Between the stages (actors/stage_clock.h): time the round waited for a stage busy
  /// with other work (another micro-batch's round, an admission batch; at the kv-router,
  /// held while the store was lent to another forward). The scheduler's messaging is the
  /// round's wall time less the stages' work and this: the hops.
  double queued_ms = 0;
  int64_t sent_ns = 0;  ///< steady clock when the last stage sent the round on
};

struct RoundBatch {
  int64_t round = 0;
  std::vector<RoundItem> items;
  /// Draft distributions when sampling with a model drafter: [rows, vocab] float32.
  /// Produced on the draft actor's stream; consumers acquire() it on their own.
  TensorHandle q;
  /// The draft actor's work still running on its stream when the round left it (the
  /// draft-ahead chain for the next round; complete: none). The verifier's forward joins
  /// it (ForwardModel::join_next_forward): that forward's one host sync covers it, and
  /// the drafter collects the chain without a sync of its own.
  Event draft_ahead;
  /// The round's micro-batch slot in [0, scheduler.micro_batches): no other round in
  /// flight has it. A drafter that leaves a round's drafts on its device keeps them in
  /// the slot's buffer, valid until the next round of the slot (Drafter::round_slot).
  int32_t slot = 0;
  RoundTimes times;
};
struct DraftWork { RoundBatch b; };    ///< scheduler -> draft
struct ReserveWork { RoundBatch b; };  ///< draft -> kv-router
struct VerifyWork {  ///< kv-router -> verifier; `fence` as in PrefillWork
  RoundBatch b;
  CopyFence fence;
};
struct VerifyDone { RoundBatch b; };   ///< verifier -> kv-router
struct RoundDone { RoundBatch b; };    ///< kv-router -> scheduler

// ---- offload (actors/offload_actor.h) -----------------------------------------------
// The kv-router awaits each answer: it lends the store to the offload actor and touches
// it again only when the answer is back (one writer at a time).

/// kv-router -> offload: make `wanted` pool blocks free (free + evictable) before reserves.
struct PoolRoomWork { int32_t wanted = 0; };
/// offload -> kv-router: what moved, and the event after the moves (empty: none queued,
/// or a device model orders them inside its forward).
struct PoolRoomDone {
  int64_t blocks_moved = 0;
  CopyFence fence;
};
/// kv-router -> offload after a verdict: the SpecPV view copies of the items with
/// view_sets (host-tier blocks brought back into pool copies).
struct ViewCopyWork { RoundBatch b; };
struct ViewCopyDone {  ///< offload -> kv-router
  RoundBatch b;
  CopyFence fence;
};

// ---- retrieval (actors/retrieval_actor.h) -------------------------------------------
// The verifier awaits the answer, on refresh rounds only: one request per round, every
// refreshing sequence and layer in it (never a message per layer).

/// One sequence of a refresh round: its queries of every layer, reduced (QuerySums), and
/// where its retrieved blocks may lie.
struct RetrievalQuery {
  SeqId seq = -1;
  int32_t verified = 0;         ///< tokens checked by a full verification (summarised below it)
  int32_t k = 0;                ///< blocks to retrieve per layer
  int32_t first = 0, last = 0;  ///< the blocks they come from: [first, last)
  std::vector<QuerySums> layers;  ///< reduced on the host (empty when on the device)
  /// Reduced on the device instead: the forward's handle (QueryTap::on_device_sums) for
  /// the target's DeviceRetrieval; -1: none.
  int32_t device_sums = -1;
  /// Retrieval by attention mass was asked for (ViewDecision::by_mass).
  bool by_mass = false;
  /// By mass and the forward gave it: per layer, each prefix block's softmax mass for the
  /// window's rows (block_mass_scores); the blocks are chosen by it instead of by the
  /// query sums. Empty: by the query sums (Quest), the fallback.
  std::vector<std::vector<float>> mass{};
};
/// verifier -> retrieval.
struct RetrievalWork { std::vector<RetrievalQuery> queries; };
/// One sequence's answer: its retrieved blocks per layer for the next partial views.
struct RetrievalAnswer {
  SeqId seq = -1;
  /// False: nothing selected this time (a backend that cannot land its host-tier moves
  /// for reading); the sequence keeps its previous selection.
  bool selected = false;
  std::vector<std::vector<int32_t>> blocks;  ///< [layers]: block indices, ascending
  bool by_mass = false;                      ///< selected by attention mass (else by the query sums)
  std::string error;                         ///< non-empty: the refresh failed (the item fails)
};
struct RetrievalDone { std::vector<RetrievalAnswer> answers; };  ///< retrieval -> verifier

}  // namespace specpipe::actors

namespace specpipe::actors {

inline std::vector<int32_t> RoundItem::window() const {
  std::vector<int32_t> w(recompute);
  w.push_back(pending);
  w.insert(w.end(), provisional.begin(), provisional.end());
  w.insert(w.end(), drafts.begin(), drafts.end());
  return w;
}

inline std::vector<int32_t> RoundItem::chain() const {
  std::vector<int32_t> c(provisional);
  c.insert(c.end(), drafts.begin(), drafts.end());
  return c;
}

}  // namespace specpipe::actors
