#include "actors/scheduler_actor.h"

#include <spdlog/spdlog.h>

#include <caf/all.hpp>
#include <cmath>
#include <algorithm>
#include <deque>
#include <utility>
#include <map>
#include <optional>

#include "actors/response_sink.h"
#include "actors/retrieval_actor.h"
#include "actors/stage_clock.h"
#include "actors/view_rounds.h"
#include "core/error.h"
#include "core/timer.h"
#include "pipeline/output_stream.h"

namespace specpipe::actors {
namespace {

/// A request from submission to completion.
struct Request {
  SubmitRequest spec;
  int32_t gamma = 0;
  int64_t budget_blocks = 0;       ///< KV blocks reserved for it at admission (worst case)
  SeqId seq = -1;
  int32_t pending = -1;
  int32_t position = 0;            ///< target KV length = position of the pending token
  std::vector<int32_t> appended;   ///< for the drafter: context tokens new since last round
  std::vector<int32_t> recompute;  ///< decided tokens whose K/V the last round could not commit
  Rng rng{0};
  std::unique_ptr<OutputStream> out;
  SpecStats stats;
  Stopwatch clock;
  bool budgeted = false;           ///< left the queue: holds budget_blocks, the drafter knows it
  bool running = false;            ///< admitted (has KV)
  bool in_round = false;           ///< part of a round in flight
  bool cancelled = false;
  ViewState view;                  ///< SpecPV: the tokens since the last full verification
  int64_t rounds = 0;              ///< rounds it was in so far (its own count: micro-batches interleave the global one)
  int64_t drafted_round = -1;      ///< its own round count when it last had drafts (-1: none yet)
};

class Scheduler : public scheduler_actor::base {
 public:
  Scheduler(caf::actor_config& cfg, SchedulerDeps deps) : scheduler_actor::base(cfg), d_(std::move(deps)) {}

  // Peers holds a strong handle to this actor: drop it (and the requests' sinks) when the
  // actor exits, or the cycle keeps the actor, its tokenizer and the pipeline alive forever.
  void on_exit() override {
    d_.peers.reset();
    requests_.clear();
  }

  behavior_type make_behavior() override {
    return {
        [this](SubmitRequest& r) {
          submit(std::move(r));
          stage_.busy_until_now();
        },
        [this](CancelRequest& c) {
          cancel(c.id);
          stage_.busy_until_now();
        },
        [this](AdmitDone& w) {
          admitted(w.b);
          stage_.busy_until_now();
        },
        [this](RoundDone& w) {
          stage_.arrive(w.b.times);
          round_done(w.b);
          stage_.busy_until_now();
        },
        [this](StatsQuery) { return global_stats(); },
        [this](StrategyMetricsQuery) {
          nlohmann::json j = planner().metrics();
          j["strategy"] = planner().name();
          j["plain_rounds_measured"] = plain_measured_;
          nlohmann::json v = view_planner().metrics();
          v["strategy"] = view_planner().name();
          v["forced_full"] = forced_full_;
          if (d_.retrieval_stats) v["retrieval"] = retrieval_actor_metrics(*d_.retrieval_stats);
          j["verify_view"] = v;
          return j.dump();
        },
    };
  }

 private:
  const SchedulerConfig& cfg() const { return d_.config; }

  int64_t blocks_for(int64_t tokens) const { return (tokens + cfg().block_size - 1) / cfg().block_size; }

  struct Refusal {
    std::string code, message;
  };

  /// A refusal before any work: completion with an error, nothing held.
  void refuse(const SubmitRequest& r, const Refusal& why) {
    Completion c;
    c.id = r.id;
    c.reason = FinishReason::error;
    c.error_code = why.code;
    c.error = why.message;
    if (r.sink) r.sink->on_complete(c);
  }

  std::optional<Refusal> validate(const SubmitRequest& r, int32_t gamma) const {
    const auto& p = r.params;
    auto bad = [](std::string m) { return Refusal{"bad_request", std::move(m)}; };
    if (r.prompt.empty()) return bad("the prompt is empty");
    if (p.max_tokens < 0) return bad("max_tokens must not be negative");
    if (!std::isfinite(p.sampling.temperature) || p.sampling.temperature < 0) return bad("temperature must be a finite number >= 0");
    if (!(p.sampling.top_p > 0.0f && p.sampling.top_p <= 1.0f)) return bad("top_p must be in (0, 1]");
    if (p.sampling.top_k < 0) return bad("top_k must not be negative");
    // The one per-request check of gamma (the protocols only read a non-negative integer;
    // max_gamma was checked against the models at load: pipeline/gamma.h).
    if (gamma < 0 || gamma > cfg().max_gamma)
      return bad(fmt::format("gamma {} is out of range [0, {}] (the server's slots.drafter.max_gamma)", gamma,
                             cfg().max_gamma));
    for (const auto& s : r.stop)
      if (s.empty()) return bad("stop strings must not be empty");
    if (static_cast<int64_t>(r.prompt.size()) >= cfg().max_positions)
      return Refusal{"out_of_capacity", fmt::format("prompt of {} tokens does not fit the model's {} positions",
                                                    r.prompt.size(), cfg().max_positions)};
    const int64_t need =
        blocks_for(static_cast<int64_t>(r.prompt.size()) + p.max_tokens + (gamma == 0 ? 0 : cfg().max_gamma) + 1);
    if (need > cfg().kv_blocks)
      return Refusal{"out_of_capacity",
                     fmt::format("prompt of {} tokens + {} new tokens needs {} KV blocks, the store has {}{}",
                                 r.prompt.size(), p.max_tokens, need, cfg().kv_blocks,
                                 cfg().pool_blocks < cfg().kv_blocks
                                     ? fmt::format(" ({} in the pool, {} on the host tier)", cfg().pool_blocks,
                                                   cfg().kv_blocks - cfg().pool_blocks)
                                     : std::string())};
    return std::nullopt;
  }

  void submit(SubmitRequest&& r) {
    if (requests_.count(r.id)) return refuse(r, {"duplicate_id", fmt::format("request id {} is already in use", r.id)});
    const int32_t gamma = !cfg().speculative ? 0 : r.gamma < 0 ? cfg().gamma : r.gamma;
    if (auto why = validate(r, gamma)) return refuse(r, *why);
    if (static_cast<int32_t>(waiting_.size()) >= cfg().max_queue)
      return refuse(r, {"overloaded", fmt::format("{} requests are waiting", waiting_.size())});
    Request q;
    q.gamma = gamma;
    // The verify_plan strategy may give a speculating request up to max_gamma drafts.
    q.budget_blocks = blocks_for(static_cast<int64_t>(r.prompt.size()) + r.params.max_tokens +
                                 (gamma == 0 ? 0 : cfg().max_gamma) + 1);
    q.rng = Rng(r.params.seed);
    StopConditions stop;
    stop.max_tokens = r.params.max_tokens;
    stop.stop_at_eos = r.params.stop_at_eos;
    stop.eos_ids = r.params.eos_ids.empty() ? cfg().eos_ids : r.params.eos_ids;
    stop.stop_strings = r.stop;
    q.out = std::make_unique<OutputStream>(d_.tokenizer, stop);
    q.stats.requests = 1;
    q.stats.prompt_tokens = static_cast<int64_t>(r.prompt.size());
    const RequestId id = r.id;
    q.spec = std::move(r);
    requests_.emplace(id, std::move(q));
    if (requests_.at(id).spec.params.max_tokens == 0) return finish(id, FinishReason::length);
    waiting_.push_back(id);
    step();
  }

  void cancel(RequestId id) {
    auto it = requests_.find(id);
    if (it == requests_.end()) return;
    it->second.cancelled = true;
    // A waiting request ends now; one with work in flight (its admission or its round)
    // ends when that step returns, so its KV is released in a consistent state. With one
    // micro-batch a running request also waits for an admission in flight (as ever; with
    // more the kv-router holds the release back until the store is its own again).
    const Request& r = it->second;
    if (!r.budgeted) {
      waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
      finish(id, FinishReason::cancelled);
    } else if (r.running && !r.in_round && (rounds_overlap() || !admitting_)) {
      finish(id, FinishReason::cancelled);
    }
  }

  /// scheduler.micro_batches > 1: rounds overlap each other and admission batches.
  bool rounds_overlap() const { return cfg().micro_batches > 1; }

  /// Starts the next admission batch and rounds. One micro-batch: one of them at a time,
  /// an admission first. More: an admission batch beside up to micro_batches rounds, each
  /// over a share of the running sequences not in a round (ARCHITECTURE.md section 3).
  void step() {
    if (!admitting_ && (in_flight_.empty() || rounds_overlap())) admit();
    if (admitting_ && !rounds_overlap()) return;
    const auto groups = static_cast<size_t>(std::max(1, cfg().micro_batches));
    const size_t share = (running_.size() + groups - 1) / groups;
    std::vector<RequestId> ids;
    while (static_cast<int32_t>(in_flight_.size()) < cfg().micro_batches) {
      ids.clear();
      for (RequestId id : running_)
        if (!requests_.at(id).in_round && ids.size() < share) ids.push_back(id);
      if (ids.empty()) return;
      start_round(ids);
    }
  }

  /// Sends the next admission batch (first come, first served within the KV budget).
  void admit() {
    AdmitBatch batch;
    batch.batch = next_batch_;
    while (!waiting_.empty() && static_cast<int32_t>(running_.size() + batch.items.size()) < cfg().max_batch) {
      Request& r = requests_.at(waiting_.front());
      if (budget_used_ + r.budget_blocks > cfg().kv_blocks) break;  // first come, first served
      budget_used_ += r.budget_blocks;
      r.budgeted = true;
      AdmitItem item;
      item.request = waiting_.front();
      item.context.assign(r.spec.prompt.begin(), r.spec.prompt.end() - 1);
      batch.items.push_back(std::move(item));
      waiting_.pop_front();
    }
    if (batch.items.empty()) return;
    ++next_batch_;
    admitting_ = true;
    send(d_.peers->draft, DraftStart{batch});
    send(d_.peers->kv_router, AdmitWork{std::move(batch)});
  }

  /// Plans and sends a round of these running sequences.
  void start_round(const std::vector<RequestId>& ids) {
    RoundBatch round;
    round.round = next_round_++;
    // The verify_plan slot decides each sequence's gamma; the window [pending, drafts]
    // must stay inside both models' positions.
    std::vector<PlanSequence> plan;
    for (RequestId id : ids) {
      const Request& r = requests_.at(id);
      const int32_t cap = r.gamma == 0 ? 0 : cfg().max_gamma;
      plan.push_back({id, r.gamma, std::max(0, std::min(cap, cfg().max_positions - 1 - r.position)), r.position});
    }
    std::vector<int32_t> gamma(plan.size(), 0);
    const auto sequences = static_cast<int32_t>(plan.size());
    planner().plan(plan, costs_.costs(sequences, 0), gamma);
    // Now and then a round without drafts at this batch size, so that the strategy sees
    // what speculation off costs here (counted: strategy metrics' plain_rounds_measured).
    if (planner().plans_from_costs() && costs_.plain_due(sequences)) {
      std::fill(gamma.begin(), gamma.end(), 0);
      ++plain_measured_;
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      Request& r = requests_.at(ids[i]);
      r.in_round = true;
      RoundItem item;
      item.request = ids[i];
      item.seq = r.seq;
      item.appended = std::move(r.appended);
      r.appended.clear();
      item.recompute = r.recompute;
      item.pending = r.pending;
      item.gamma = std::clamp(gamma[i], 0, plan[i].gamma_cap);
      item.sampling = r.spec.params.sampling;
      item.rng = r.rng;
      round.items.push_back(std::move(item));
    }
    plan_views(round);
    // The lowest micro-batch slot no round in flight holds (RoundBatch::slot).
    round.slot = 0;
    while (std::any_of(in_flight_.begin(), in_flight_.end(), [&](const auto& r) { return r.second.slot == round.slot; }))
      ++round.slot;
    in_flight_[round.round] = {Stopwatch(), round.slot};
    const auto in_flight = static_cast<int64_t>(in_flight_.size());
    if (in_flight > 1) ++overlapped_rounds_;
    max_rounds_in_flight_ = std::max(max_rounds_in_flight_, in_flight);
    StageClock::leave(round.times);
    send(d_.peers->draft, DraftWork{std::move(round)});
  }

  void admitted(AdmitBatch& b) {
    admitting_ = false;
    global_times_.prefill_ms += b.prefill_ms;
    global_times_.commit_ms += b.commit_ms;
    for (AdmitItem& item : b.items) {
      Request& r = requests_.at(item.request);
      if (!item.error.empty()) {
        finish(item.request, FinishReason::error, item.error);
        continue;
      }
      r.seq = item.seq;
      r.running = true;
      r.pending = r.spec.prompt.back();
      r.position = static_cast<int32_t>(item.context.size());
      r.appended = {r.pending};
      r.view.verified = r.position;
      r.stats.cached_prompt_tokens = item.cached;
      r.stats.prefill_ms += b.prefill_ms;
      running_.push_back(item.request);
      if (r.cancelled) finish(item.request, FinishReason::cancelled);
    }
    step();
  }

  void round_done(RoundBatch& b) {
    const auto flight = in_flight_.find(b.round);
    const double wall = flight->second.clock.elapsed_ms();
    in_flight_.erase(flight);
    for (const RoundItem& item : b.items)
      if (auto it = requests_.find(item.request); it != requests_.end()) it->second.in_round = false;
    const RoundTimes& t = b.times;
    // What is left of the wall time once the stages' work and the waits for stages busy
    // with other rounds are taken out: the hops (actors/stage_clock.h).
    const double work = t.draft_ms + t.draft_prefill_ms + t.verify_ms + t.reserve_ms + t.commit_ms;
    const double queued = std::min(t.queued_ms, std::max(0.0, wall - work));
    const double messaging = std::max(0.0, wall - work - queued);
    global_times_.prefill_ms += t.draft_prefill_ms;
    global_times_.draft_ms += t.draft_ms;
    global_times_.verify_ms += t.verify_ms;
    global_times_.commit_ms += t.reserve_ms + t.commit_ms;
    global_times_.messaging_ms += messaging;
    global_times_.queued_ms += queued;
    global_times_.draft_failures += t.draft_failures;
    // What the verify_plan strategy learns from: costs, and each sequence's acceptance.
    int32_t draft_steps = 0;
    int64_t window_tokens = 0;
    // A sequence drafting for the first time, or again after more than kCatchUpRounds of
    // its own rounds without drafts, has the draft model catch up on its context first
    // (its whole prompt the first time): that round is not a usual drafting round, but
    // what it cost beyond one is a cost of drafting (CostModel). Counted per sequence:
    // with micro-batches the global round numbers interleave, so their difference would
    // overstate a sequence's gap.
    constexpr int64_t kCatchUpRounds = 4;
    bool catch_up = false;
    std::vector<PlanObservation> observed;
    for (const RoundItem& item : b.items) {
      if (auto it = requests_.find(item.request); it != requests_.end()) {
        Request& r = it->second;
        ++r.rounds;
        if (!item.drafts.empty()) {
          catch_up = catch_up || r.drafted_round < 0 || r.rounds - r.drafted_round > kCatchUpRounds;
          r.drafted_round = r.rounds;
        }
      }
      draft_steps = std::max(draft_steps, static_cast<int32_t>(item.drafts.size()));
      window_tokens += item.layout().size();
      // Of this round's own drafts (SpecPV: not the provisional tokens judged before them).
      const auto held = static_cast<int32_t>(item.provisional.size());
      if (item.error.empty())
        observed.push_back({item.request, static_cast<int32_t>(item.drafts.size()), std::max(0, item.accepted - held)});
    }
    // The round's own cost: not the time it waited for other micro-batches' rounds. A
    // catch-up round counts only for what it cost beyond a usual one (CostModel).
    costs_.add_round({static_cast<int32_t>(b.items.size()), draft_steps, window_tokens, t.draft_ms, t.verify_ms,
                      wall - queued, catch_up});
    planner().observe(observed);
    observe_views(b);
    for (RoundItem& item : b.items) {
      auto it = requests_.find(item.request);
      if (it == requests_.end()) continue;
      Request& r = it->second;
      r.stats.draft_ms += t.draft_ms;
      r.stats.prefill_ms += t.draft_prefill_ms;
      r.stats.verify_ms += t.verify_ms;
      (item.partial ? r.stats.view.partial_verify_ms : r.stats.view.full_verify_ms) += t.verify_ms;
      r.stats.commit_ms += t.reserve_ms + t.commit_ms;
      r.stats.messaging_ms += messaging;
      r.stats.queued_ms += queued;
      if (!item.error.empty()) {
        finish(item.request, FinishReason::error, item.error);
        continue;
      }
      apply_verdict(item.request, item);
    }
    step();
  }

  /// The verify_view slot: each sequence's view this round. A partial view the scheduler
  /// cannot give safely becomes a full round (counted by reason); a full round after
  /// partial ones re-verifies what they left (actors/view_rounds.h).
  void plan_views(RoundBatch& round) {
    std::vector<ViewSequence> seqs;
    for (const RoundItem& item : round.items) {
      const Request& r = requests_.at(item.request);
      seqs.push_back({item.request, r.position, r.view.verified, 1 + item.gamma, r.view.rounds_since_full,
                      r.view.retrieval_ready, item.sampling.temperature != 0.0f});
    }
    std::vector<ViewDecision> decisions(seqs.size());
    view_planner().decide(seqs, decisions);
    for (size_t i = 0; i < round.items.size(); ++i) {
      RoundItem& item = round.items[i];
      Request& r = requests_.at(item.request);
      const ViewDecision& d = decisions[i];
      item.draft_rewind = std::exchange(r.view.draft_rewind, -1);
      bool partial = d.partial, refresh = d.refresh;
      if (partial) {
        const std::string why = view_refusal(r.view, d, view_context(r, item));
        if (!why.empty()) {
          partial = false;
          refresh = refresh || why == "no_retrieval";
          ++forced_full_[why];
          ++r.stats.view.forced_full;
        }
      }
      item.partial = partial;
      item.final_verdicts = partial && d.final_verdicts;
      item.refresh = !partial && refresh;
      item.refresh_by_mass = item.refresh && d.by_mass;
      item.budget = d.budget;
      if (!partial) fill_full_round(r.view, item);
      item.verified = r.view.verified;
    }
  }

  ViewContext view_context(const Request& r, const RoundItem& item) const {
    const auto& p = r.spec.params;
    bool stops = r.stats.generated + r.view.provisional() >= p.max_tokens;
    const auto& eos = p.eos_ids.empty() ? cfg().eos_ids : p.eos_ids;
    for (int32_t i = 0; i < r.view.provisional() && p.stop_at_eos; ++i)
      stops = stops || std::find(eos.begin(), eos.end(), r.view.provisional_begin()[i]) != eos.end();
    return {r.position, cfg().block_size, item.sampling.temperature != 0.0f, stops,
            cfg().max_positions - r.position <= largest_window(cfg().max_gamma), !r.recompute.empty()};
  }

  void observe_views(const RoundBatch& b) {
    std::vector<ViewObservation> observed;
    for (const RoundItem& item : b.items)
      if (item.error.empty()) {
        const int32_t p = static_cast<int32_t>(item.provisional.size());
        const bool rolled = !item.partial && item.accepted < p;
        observed.push_back({item.request, item.partial, static_cast<int32_t>(item.drafts.size()),
                            rolled ? 0 : item.accepted - p, rolled ? p - item.accepted : 0});
      }
    view_planner().observe(observed);
  }

  /// Streams the round's tokens (d_1..d_k, then the target's own; SpecPV: what its view
  /// settles, actors/view_rounds.h), stopping at the first stop condition: tokens after
  /// it are never sent.
  void apply_verdict(RequestId id, RoundItem& item) {
    Request& r = requests_.at(id);
    r.rng = item.rng;
    const ViewOutcome v = settle_round(r.view, item, r.position);
    r.stats.add_round(v.proposed, v.accepted);
    ViewStats& vs = r.stats.view;
    const HostViewTraffic& h = item.host_view;
    (item.partial ? vs.partial_host_bytes : vs.full_host_bytes) += h.streamed_bytes;
    vs.view_copy_bytes += h.copy_bytes;
    vs.view_host_blocks += h.copied_blocks;
    vs.view_dropped_blocks += h.dropped_blocks;
    vs.view_copy_refusals += h.copies_refused ? 1 : 0;
    vs.host_fallbacks += h.fallback ? 1 : 0;
    if (item.partial) {
      ++(item.final_verdicts ? vs.approximate_rounds : vs.exact_rounds);
      vs.partial_proposed += v.proposed;
      vs.partial_accepted += v.accepted;
    } else {
      ++vs.full_rounds;
      vs.full_proposed += v.proposed;
      vs.full_accepted += v.accepted;
      vs.refreshes += item.refresh ? 1 : 0;
      vs.rollbacks += v.rolled_back > 0 ? 1 : 0;
      vs.rolled_back_tokens += v.rolled_back;
    }
    if (item.drafted_ahead) ++r.stats.drafted_ahead;
    const std::vector<int32_t>& produced = v.to_stream;
    TokenDelta delta;
    delta.id = id;
    bool finished = false;
    FinishReason reason = FinishReason::length;
    for (int32_t token : produced) {
      OutputStream::Step s = r.out->push(token);
      delta.tokens.push_back(token);
      delta.text += s.text;
      if (s.finished) {
        finished = true;
        reason = s.reason;
        break;
      }
    }
    r.stats.generated += static_cast<int64_t>(delta.tokens.size());
    if (r.spec.sink && !delta.tokens.empty()) r.spec.sink->on_delta(delta);
    // A failed kv_write commit leaves the decided tokens out of the pool: the next window
    // recomputes them before its pending token.
    if (item.kv_redo) {
      r.recompute = item.recompute;
      r.recompute.push_back(item.pending);
      const std::vector<int32_t> chain = item.chain();
      r.recompute.insert(r.recompute.end(), chain.begin(), chain.begin() + item.accepted);
    } else {
      r.recompute.clear();
    }
    r.position = v.new_position;
    r.pending = item.next_token;
    r.appended = v.appended;
    if (finished) return finish(id, reason);
    if (r.cancelled) return finish(id, FinishReason::cancelled);
    // Held-back tokens are settled by a full round first (plan_views forces it in time).
    if (r.position >= cfg().max_positions && r.view.provisional() == 0) return finish(id, FinishReason::context);
  }

  void finish(RequestId id, FinishReason reason, const std::string& error = {}) {
    auto it = requests_.find(id);
    if (it == requests_.end()) return;
    Request& r = it->second;
    Completion c;
    c.id = id;
    if (!r.out->finished()) {
      OutputStream::Step s = r.out->finish(reason);
      if (!s.text.empty() && r.spec.sink) r.spec.sink->on_delta({id, {}, s.text});
    }
    c.reason = error.empty() ? reason : FinishReason::error;
    c.error_code = error.empty() ? "" : "internal";
    c.error = error;
    c.tokens = r.out->tokens();
    c.text = r.out->text();
    r.stats.wall_ms = r.clock.elapsed_ms();
    c.stats = r.stats;
    if (r.running) {
      send(d_.peers->kv_router, ReleaseWork{{r.seq}});
      running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
    }
    planner().forget(id);
    view_planner().forget(id);
    if (r.budgeted) {
      send(d_.peers->draft, DraftFinish{{id}});
      budget_used_ -= r.budget_blocks;
    }
    counters_.merge(r.stats);
    auto sink = r.spec.sink;
    requests_.erase(it);
    if (sink) sink->on_complete(c);
  }

  SpecStats global_stats() const {
    SpecStats s = counters_;
    s.accepted_per_round.clear();
    s.prefill_ms = global_times_.prefill_ms;
    s.draft_ms = global_times_.draft_ms;
    s.verify_ms = global_times_.verify_ms;
    s.commit_ms = global_times_.commit_ms;
    s.messaging_ms = global_times_.messaging_ms;
    s.queued_ms = global_times_.queued_ms;
    s.draft_failures = global_times_.draft_failures;
    s.overlapped_rounds = overlapped_rounds_;
    s.max_rounds_in_flight = max_rounds_in_flight_;
    return s;
  }

  VerifyPlanner& planner() { return d_.planner ? *d_.planner : fixed_; }
  ViewPlanner& view_planner() { return d_.view_planner ? *d_.view_planner : full_view_; }

  SchedulerDeps d_;
  FixedGammaPlanner fixed_;
  FullViewPlanner full_view_;
  std::map<std::string, int64_t> forced_full_;  // partial views asked for and not given, by reason
  int64_t plain_measured_ = 0;  // rounds run without drafts to measure them (CostModel::plain_due)
  CostModel costs_;
  std::map<RequestId, Request> requests_;
  std::deque<RequestId> waiting_;
  std::vector<RequestId> running_;
  bool admitting_ = false;     // an admission batch in flight
  int64_t overlapped_rounds_ = 0, max_rounds_in_flight_ = 0;
  int64_t next_batch_ = 0, next_round_ = 0;
  int64_t budget_used_ = 0;
  /// A round in flight: since it was sent, and its micro-batch slot.
  struct InFlight {
    Stopwatch clock;
    int32_t slot = 0;
  };
  std::map<int64_t, InFlight> in_flight_;  // the rounds in flight, by round
  StageClock stage_;
  SpecStats counters_;      // merged per-request counters of finished requests
  SpecStats global_times_;  // per-batch times (a round counts once, however many requests)
};

}  // namespace

scheduler_actor spawn_scheduler(caf::actor_system& system, SchedulerDeps deps) {
  return system.spawn<Scheduler>(std::move(deps));
}

}  // namespace specpipe::actors
