#include "pipeline/model_drafter.h"

#include <algorithm>

#include "core/error.h"
#include "pipeline/draft_sampling.h"
#include "pipeline/prefill.h"

namespace specpipe {
namespace {
/// Sets up the draft model's pool (a device model allocates it here) and returns the
/// layout of the store that keeps its books.
KvStoreConfig draft_pool(ForwardModel& m, int32_t blocks, int32_t block_size) {
  m.allocate_kv_pool(blocks, block_size);
  KvStoreConfig c = m.kv_config(blocks, block_size);
  c.prefix_cache = false;
  return c;
}
}  // namespace

ModelDrafter::ModelDrafter(std::unique_ptr<ForwardModel> model, int32_t kv_blocks, int32_t block_size,
                           int32_t prefill_chunk)
    : model_(std::move(model)),
      kv_(draft_pool(*model_, kv_blocks, block_size)),
      writer_(kv_),
      prefill_chunk_(prefill_chunk) {}

ModelDrafter::Sequence& ModelDrafter::at(RequestId request) {
  auto it = sequences_.find(request);
  if (it == sequences_.end()) fail(ErrorCode::invalid_argument, "drafter: unknown request {}", request);
  return it->second;
}

void ModelDrafter::start(RequestId request, std::span<const int32_t> context) {
  if (sequences_.count(request)) fail(ErrorCode::invalid_argument, "drafter: request {} already started", request);
  check_fits(*model_, kv_, static_cast<int64_t>(context.size()) + 1);
  // Lazy: the prompt reaches the draft KV with the first proposal (catch_up), so a
  // sequence that a verify_plan strategy never speculates for costs no draft prefill.
  sequences_.emplace(request, Sequence{kv_.add_sequence({}), {context.begin(), context.end()}});
}

std::span<const int32_t> ModelDrafter::catch_up(Sequence& s) {
  const auto seen = kv_.tokens(s.seq);
  const auto mismatch = std::mismatch(seen.begin(), seen.end(), s.context.begin(), s.context.end());
  const auto keep = static_cast<int32_t>(mismatch.first - seen.begin());
  if (keep < kv_.length(s.seq)) kv_.truncate(s.seq, keep);
  return std::span<const int32_t>(s.context).subspan(static_cast<size_t>(keep));
}

ForwardWindow ModelDrafter::first_window(Sequence& s, size_t max_feed, int32_t extra, bool greedy) {
  std::span<const int32_t> feed = catch_up(s);
  if (feed.size() > max_feed) {
    // A long catch-up (the prompt, at the first proposal): chunked prefill of all but the
    // last token, which joins the batched window. Batch invariance makes this the same
    // as feeding it all at once.
    prefill(*model_, kv_, s.seq, feed.first(feed.size() - 1), prefill_chunk_, logits_);
    feed = feed.last(1);
  }
  kv_.reserve(s.seq, kv_.length(s.seq) + static_cast<int32_t>(feed.size()) + extra);
  return {s.seq, feed, LogitsMode::last, -1, greedy};
}

void ModelDrafter::propose(std::span<const DraftItem> items, std::vector<Proposal>& out) {
  out.assign(items.size(), Proposal{});
  std::vector<Sequence*> seqs;
  int32_t max_gamma = 0;
  bool chain = true;  // every item greedy with the same gamma
  for (const DraftItem& item : items) {
    Sequence& s = at(item.request);
    s.context.insert(s.context.end(), item.appended.begin(), item.appended.end());
    seqs.push_back(&s);
    max_gamma = std::max(max_gamma, item.gamma);
    chain = chain && item.sampling.temperature == 0.0f && item.gamma == items.front().gamma;
  }
  // A catch-up longer than this is prefilled on its own first, so that one step's
  // windows stay within the model's tokens per forward.
  const auto per_item = model_->max_forward_tokens() / static_cast<int32_t>(std::max<size_t>(items.size(), 1));
  const auto batch_feed = static_cast<size_t>(std::max(2, std::min(prefill_chunk_, per_item)));
  if (chain && max_gamma > 0) {
    propose_chain(items, seqs, batch_feed, out);
    return;
  }
  std::vector<ForwardWindow> windows;
  std::vector<size_t> owner;
  std::vector<int32_t> last_token(items.size());
  for (int32_t step = 0; step < max_gamma; ++step) {
    windows.clear();
    owner.clear();
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].gamma <= step) continue;
      Sequence& s = *seqs[i];
      const bool greedy = items[i].sampling.temperature == 0.0f;
      // Step 0 feeds what the draft KV has not seen; later steps the previous draft.
      if (step == 0) {
        windows.push_back(first_window(s, batch_feed, 0, greedy));
      } else {
        kv_.reserve(s.seq, kv_.length(s.seq) + 1);
        windows.push_back({s.seq, {&last_token[i], 1}, LogitsMode::last, -1, greedy});
      }
      owner.push_back(i);
    }
    if (windows.empty()) break;
    model_->forward(windows, kv_, writer_, logits_);
    for (size_t w = 0; w < windows.size(); ++w) {
      const size_t i = owner[w];
      kv_.commit(windows[w].seq, windows[w].tokens);
      Proposal& p = out[i];
      // Greedy drafts: the argmax (from the device when it ran there), as draft_sample.
      const bool greedy = items[i].sampling.temperature == 0.0f;
      if (greedy) q_scratch_.clear();
      const int32_t token = greedy ? logits_.argmax(w)
                                   : draft_sample(logits_.row(w), items[i].sampling, *items[i].rng, q_scratch_);
      p.tokens.push_back(token);
      if (!q_scratch_.empty()) p.q.push_back(q_scratch_);
      last_token[i] = token;
    }
  }
  // The drafts are the drafter's own guesses: they are not part of the context until
  // the target accepts them; the next round's catch_up trims what it rejected.
}

void ModelDrafter::propose_chain(std::span<const DraftItem> items, std::span<Sequence* const> seqs,
                                 size_t max_feed, std::vector<Proposal>& out) {
  const int32_t gamma = items.front().gamma;
  std::vector<ForwardWindow> windows;
  for (Sequence* s : seqs) windows.push_back(first_window(*s, max_feed, gamma - 1, /*greedy=*/true));
  model_->forward_greedy_chain(windows, gamma, kv_, writer_, chain_ids_);
  const size_t n = windows.size();
  for (size_t i = 0; i < n; ++i) {
    // The K/V of the catch-up and of every draft but the last (never fed) are in the
    // pool: commit them, as the step-by-step path does.
    kv_.commit(windows[i].seq, windows[i].tokens);
    for (int32_t step = 0; step < gamma; ++step) out[i].tokens.push_back(chain_ids_[static_cast<size_t>(step) * n + i]);
    kv_.commit(windows[i].seq, std::span<const int32_t>(out[i].tokens).first(static_cast<size_t>(gamma - 1)));
  }
}

void ModelDrafter::finish(RequestId request) {
  auto it = sequences_.find(request);
  if (it == sequences_.end()) return;
  kv_.release(it->second.seq);
  sequences_.erase(it);
}

}  // namespace specpipe
