#include "actors/view_rounds.h"

#include <algorithm>

namespace specpipe::actors {

std::string view_refusal(const ViewState& s, const ViewDecision& d, const ViewContext& c) {
  if (c.sampled) return "sampled";
  if (c.kv_redo) return "kv_redo";
  if (!s.retrieval_ready) return "no_retrieval";
  // Once a token is held back, a final (approximate) verdict could stream tokens built
  // on it: a full round settles the held ones first.
  if (d.final_verdicts && s.provisional() > 0) return "mode_switch";
  if (!d.final_verdicts && c.held_would_stop) return "stop_pending";
  if (c.near_context_end) return "context_end";
  if (c.position - s.verified > d.budget.buffer_tokens) return "buffer_full";
  const int64_t B = c.block_size;
  const int64_t view = (d.budget.sink_tokens + B - 1) / B * B + int64_t{d.budget.retrieval_blocks} * B +
                       std::max<int64_t>(d.budget.window_tokens, c.position - s.verified) + B;
  if (view >= c.position) return "covers_context";
  return {};
}

void fill_full_round(const ViewState& s, RoundItem& item) {
  if (s.since_full.empty()) return;
  const auto f = static_cast<size_t>(s.final_count);
  item.rewind_to = s.verified;
  item.recompute.assign(s.since_full.begin(), s.since_full.begin() + static_cast<std::ptrdiff_t>(f));
  item.pending = s.since_full[f];
  item.provisional.assign(s.since_full.begin() + static_cast<std::ptrdiff_t>(f) + 1, s.since_full.end());
}

ViewOutcome settle_round(ViewState& s, const RoundItem& item, int32_t position) {
  ViewOutcome o;
  const auto k = item.accepted;
  o.proposed = static_cast<int32_t>(item.drafts.size());
  if (item.partial) {
    // Tokens past the verified prefix: streamed if final, else held back.
    std::vector<int32_t> produced(item.drafts.begin(), item.drafts.begin() + k);
    produced.push_back(item.next_token);
    if (s.since_full.empty()) s.since_full.push_back(item.pending);
    s.since_full.insert(s.since_full.end(), produced.begin(), produced.end());
    if (item.final_verdicts) {
      s.final_count += static_cast<int32_t>(produced.size());
      o.to_stream = produced;
    }
    o.accepted = k;
    o.appended = std::move(produced);
    o.new_position = position + k + 1;
    ++s.rounds_since_full;
    return o;
  }
  // A full round: the K/V now hold exactly the verified tokens.
  const int32_t p = static_cast<int32_t>(item.provisional.size());
  const int32_t start = item.rewind_to >= 0 ? item.rewind_to : position;
  o.new_position = start + item.layout().committed(k);
  if (k >= p) {
    o.to_stream = item.provisional;
    o.to_stream.insert(o.to_stream.end(), item.drafts.begin(), item.drafts.begin() + (k - p));
    o.to_stream.push_back(item.next_token);
    o.accepted = k - p;
    o.appended.assign(item.drafts.begin(), item.drafts.begin() + (k - p));
    o.appended.push_back(item.next_token);
  } else {
    // Rollback: the target disagrees with provisional token k; its own token replaces
    // it, and the drafter forgets everything after the last agreed token.
    o.to_stream.assign(item.provisional.begin(), item.provisional.begin() + k);
    o.to_stream.push_back(item.next_token);
    o.rolled_back = p - k;
    o.appended = o.to_stream;
    s.draft_rewind = start + item.layout().committed(0);
  }
  s.verified = o.new_position;
  s.since_full.clear();
  s.final_count = 0;
  s.rounds_since_full = 0;
  if (item.refresh) s.retrieval_ready = true;
  return o;
}

}  // namespace specpipe::actors
