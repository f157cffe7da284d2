#include "actors/verifier_actor.h"

#include <caf/all.hpp>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/timer.h"
#include "pipeline/acceptance.h"
#include "pipeline/prefill.h"

namespace specpipe::actors {
namespace {

/// Everything the verifier keeps between messages: scratch that is reused.
struct VerifierState {
  VerifierDeps deps;
  Logits logits;
  std::vector<ForwardWindow> windows;
  std::vector<std::vector<int32_t>> window_tokens;
  std::vector<std::vector<float>> q_rows;
};

void prefill(VerifierState& st, AdmitBatch& b) {
  Stopwatch clock;
  std::vector<PrefillItem> items;
  for (const AdmitItem& it : b.items)
    if (it.error.empty() && it.prefilled < it.prefill_end)
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

void verify(VerifierState& st, RoundBatch& b) {
  Stopwatch clock;
  st.windows.clear();
  st.window_tokens.assign(b.items.size(), {});
  std::vector<size_t> owner;
  std::vector<WindowPlacement> placements;
  for (size_t i = 0; i < b.items.size(); ++i) {
    RoundItem& it = b.items[i];
    if (!it.error.empty()) continue;
    st.window_tokens[i] = it.window();
    // Greedy verdicts need each row's argmax only (a device returns just those).
    st.windows.push_back({it.seq, st.window_tokens[i], LogitsMode::all, -1, it.sampling.temperature == 0.0f});
    placements.push_back({it.seq, st.deps.kv->length(it.seq), static_cast<int32_t>(st.window_tokens[i].size())});
    owner.push_back(i);
  }
  try {
    if (!st.windows.empty()) {
      st.deps.sink->begin_round(placements);
      st.deps.target->forward(st.windows, *st.deps.kv, *st.deps.sink, st.logits);
    }
  } catch (const std::exception& e) {
    st.deps.sink->abort_round();
    for (size_t i : owner) b.items[i].error = e.what();
    b.times.verify_ms += clock.elapsed_ms();
    return;
  }
  // The draft distributions were produced on the draft actor's stream; they are read
  // here on the host (a host consumer waits for the producer's event).
  const TensorView q = b.q.empty() ? TensorView{} : b.q.acquire(Stream{});
  for (size_t w = 0; w < owner.size(); ++w) {
    RoundItem& it = b.items[owner[w]];
    // Rows of recomputed tokens only rebuild their K/V; the verdict starts at pending.
    const auto first = static_cast<int32_t>(it.recompute.size());
    auto row = [&](int32_t i) { return st.logits.row(w, first + i); };
    try {
      Verdict v;
      if (it.sampling.temperature == 0.0f) {
        v = accept_greedy_ids(it.drafts, [&](int32_t i) { return st.logits.argmax(w, first + i); }, st.logits.vocab());
      } else {
        st.q_rows.assign(it.drafts.size(), {});
        if (it.q_row >= 0) {
          const int64_t vocab = q.shape[1];
          for (size_t d = 0; d < it.drafts.size(); ++d) {
            const float* src = q.as<float>() + (it.q_row + static_cast<int64_t>(d)) * vocab;
            st.q_rows[d].assign(src, src + vocab);
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

}  // namespace

verifier_actor::behavior_type verifier(verifier_actor::pointer self, VerifierDeps deps) {
  auto st = std::make_shared<VerifierState>();
  st->deps = std::move(deps);
  return {
      [self, st](PrefillWork& w) {
        prefill(*st, w.b);
        self->send(st->deps.peers->kv_router, PrefillDone{std::move(w.b)});
      },
      [self, st](VerifyWork& w) {
        verify(*st, w.b);
        self->send(st->deps.peers->kv_router, VerifyDone{std::move(w.b)});
      },
  };
}

}  // namespace specpipe::actors
