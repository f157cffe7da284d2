#include "actors/draft_actor.h"

#include <caf/all.hpp>

#include <spdlog/spdlog.h>

#include <cstring>
#include <map>
#include <utility>

#include "actors/stage_clock.h"
#include "core/timer.h"

namespace specpipe::actors {
namespace {

struct DraftState {
  DraftDeps deps;
  std::vector<DraftItem> items;
  std::vector<Proposal> proposals;
  std::map<RequestId, std::string> failed_starts;  ///< start() failed: no drafts for these
  /// The drafter's prefill at admission (ModelDrafter::prefill_when_idle), outside every
  /// round: the next round reports it as prefill and takes none of it off its drafting.
  double start_prefill_ms = 0;
  StageClock stage;
};

void propose(DraftState& st, RoundBatch& b) {
  Stopwatch clock;
  std::vector<DraftItem>& items = st.items;
  std::vector<Proposal>& out = st.proposals;
  items.clear();
  for (RoundItem& it : b.items) {
    // A sequence the drafter could not take is still decoded, one token per round.
    const bool drafts_possible = !st.failed_starts.count(it.request);
    items.push_back({it.request, it.appended, drafts_possible ? it.gamma : 0, it.sampling, &it.rng, it.draft_rewind});
  }
  try {
    st.deps.drafter->round_slot(b.slot);
    st.deps.drafter->propose(items, out);
  } catch (const std::exception& e) {
    // Speculation is an optimisation: if the drafter fails, this round verifies no
    // drafts (a plain decode step for every sequence) and the output is unchanged.
    spdlog::warn("drafter {} failed, round {} runs without drafts: {}", st.deps.drafter->name(), b.round, e.what());
    out.assign(b.items.size(), Proposal{});
    ++b.times.draft_failures;
  }
  const double prefill_ms = st.deps.drafter->take_prefill_ms();  // inside this proposal
  b.times.draft_prefill_ms += prefill_ms + std::exchange(st.start_prefill_ms, 0.0);
  // Sampled drafts carry their distributions: one [rows, vocab] tensor for the batch.
  int64_t rows = 0, vocab = 0;
  for (const Proposal& p : out) {
    rows += static_cast<int64_t>(p.q.size());
    if (!p.q.empty()) vocab = static_cast<int64_t>(p.q.front().size());
  }
  if (rows > 0) b.q = TensorHandle::host(DType::f32, {rows, vocab});
  int64_t row = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    RoundItem& it = b.items[i];
    it.drafts = std::move(out[i].tokens);
    it.drafted_ahead = out[i].made_ahead;
    it.device_drafts = std::move(out[i].on_device);
    it.q_device = std::move(out[i].q_on_device);
    it.q_row = out[i].q.empty() ? -1 : static_cast<int32_t>(row);
    for (const auto& q : out[i].q) {
      std::memcpy(b.q.view().as<float>() + row * vocab, q.data(), q.size() * sizeof(float));
      ++row;
    }
  }
  // Recorded after the producing work, on the drafter's stream (CPU: complete).
  if (!b.q.empty()) b.q.ready = Event::record(st.deps.drafter->stream());
  b.times.draft_ms += clock.elapsed_ms() - prefill_ms;
}

}  // namespace

draft_actor::behavior_type draft(draft_actor::pointer self, DraftDeps deps) {
  auto st = std::make_shared<DraftState>();
  st->deps = std::move(deps);
  return {
      [st](DraftStart& w) {
        for (const AdmitItem& it : w.b.items) {
          try {
            st->deps.drafter->start(it.request, it.context);
          } catch (const std::exception& e) {
            spdlog::warn("drafter {} cannot take request {}, it runs without drafts: {}",
                         st->deps.drafter->name(), it.request, e.what());
            st->failed_starts.emplace(it.request, e.what());
          }
        }
        st->start_prefill_ms += st->deps.drafter->take_prefill_ms();
        st->stage.busy_until_now();
      },
      [self, st](DraftWork& w) {
        st->stage.arrive(w.b.times);
        propose(*st, w.b);
        // Work for the next round that overlaps this round's verification, launched before
        // the round goes on so that the round carries its event to the verifier.
        try {
          w.b.draft_ahead = st->deps.drafter->after_propose();
        } catch (const std::exception& e) {
          spdlog::warn("drafter {}: work ahead of the next round failed: {}", st->deps.drafter->name(), e.what());
        }
        StageClock::leave(w.b.times);
        self->send(st->deps.peers->kv_router, ReserveWork{std::move(w.b)});
        st->stage.busy_until_now();
      },
      [st](KvQuery) { return st->deps.drafter->kv_occupancy().value_or(KvOccupancy{}); },
      [st](DraftFinish& w) {
        for (RequestId r : w.requests) {
          st->deps.drafter->finish(r);
          st->failed_starts.erase(r);
        }
      },
  };
}

}  // namespace specpipe::actors
