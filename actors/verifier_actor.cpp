#include "actors/verifier_actor.h"

#include <caf/all.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "actors/stage_clock.h"
#include "core/error.h"
#include "core/timer.h"
#include "pipeline/acceptance.h"
#include "kvstore/partial_view.h"
#include "model/device_rows_to_host.h"
#include "pipeline/prefill.h"

namespace specpipe::actors {
namespace {

/// Reduces one refreshing window's queries layer by layer during the forward (QuerySums:
/// where the queries are - on a device backend, on the device, and only their handle
/// comes here); the retrieval actor scores the blocks with them after it.
class QuerySumsTap final : public QueryTap {
 public:
  QuerySumsTap(SummaryShape shape, int32_t num_heads, RetrievalQuery query, bool device_sums)
      : shape_(shape), num_heads_(num_heads), device_sums_(device_sums), query_(std::move(query)) {
    query_.layers.resize(static_cast<size_t>(shape.num_layers));
  }
  void on_queries(int32_t layer, const float* q, int32_t n, int64_t ld) override {
    query_.layers.at(static_cast<size_t>(layer)) = QuerySums::of(shape_, q, n, ld, num_heads_);
  }
  bool wants_device_sums() const override { return device_sums_; }
  void on_device_sums(int32_t handle) override {
    query_.device_sums = handle;
    query_.layers.clear();
  }
  bool wants_block_mass() const override { return query_.by_mass; }
  void on_block_mass(int32_t layer, const float* mass, int32_t n, int32_t kv_heads, int32_t blocks) override {
    query_.mass.resize(static_cast<size_t>(shape_.num_layers));
    query_.mass.at(static_cast<size_t>(layer)) = block_mass_scores(mass, n, kv_heads, blocks);
  }
  RetrievalQuery take() { return std::move(query_); }

 private:
  SummaryShape shape_;
  int32_t num_heads_;
  bool device_sums_;
  RetrievalQuery query_;
};

/// Everything the verifier keeps between messages: scratch that is reused.
struct VerifierState {
  VerifierDeps deps;
  StageClock stage;
  Logits logits;
  std::vector<ForwardWindow> windows;
  std::vector<std::vector<int32_t>> window_tokens;
  std::vector<std::vector<float>> q_rows;
  /// Sampled verdicts asked of the target (ForwardModel::computes_sampled_verdicts): per
  /// round item, its request and uniforms (drawn from a copy of the item's Rng).
  std::vector<SampledVerdictRequest> verdicts;
  std::vector<std::vector<double>> verdict_u;
  /// Drafts read from the drafter's device by the forward: where, and whose (item, draft).
  std::vector<ForwardModel::PlacedToken> placed;
  std::vector<std::pair<size_t, size_t>> placed_drafts;
  /// SpecPV (only with a verify_view plugin): each sequence's retrieved blocks per layer,
  /// the retrieval actor's latest answer, which its partial views read.
  std::map<SeqId, std::vector<std::vector<int32_t>>> retrieved;
  std::vector<PrefixView> views;              // per round item
  std::vector<std::unique_ptr<QuerySumsTap>> taps;
  std::span<const int32_t> retrieved_of(SeqId seq, int32_t layer) const {
    auto it = retrieved.find(seq);
    return it == retrieved.end() ? std::span<const int32_t>{} : it->second.at(static_cast<size_t>(layer));
  }
  /// The target keeps retrieval on the device (ForwardModel::device_retrieval): refresh
  /// taps leave their sums there for it.
  bool device_sums = false;
};

/// One layer's view as pool blocks. Blocks below the host boundary are read from the
/// sequence's view copies (KvStore::set_view_copies, made after its last refresh); one
/// with no copy (it moved to the host since) is left out of the view, counted - a
/// partial round never streams host K/V. Returns false when the view's last block has
/// no pool block: the round then reads the whole prefix.
bool host_view_layer(const KvStore& kv, SeqId seq, int32_t layer, std::span<const int32_t> blocks, int32_t length,
                     std::vector<int32_t>& pool_blocks, int32_t& view_length_out, HostViewTraffic& traffic) {
  const int32_t B = kv.config().block_size;
  const int32_t on_host = kv.host_blocks(seq);
  const std::span<const int32_t> table = kv.block_table(seq);
  int32_t kept = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int32_t b = blocks[i];
    int32_t pool = b < on_host ? kv.view_copy(seq, layer, b) : table[static_cast<size_t>(b)];
    if (pool < 0) {
      if (i + 1 == blocks.size()) return false;
      ++traffic.dropped_blocks;
      continue;
    }
    if (b < on_host) ++traffic.copied_blocks;
    pool_blocks.push_back(pool);
    ++kept;
  }
  view_length_out = (kept - 1) * B + (length - blocks.back() * B);
  return true;
}

/// The SpecPV side of a round item before its forward: a partial round gets its view
/// (null when the view would be the whole prefix: then it reads all of it, still a
/// partial round for the scheduler); a refreshing full round gets a query tap whose sums
/// go to the retrieval actor after the forward.
void prepare_view(VerifierState& st, RoundItem& it, ForwardWindow& w, size_t i) {
  const KvStore& kv = *st.deps.kv;
  const int32_t B = kv.config().block_size;
  const int32_t length = kv.length(it.seq);
  const int32_t on_host = kv.host_blocks(it.seq);
  if (it.partial) {
    // Host tier: without pool copies of its host blocks (the pool could not hold them)
    // the round reads the whole prefix, streamed - a full verdict, counted.
    if (on_host > 0 && kv.view_copies_refused(it.seq)) {
      it.host_view.fallback = true;
      return;
    }
    PrefixView& view = st.views[i];
    view.pool_blocks.assign(static_cast<size_t>(kv.config().num_layers), {});
    view.lengths.assign(static_cast<size_t>(kv.config().num_layers), 0);
    const std::span<const int32_t> table = kv.block_table(it.seq);
    HostViewTraffic traffic;
    for (int32_t layer = 0; layer < kv.config().num_layers; ++layer) {
      const auto blocks = view_blocks(length, it.verified, B, it.budget, st.retrieved_of(it.seq, layer));
      if (!blocks) return;  // the whole prefix: no view
      const auto l = static_cast<size_t>(layer);
      if (on_host > 0) {
        if (!host_view_layer(kv, it.seq, layer, *blocks, length, view.pool_blocks[l], view.lengths[l], traffic)) {
          it.host_view.fallback = true;
          return;
        }
        continue;
      }
      for (int32_t b : *blocks) view.pool_blocks[l].push_back(table[static_cast<size_t>(b)]);
      view.lengths[l] = view_length(*blocks, length, B);
    }
    it.host_view.copied_blocks = traffic.copied_blocks;
    it.host_view.dropped_blocks = traffic.dropped_blocks;
    w.view = &view;
  } else if (it.refresh) {
    const int32_t first = (it.budget.sink_tokens + B - 1) / B;
    const int32_t last = recent_first_block(length, length, B, it.budget.window_tokens);
    const ModelConfig& c = st.deps.target->config();
    st.taps[i] = std::make_unique<QuerySumsTap>(
        SummaryShape{c.num_layers, c.num_kv_heads, c.head_dim, B}, c.num_heads,
        RetrievalQuery{it.seq, std::min(it.verified, length), it.budget.retrieval_blocks, first, last, {}, -1,
                       it.refresh_by_mass, {}},
        st.device_sums);
    w.query_tap = st.taps[i].get();
  }
}

/// After a refresh of a sequence with host-tier blocks: per layer, the blocks its next
/// partial views read - sink, retrieved, and the recent region as it is now - for the
/// kv-router to copy those on the host into the pool (KvStore::set_view_copies).
void request_view_copies(const VerifierState& st, RoundItem& it) {
  const KvStore& kv = *st.deps.kv;
  if (kv.host_blocks(it.seq) == 0 && kv.view_copy_blocks(it.seq) == 0 && !kv.view_copies_refused(it.seq)) return;
  const int32_t B = kv.config().block_size;
  const int32_t length = kv.length(it.seq);
  const int32_t total = (length + B - 1) / B;
  const int32_t sink = std::min(total, (it.budget.sink_tokens + B - 1) / B);
  const int32_t recent = recent_first_block(length, length, B, it.budget.window_tokens);
  it.view_sets.assign(static_cast<size_t>(kv.config().num_layers), {});
  for (int32_t layer = 0; layer < kv.config().num_layers; ++layer) {
    std::vector<int32_t>& set = it.view_sets[static_cast<size_t>(layer)];
    for (int32_t b = 0; b < sink; ++b) set.push_back(b);
    for (int32_t b : st.retrieved_of(it.seq, layer))
      if (b >= sink && b < total) set.push_back(b);
    for (int32_t b = std::max(sink, recent); b < total; ++b) set.push_back(b);
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
  }
}

/// Host-tier K/V bytes each window's forward streamed: the ring's measured loads of
/// that forward, shared among the windows that read a host prefix (no view) in
/// proportion to it. Loads no window should have made are shared by all, so they show.
void attribute_streamed(const VerifierState& st, RoundBatch& b, const std::vector<size_t>& owner, int64_t loaded) {
  const KvStore& kv = *st.deps.kv;
  if (loaded <= 0 || owner.empty() || !kv.host_tier()) return;
  std::vector<int64_t> expected(owner.size(), 0);
  int64_t sum = 0;
  for (size_t w = 0; w < owner.size(); ++w) {
    const RoundItem& it = b.items[owner[w]];
    if (!st.windows[w].view && kv.contains(it.seq))
      expected[w] = int64_t{kv.host_blocks(it.seq)} * kv.host_tier()->block_bytes();
    sum += expected[w];
  }
  for (size_t w = 0; w < owner.size(); ++w)
    b.items[owner[w]].host_view.streamed_bytes =
        sum > 0 ? loaded * expected[w] / sum : loaded / static_cast<int64_t>(owner.size());
}

void prefill(VerifierState& st, AdmitBatch& b) {
  Stopwatch clock;
  std::vector<PrefillItem> items;
  for (AdmitItem& it : b.items) {
    if (!it.error.empty() || !it.layerwise) continue;
    // Offload's layer-wise prefill, one sequence at a time; a refusal goes back to the
    // kv-router, which gives the booking back and prefills it chunk by chunk.
    try {
      it.layerwise_refused = !run_layerwise(*st.deps.target, *st.deps.kv, it.seq, it.context, st.logits);
    } catch (const std::exception& e) {
      it.error = e.what();
    }
  }
  for (const AdmitItem& it : b.items)
    if (it.error.empty() && !it.layerwise && it.prefilled < it.prefill_end)
      items.push_back({it.seq, std::span<const int32_t>(it.context)
                                   .subspan(static_cast<size_t>(it.prefilled),
                                            static_cast<size_t>(it.prefill_end - it.prefilled))});
  try {
    if (!items.empty()) prefill_windows(*st.deps.target, *st.deps.kv, *st.deps.sink, items, st.deps.prefill_chunk, st.logits);
  } catch (const std::exception& e) {
    for (AdmitItem& it : b.items)
      if (it.error.empty()) it.error = e.what();
  }
  b.prefill_ms += clock.elapsed_ms();
}

/// Drafts the drafter left on its device (RoundItem::device_drafts), before the forward:
/// host memory (a host drafter) is read now, after its event; device memory the forward
/// reads on the device behind the drafts' event (ForwardModel::place_next_tokens), and
/// fill_placed_drafts takes their values from its results - no host sync of their own.
void place_drafts(VerifierState& st, RoundBatch& b, const std::vector<size_t>& owner) {
  st.placed.clear();
  st.placed_drafts.clear();
  std::vector<Event> ready;
  for (size_t w = 0; w < owner.size(); ++w) {
    RoundItem& it = b.items[owner[w]];
    const DeviceIds& d = it.device_drafts;
    if (!d.ids) continue;
    std::vector<int32_t>& window = st.window_tokens[owner[w]];
    const size_t first = window.size() - it.drafts.size();  // the drafts end the window
    if (d.device.kind == DeviceKind::cpu) {
      d.ready.synchronize();
      for (size_t k = 0; k < it.drafts.size(); ++k)
        window[first + k] = it.drafts[k] = d.ids[k * static_cast<size_t>(d.stride)];
      it.device_drafts = {};
      continue;
    }
    if (ready.empty() || !ready.back().same(d.ready)) ready.push_back(d.ready);
    for (size_t k = 0; k < it.drafts.size(); ++k) {
      st.placed.push_back(
          {static_cast<int32_t>(w), static_cast<int32_t>(first + k), d.ids + k * static_cast<size_t>(d.stride)});
      st.placed_drafts.emplace_back(owner[w], k);
    }
  }
  if (!st.placed.empty()) st.deps.target->place_next_tokens(st.placed, ready);
}

/// After the forward: the drafts it read on the device, into their items.
void fill_placed_drafts(VerifierState& st, RoundBatch& b) {
  if (st.placed.empty()) return;
  const std::span<const int32_t> values = st.deps.target->placed_tokens();
  if (values.size() != st.placed.size())
    fail(ErrorCode::internal, "verifier: the forward returned {} drafts read on the device, not {}", values.size(),
         st.placed.size());
  for (size_t k = 0; k < values.size(); ++k) {
    RoundItem& it = b.items[st.placed_drafts[k].first];
    it.drafts[st.placed_drafts[k].second] = values[k];
    it.device_drafts = {};
  }
}

/// Whether item `it`'s verdict can be asked of the target with its logits rows
/// (SampledVerdictRequest): sampled at a pure temperature, drafts on the host or on the
/// target's device (placed into its window: the target reads them there), no
/// provisional tokens, each draft with q(d) > 0 (accept_sampling reports the others).
bool verdict_on_target(const RoundItem& it, const TensorView& q, int32_t vocab, Device target) {
  const cpu::SamplingParams& p = it.sampling;
  if (p.temperature == 0.0f || !std::isfinite(p.temperature) || p.top_k != 0 || p.top_p < 1.0f) return false;
  if (!it.provisional.empty()) return false;
  if (it.device_drafts.ids != nullptr && !(it.device_drafts.device == target && target.kind != DeviceKind::cpu))
    return false;
  for (const int32_t d : it.drafts)
    if (d < 0 || d >= vocab) return false;
  if (it.q_row < 0) return true;
  if (q.shape.size() != 2 || q.shape[1] != vocab) return false;
  for (size_t d = 0; d < it.drafts.size(); ++d)
    if (!(q.as<float>()[(it.q_row + static_cast<int64_t>(d)) * vocab + it.drafts[d]] > 0.0f)) return false;
  return true;
}

/// Asks the target for `it`'s sampled verdict on its window: the uniforms are the next
/// drafts + 1 of its Rng (a copy: the verdict says how many it used).
void ask_verdict(VerifierState& st, size_t i, RoundItem& it, const TensorView& q, int32_t vocab) {
  Rng ahead = it.rng;
  std::vector<double>& u = st.verdict_u[i];
  u.resize(it.drafts.size() + 1);
  for (double& x : u) x = ahead.uniform();
  // Drafts left on the target's device (verdict_on_target): it.drafts holds placeholders
  // until the forward; the target reads the placed ids (place_drafts) for its verdict.
  st.verdicts[i] = {it.layout().verdict_row(), it.drafts,
                    it.q_row >= 0 ? q.as<float>() + it.q_row * static_cast<int64_t>(vocab) : nullptr, it.q_device,
                    it.device_drafts.ids != nullptr, u, it.sampling.temperature};
  st.windows.back().verdict = &st.verdicts[i];
}

void verify(VerifierState& st, RoundBatch& b) {
  Stopwatch clock;
  // Sampled verdicts where the target's rows are: the draft distributions are read
  // before the forward then (on the host; a host consumer waits for the producer).
  const bool target_verdicts = st.deps.target->computes_sampled_verdicts() &&
                               std::any_of(b.items.begin(), b.items.end(), [](const RoundItem& it) {
                                 return it.error.empty() && it.sampling.temperature != 0.0f;
                               });
  const int32_t vocab = st.deps.target->config().vocab_size;
  TensorView q_early;
  if (target_verdicts && !b.q.empty()) q_early = b.q.acquire(Stream{});
  st.verdicts.assign(b.items.size(), {});
  st.verdict_u.resize(b.items.size());
  st.windows.clear();
  st.window_tokens.assign(b.items.size(), {});
  std::vector<size_t> owner;
  std::vector<WindowPlacement> placements;
  st.views.assign(b.items.size(), {});
  st.taps.clear();
  st.taps.resize(b.items.size());
  if (st.deps.partial_views) std::erase_if(st.retrieved, [&](const auto& e) { return !st.deps.kv->contains(e.first); });
  try {
    for (size_t i = 0; i < b.items.size(); ++i) {
      RoundItem& it = b.items[i];
      if (!it.error.empty()) continue;
      st.window_tokens[i] = it.window();
      // Greedy verdicts need each row's argmax only (a device returns just those).
      st.windows.push_back({it.seq, st.window_tokens[i], LogitsMode::all, -1, it.sampling.temperature == 0.0f});
      if (target_verdicts && verdict_on_target(it, q_early, vocab, st.deps.target->device()))
        ask_verdict(st, i, it, q_early, vocab);
      // Owned before its view is prepared: an error there fails this item too (it once
      // went on without a verdict, its next token -1, into both models' next forwards).
      owner.push_back(i);
      if (st.deps.partial_views && (it.partial || it.refresh)) prepare_view(st, it, st.windows.back(), i);
      placements.push_back({it.seq, st.deps.kv->length(it.seq), static_cast<int32_t>(st.window_tokens[i].size())});
    }
    if (!st.windows.empty()) {
      st.deps.sink->begin_round(placements);
      const int64_t loaded = st.deps.target->ring_stats().bytes_loaded;
      // The forward's one sync also covers the drafter's work ahead (its next propose
      // then collects it without a sync).
      st.deps.target->join_next_forward(b.draft_ahead);
      place_drafts(st, b, owner);
      st.deps.target->forward(st.windows, *st.deps.kv, *st.deps.sink, st.logits);
      fill_placed_drafts(st, b);
      attribute_streamed(st, b, owner, st.deps.target->ring_stats().bytes_loaded - loaded);
    }
  } catch (const std::exception& e) {
    st.deps.sink->abort_round();
    for (size_t i : owner) b.items[i].error = e.what();
    b.times.verify_ms += clock.elapsed_ms();
    return;
  }
  // The draft distributions were produced on the draft actor's stream; they are read
  // here on the host (a host consumer waits for the producer's event).
  const TensorView q = b.q.empty() || target_verdicts ? q_early : b.q.acquire(Stream{});
  for (size_t w = 0; w < owner.size(); ++w) {
    RoundItem& it = b.items[owner[w]];
    // Rows of recomputed tokens only rebuild their K/V; the verdict starts at pending.
    const int32_t first = it.layout().verdict_row();
    auto row = [&](int32_t i) { return st.logits.row(w, first + i); };
    try {
      Verdict v;
      if (it.sampling.temperature == 0.0f) {
        // SpecPV exact mode: provisional tokens are judged first, like drafts.
        v = accept_greedy_ids(it.chain(), [&](int32_t i) { return st.logits.argmax(w, first + i); },
                              st.logits.vocab());
      } else if (const SampledVerdict* sv = st.logits.verdict(w); sv && st.windows[w].verdict) {
        // Judged on the target's device: its Rng goes on by the uniforms the verdict used.
        v.accepted = sv->accepted;
        v.next_token = sv->next_token;
        for (size_t k = sampling_uniforms_used(v, it.drafts.size()); k > 0; --k) it.rng.uniform();
      } else {
        st.q_rows.assign(it.drafts.size(), {});
        if (it.q_device.data) {
          // Left on the drafter's device (the target's): read back to judge here.
          device_rows_to_host(*st.deps.target, it.q_device, it.drafts.size(), vocab, st.q_rows);
        } else if (it.q_row >= 0) {
          const int64_t q_vocab = q.shape[1];
          for (size_t d = 0; d < it.drafts.size(); ++d) {
            const float* src = q.as<float>() + (it.q_row + static_cast<int64_t>(d)) * q_vocab;
            st.q_rows[d].assign(src, src + q_vocab);
          }
        }
        v = accept_sampling(it.drafts, row, st.q_rows, it.sampling, it.rng);
      }
      it.accepted = v.accepted;
      it.next_token = v.next_token;
    } catch (const std::exception& e) {
      it.error = e.what();
    }
  }
  b.times.verify_ms += clock.elapsed_ms();
}

/// A refresh round's query sums, one per refreshing item that has a verdict (`items`:
/// their indices in the batch). Empty: no refresh, nothing to await.
RetrievalWork refresh_queries(VerifierState& st, const RoundBatch& b, std::vector<size_t>& items) {
  RetrievalWork work;
  items.clear();
  for (size_t i = 0; i < st.taps.size() && i < b.items.size(); ++i)
    if (st.taps[i] && b.items[i].error.empty()) {
      work.queries.push_back(st.taps[i]->take());
      items.push_back(i);
    }
  st.taps.clear();
  return work;
}

/// The retrieval actor's answer: the next partial views' blocks, and with the host tier
/// the view sets the kv-router has copied into the pool.
void apply_retrieval(VerifierState& st, RoundBatch& b, const std::vector<size_t>& items, RetrievalDone& done) {
  for (size_t i : items) {
    RoundItem& it = b.items[i];
    auto a = std::find_if(done.answers.begin(), done.answers.end(), [&](const RetrievalAnswer& x) { return x.seq == it.seq; });
    if (a == done.answers.end()) {
      it.error = "SpecPV retrieval: no answer for the sequence";
    } else if (!a->error.empty()) {
      it.error = a->error;
    } else if (a->selected) {
      st.retrieved[it.seq] = std::move(a->blocks);
      if (st.deps.kv->host_tier()) request_view_copies(st, it);
    }
  }
}

/// Waits for the offload actor's copies; a failed copy fails the batch's items.
template <typename Items>
void wait_for_moves(const CopyFence& fence, Items& items) {
  try {
    fence.wait();
  } catch (const std::exception& e) {
    for (auto& it : items)
      if (it.error.empty()) it.error = std::string("offload copy failed: ") + e.what();
  }
}

}  // namespace

verifier_actor::behavior_type verifier(verifier_actor::pointer self, VerifierDeps deps) {
  auto st = std::make_shared<VerifierState>();
  st->deps = std::move(deps);
  st->device_sums = st->deps.target && st->deps.target->device_retrieval() != nullptr;
  return {
      // The offload actor's moves are copied by the time the forward reads the host tier
      // or writes a pool block they free (one wait per forward on the CPU; on a device
      // the fence is empty and the ring orders them per layer).
      [self, st](PrefillWork& w) {
        wait_for_moves(w.fence, w.b.items);
        prefill(*st, w.b);
        self->send(st->deps.peers->kv_router, PrefillDone{std::move(w.b)});
        st->stage.busy_until_now();
      },
      [self, st](VerifyWork& w) {
        st->stage.arrive(w.b.times);
        // The round goes back to the kv-router (stamped for its hop: actors/stage_clock.h).
        auto done = [self, st](RoundBatch& b) {
          StageClock::leave(b.times);
          self->send(st->deps.peers->kv_router, VerifyDone{std::move(b)});
          st->stage.busy_until_now();
        };
        wait_for_moves(w.fence, w.b.items);
        verify(*st, w.b);
        std::vector<size_t> items;
        RetrievalWork work = refresh_queries(*st, w.b, items);
        if (work.queries.empty()) return done(w.b);
        // A SpecPV refresh round: one request for all its sequences and layers, awaited
        // (the retrieval actor reads the store and uses the model meanwhile: they are
        // lent to it, as the kv-router lends the store to the offload actor).
        auto held = std::make_shared<RoundBatch>(std::move(w.b));
        auto fail_items = [held, items](const std::string& why) {
          for (size_t i : items) held->items[i].error = why;
        };
        if (!st->deps.peers->retrieval) {
          fail_items("SpecPV retrieval: the pipeline has no retrieval actor");
          return done(*held);
        }
        self->request(st->deps.peers->retrieval, caf::infinite, std::move(work))
            .await(
                [st, held, items, done](RetrievalDone& answer) {
                  apply_retrieval(*st, *held, items, answer);
                  done(*held);
                },
                [held, fail_items, done](const caf::error& err) {
                  fail_items("SpecPV retrieval: the retrieval actor did not answer: " + caf::to_string(err));
                  done(*held);
                });
      },
  };
}

}  // namespace specpipe::actors
