#include "pipeline/model_drafter.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "core/timer.h"
#include "pipeline/draft_sampling.h"
#include "pipeline/prefill.h"
#include "pipeline/warm_start.h"

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

/// Whether a drafting item's drafts can come from a chain: greedy, or sampled at a pure
/// temperature (positive and finite, no top-k or top-p: cpu::sampling_distribution's
/// plain softmax), which ForwardModel::forward_sampled_chain draws. Others (and invalid
/// temperatures, which draft_sample reports) take the step-by-step path.
bool chain_samples(const cpu::SamplingParams& p, int32_t vocab) {
  if (p.temperature == 0.0f) return true;
  const bool top_k = p.top_k > 0 && p.top_k < vocab;
  return p.temperature > 0.0f && std::isfinite(p.temperature) && !top_k && !(p.top_p < 1.0f);
}

/// A chain's sampling inputs (ForwardModel::ChainSampling's spans point into them).
struct ChainDraws {
  std::vector<float> temperature;  ///< [windows]: 0 greedy
  std::vector<double> uniforms;    ///< [gamma x windows], step-major
  bool sampled() const {
    return std::any_of(temperature.begin(), temperature.end(), [](float t) { return t != 0.0f; });
  }
};

/// Window w (item owner[w]) draws in the step-by-step path's order: step by step, windows
/// in order, one uniform from its item's rng per draft of the item's own gamma (an rng
/// may be shared, so the order is what makes the draws the same).
ChainDraws chain_draws(std::span<const DraftItem> items, const std::vector<size_t>& owner, int32_t gamma) {
  const size_t n = owner.size();
  ChainDraws d{std::vector<float>(n, 0.0f), std::vector<double>(static_cast<size_t>(gamma) * n, 0.0)};
  for (size_t w = 0; w < n; ++w) d.temperature[w] = items[owner[w]].sampling.temperature;
  if (!d.sampled()) return d;
  for (int32_t step = 0; step < gamma; ++step)
    for (size_t w = 0; w < n; ++w)
      if (d.temperature[w] != 0.0f && items[owner[w]].gamma > step)
        d.uniforms[static_cast<size_t>(step) * n + w] = items[owner[w]].rng->uniform();
  return d;
}
}  // namespace

ModelDrafter::ModelDrafter(std::unique_ptr<ForwardModel> model, int32_t kv_blocks, int32_t block_size,
                           int32_t prefill_chunk, bool draft_ahead)
    : model_(std::move(model)),
      kv_(draft_pool(*model_, kv_blocks, block_size)),
      writer_(kv_),
      prefill_chunk_(prefill_chunk),
      draft_ahead_(draft_ahead) {}

ModelDrafter::Sequence& ModelDrafter::at(RequestId request) {
  auto it = sequences_.find(request);
  if (it == sequences_.end()) fail(ErrorCode::invalid_argument, "drafter: unknown request {}", request);
  return it->second;
}

void ModelDrafter::start(RequestId request, std::span<const int32_t> context) {
  if (sequences_.count(request)) fail(ErrorCode::invalid_argument, "drafter: request {} already started", request);
  check_fits(*model_, kv_, static_cast<int64_t>(context.size()) + 1);
  // Lazy: the prompt reaches the draft KV with the first proposal (catch_up), so a
  // sequence that a verify_plan strategy never speculates for costs no draft prefill;
  // with prefill_when_idle, a sequence alone on a server that serves one at a time is
  // prefilled now (beside the target's prefill). "Alone" is not enough: under load,
  // requests of equal length finish in the same round and the next ones arrive one by
  // one, so the first of them would be prefilled while the others wait for the draft
  // actor, a prefill SCV does not need there (it plans plain rounds).
  const SeqId seq = kv_.add_sequence({});
  const Sequence& s = sequences_.emplace(request, Sequence{seq, {context.begin(), context.end()}}).first->second;
  const auto n = static_cast<int32_t>(context.size());
  if (!prefill_when_idle_ || sequences_.size() != 1 || last_round_sequences_ > 1 || n == 0 ||
      kv_.blocks_needed(seq, n) > kv_.free_blocks())
    return;
  const Stopwatch clock;
  kv_.reserve(seq, n);
  const std::vector<PrefillItem> items{{seq, s.context}};
  prefill_windows(*model_, kv_, writer_, items, prefill_chunk_, logits_);
  kv_.commit(seq, s.context);
  prefill_ms_ += clock.elapsed_ms();
}

std::span<const int32_t> ModelDrafter::catch_up(Sequence& s) {
  const auto seen = kv_.tokens(s.seq);
  const auto mismatch = std::mismatch(seen.begin(), seen.end(), s.context.begin(), s.context.end());
  const auto keep = static_cast<int32_t>(mismatch.first - seen.begin());
  if (keep < kv_.length(s.seq)) kv_.truncate(s.seq, keep);
  return std::span<const int32_t>(s.context).subspan(static_cast<size_t>(keep));
}

ForwardWindow ModelDrafter::first_window(Sequence& s, size_t max_feed, int32_t extra, bool greedy) {
  const std::span<const int32_t> feed = catch_up(s);
  // propose() prefilled every longer catch-up first, batched (prefill_long_catch_ups).
  if (feed.size() > max_feed)
    fail(ErrorCode::internal, "draft model: a catch-up of {} tokens reached a step window (at most {})", feed.size(),
         max_feed);
  kv_.reserve(s.seq, kv_.length(s.seq) + static_cast<int32_t>(feed.size()) + extra);
  return {s.seq, feed, LogitsMode::last, -1, greedy};
}

void ModelDrafter::propose(std::span<const DraftItem> items, std::vector<Proposal>& out) {
  settle_ahead();
  last_drafts_.clear();
  last_round_sequences_ = items.size();
  out.assign(items.size(), Proposal{});
  std::vector<Sequence*> seqs;
  int32_t longest = 0;    // the largest gamma of the batch: the steps drafted
  size_t drafting = 0;    // items with gamma > 0: the windows of each step
  // Every drafting item greedy or sampled at a pure temperature: one chain of the
  // longest gamma for all of them, each keeping its own gamma's drafts (a verify_plan
  // strategy gives sequences different gammas; a chain's extra rows cost little beside a
  // forward and a sync per step). Sampled items draw in the chain (propose_chain).
  bool chain = true;
  bool sampled = false;
  for (const DraftItem& item : items) {
    Sequence& s = at(item.request);
    if (item.rewind >= 0 && static_cast<size_t>(item.rewind) < s.context.size()) {
      // A rollback: catch_up trims the draft K/V past the kept context.
      s.context.resize(static_cast<size_t>(item.rewind));
      ahead_.erase(item.request);
    }
    s.context.insert(s.context.end(), item.appended.begin(), item.appended.end());
    seqs.push_back(&s);
    longest = std::max(longest, item.gamma);
    if (item.gamma > 0) {
      ++drafting;
      chain = chain && chain_samples(item.sampling, model_->config().vocab_size);
      sampled = sampled || item.sampling.temperature != 0.0f;
    }
  }
  // A catch-up longer than this is prefilled first (all such together), so that one
  // step's windows stay within the model's tokens per forward. Sequences at gamma 0 draft
  // nothing and feed nothing: their K/V catch up when they draft again.
  const auto per_item = model_->max_forward_tokens() / static_cast<int32_t>(std::max<size_t>(drafting, 1));
  const auto batch_feed = static_cast<size_t>(std::max(2, std::min(prefill_chunk_, per_item)));
  // What a draft-ahead chain left: matching K/V, and on a chain round maybe the drafts
  // (greedy ones: a sampled item draws its own).
  std::vector<bool> ready(items.size(), false);
  for (size_t i = 0; i < items.size(); ++i) {
    const bool greedy = items[i].sampling.temperature == 0.0f;
    out[i].made_ahead = ready[i] =
        adopt_ahead(items[i].request, *seqs[i], chain && greedy ? items[i].gamma : 0, out[i].tokens);
  }
  std::vector<bool> feeds(items.size(), false);
  for (size_t i = 0; i < items.size(); ++i) feeds[i] = items[i].gamma > 0 && !ready[i];
  prefill_long_catch_ups(seqs, feeds, batch_feed);
  if (chain && longest > 0) {
    // Draft-ahead (which runs before the verdict) is greedy only: a sampled chain's first
    // token is the verdict's and its uniforms follow the verdict's. Sampled drafts stay
    // on the device only with their q rows (launch_sampled_chain).
    if (!sampled && drafts_on_device_ && launch_chain(items, seqs, batch_feed, ready, out)) return;
    if (sampled && launch_sampled_chain(items, seqs, batch_feed, ready, out)) return;
    propose_chain(items, seqs, batch_feed, ready, longest, out);
    if (draft_ahead_) {
      for (size_t i = 0; i < items.size(); ++i)
        if (items[i].gamma > 0 && items[i].sampling.temperature == 0.0f)
          last_drafts_.emplace_back(items[i].request, out[i].tokens.back());
      last_gamma_ = longest;
    }
    return;
  }
  std::vector<ForwardWindow> windows;
  std::vector<size_t> owner;
  std::vector<int32_t> last_token(items.size());
  for (int32_t step = 0; step < longest; ++step) {
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

void ModelDrafter::prefill_long_catch_ups(std::span<Sequence* const> seqs, const std::vector<bool>& feeds,
                                          size_t max_feed) {
  std::vector<PrefillItem> long_feeds;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!feeds[i]) continue;
    const std::span<const int32_t> feed = catch_up(*seqs[i]);
    if (feed.size() <= max_feed) continue;
    // All but the last token, which joins the first step's window. Batch invariance
    // makes this the same as feeding it all at once.
    const SeqId seq = seqs[i]->seq;
    long_feeds.push_back({seq, feed.first(feed.size() - 1)});
    kv_.reserve(seq, kv_.length(seq) + static_cast<int32_t>(feed.size() - 1));
  }
  if (long_feeds.empty()) return;
  const Stopwatch clock;
  prefill_windows(*model_, kv_, writer_, long_feeds, prefill_chunk_, logits_);
  prefill_ms_ += clock.elapsed_ms();
  for (const PrefillItem& p : long_feeds) kv_.commit(p.seq, p.tokens);
}

void ModelDrafter::chain_windows(std::span<const DraftItem> items, std::span<Sequence* const> seqs, size_t max_feed,
                                 int32_t gamma, const std::vector<bool>& ready, std::vector<ForwardWindow>& windows,
                                 std::vector<size_t>& owner) {
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (ready[i] || items[i].gamma == 0) continue;
    windows.push_back(first_window(*seqs[i], max_feed, gamma - 1, /*greedy=*/true));
    owner.push_back(i);
  }
}

void ModelDrafter::propose_chain(std::span<const DraftItem> items, std::span<Sequence* const> seqs,
                                 size_t max_feed, const std::vector<bool>& ready, int32_t gamma,
                                 std::vector<Proposal>& out) {
  std::vector<ForwardWindow> windows;
  std::vector<size_t> owner;
  chain_windows(items, seqs, max_feed, gamma, ready, windows, owner);
  if (windows.empty()) return;
  const size_t n = windows.size();
  const ChainDraws draws = chain_draws(items, owner, gamma);
  const std::vector<float>& temperature = draws.temperature;
  const bool sampled = draws.sampled();
  if (sampled) {
    ForwardModel::ChainSampling sampling{draws.temperature, draws.uniforms};
    sampling.q_on_device = q_on_device_;
    model_->forward_sampled_chain(windows, gamma, sampling, kv_, writer_, chain_ids_, chain_q_);
  } else {
    model_->forward_greedy_chain(windows, gamma, kv_, writer_, chain_ids_);
  }
  const auto vocab = static_cast<size_t>(model_->config().vocab_size);
  // The q rows left on the device (keep_q_on_device, when the model kept them there).
  const DeviceRows q_device = sampled && chain_q_.empty() ? model_->sampled_chain_q() : DeviceRows{};
  if (sampled && chain_q_.empty() && !q_device.data)
    fail(ErrorCode::internal, "model drafter: a sampled chain gave no q rows");
  for (size_t w = 0; w < n; ++w) {
    // The K/V of the catch-up and of every draft but the last of the item's own gamma
    // (never fed) are in the pool: commit them, as the step-by-step path does. Rows past
    // its gamma stay reserved and uncommitted, to be overwritten.
    const int32_t own = items[owner[w]].gamma;
    std::vector<int32_t>& drafts = out[owner[w]].tokens;
    kv_.commit(windows[w].seq, windows[w].tokens);
    for (int32_t step = 0; step < own; ++step) drafts.push_back(chain_ids_[static_cast<size_t>(step) * n + w]);
    if (temperature[w] != 0.0f && q_device.data)
      out[owner[w]].q_on_device = {q_device.data + w * vocab, static_cast<int64_t>(n * vocab), q_device.device,
                                   q_device.ready};
    else if (temperature[w] != 0.0f)
      for (int32_t step = 0; step < own; ++step) {
        const auto row = chain_q_.begin() + static_cast<std::ptrdiff_t>((static_cast<size_t>(step) * n + w) * vocab);
        out[owner[w]].q.emplace_back(row, row + static_cast<std::ptrdiff_t>(vocab));
      }
    kv_.commit(windows[w].seq, std::span<const int32_t>(drafts).first(static_cast<size_t>(own - 1)));
  }
}

bool ModelDrafter::launch_chain(std::span<const DraftItem> items, std::span<Sequence* const> seqs, size_t max_feed,
                                const std::vector<bool>& ready, std::vector<Proposal>& out) {
  const int32_t gamma = items.front().gamma;
  // 2 gamma + 1 with draft-ahead (the drafts, then its chain); 0 when too long.
  const int32_t longer = draft_round_chains(gamma, draft_ahead_, true, model_->max_chain_steps()).launched;
  // Every draft made already: after_propose launches the draft-ahead chain as ever.
  if (std::all_of(ready.begin(), ready.end(), [](bool r) { return r; }) || longer == 0 ||
      std::any_of(items.begin(), items.end(), [&](const DraftItem& it) { return it.gamma != gamma; }))
    return false;
  std::vector<ForwardWindow> windows;
  std::vector<size_t> owner;
  chain_windows(items, seqs, max_feed, gamma, ready, windows, owner);
  // With draft-ahead the chain goes on as after_propose's would (feed the last draft,
  // gamma + 1 steps more); the items whose drafts were made ahead join it fed their last
  // draft, as in after_propose. When it is too long (checked above) or a window has no
  // room for it, the round drafts as without keep_drafts_on_device (propose_chain, then
  // after_propose).
  int32_t steps = gamma;
  if (draft_ahead_) {
    const int32_t max_positions = model_->config().max_position_embeddings;
    bool fits = true;
    int64_t blocks = 0;
    auto room = [&](SeqId seq, int32_t end) {
      fits = fits && end <= max_positions;
      blocks += kv_.blocks_needed(seq, end);
    };
    for (const ForwardWindow& w : windows)
      room(w.seq, kv_.length(w.seq) + static_cast<int32_t>(w.tokens.size()) + longer - 1);
    for (size_t i = 0; i < seqs.size(); ++i)
      if (ready[i]) room(seqs[i]->seq, kv_.length(seqs[i]->seq) + longer);
    if (!fits || blocks > kv_.free_blocks()) return false;  // the windows stay as propose_chain makes them
    steps = longer;
  }
  launched_.clear();
  for (size_t i : owner) launched_.add(items[i].request, gamma, 0, 0);
  if (steps > gamma)
    for (size_t i = 0; i < seqs.size(); ++i)
      if (ready[i]) launched_.add(items[i].request, 0, out[i].tokens.back(), kv_.length(seqs[i]->seq));
  const size_t fresh = owner.size();
  for (size_t k = fresh; k < launched_.requests.size(); ++k) {
    const SeqId seq = sequences_.at(launched_.requests[k]).seq;
    kv_.reserve(seq, launched_.from[k] + steps);  // fits (checked)
    windows.push_back({seq, {&launched_.first[k], 1}, LogitsMode::last, -1, true});
  }
  for (size_t w = 0; w < fresh; ++w) {
    const SeqId seq = windows[w].seq;
    kv_.reserve(seq, kv_.length(seq) + static_cast<int32_t>(windows[w].tokens.size()) + steps - 1);  // fits
  }
  DeviceIds early;
  // One round in flight: the ids stay where the chain leaves them (the next chain comes
  // after this round's verdict); more: in this round's slot's buffer.
  const Event done =
      model_->launch_greedy_chain_early(windows, steps, gamma, kv_, writer_, early, slots_ > 1 ? slot_ : -1);
  ++device_draft_rounds_;
  launched_.steps = steps;
  ahead_running_ = true;
  launched_done_ = done;
  if (steps > gamma) ahead_stats_.launched += static_cast<int64_t>(windows.size());
  const auto n = static_cast<int32_t>(windows.size());
  for (size_t w = 0; w < fresh; ++w) {
    // The catch-up's K/V are the context's: committed now; the drafts' at settle_ahead.
    kv_.commit(windows[w].seq, windows[w].tokens);
    Proposal& p = out[owner[w]];
    p.tokens.assign(static_cast<size_t>(gamma), 0);
    p.on_device = {early.ids + w, n, early.device, early.ready};
  }
  return true;
}

bool ModelDrafter::launch_sampled_chain(std::span<const DraftItem> items, std::span<Sequence* const> seqs,
                                        size_t max_feed, const std::vector<bool>& ready, std::vector<Proposal>& out) {
  if (!sampled_drafts_on_device_ || !drafts_on_device_ || !q_on_device_) return false;
  const int32_t gamma = items.front().gamma;
  // One chain of gamma steps for items all sampled at that gamma, none made ahead (a
  // greedy item keeps propose_chain's path and its draft-ahead).
  if (gamma < 1 || gamma > model_->max_chain_steps() ||
      std::any_of(items.begin(), items.end(),
                  [&](const DraftItem& it) { return it.gamma != gamma || it.sampling.temperature == 0.0f; }) ||
      std::any_of(ready.begin(), ready.end(), [](bool r) { return r; }))
    return false;
  std::vector<ForwardWindow> windows;
  std::vector<size_t> owner;
  chain_windows(items, seqs, max_feed, gamma, ready, windows, owner);
  const size_t n = windows.size();
  const ChainDraws draws = chain_draws(items, owner, gamma);  // as propose_chain draws them
  ForwardModel::ChainSampling sampling{draws.temperature, draws.uniforms};
  sampling.q_on_device = true;
  DeviceIds ids;
  const Event done = model_->launch_sampled_chain(windows, gamma, sampling, kv_, writer_, ids);
  const DeviceRows q = model_->sampled_chain_q();
  if (!q.data) fail(ErrorCode::internal, "model drafter: a launched sampled chain gave no q rows");
  // settle_ahead (the next propose, or finish) collects the ids and commits the drafts'
  // K/V in the books, as propose_chain does at once; nothing is drafted ahead.
  launched_.clear();
  for (size_t i : owner) launched_.add(items[i].request, gamma, 0, 0);
  launched_.steps = gamma;
  ahead_running_ = true;
  launched_done_ = done;
  ++device_draft_rounds_;
  const auto vocab = static_cast<int64_t>(model_->config().vocab_size);
  for (size_t w = 0; w < n; ++w) {
    kv_.commit(windows[w].seq, windows[w].tokens);  // the catch-up's K/V are the context's
    Proposal& p = out[owner[w]];
    p.tokens.assign(static_cast<size_t>(gamma), 0);
    p.on_device = {ids.ids + w, static_cast<int32_t>(n), ids.device, ids.ready};
    p.q_on_device = {q.data + static_cast<int64_t>(w) * vocab, static_cast<int64_t>(n) * vocab, q.device, q.ready};
  }
  return true;
}

Event ModelDrafter::after_propose() {
  // launch_chain's chain goes on past the drafts already.
  if (ahead_running_) return std::exchange(launched_done_, Event{});
  if (!draft_ahead_ || last_drafts_.empty()) return {};
  // Feed each sequence's last draft, then draft gamma + 1 more: the guess of the bonus
  // token and the next round's gamma drafts after it.
  const int32_t steps = draft_round_chains(last_gamma_, true, false, model_->max_chain_steps()).ahead;
  if (steps == 0) return {};
  const int32_t max_positions = model_->config().max_position_embeddings;
  launched_.clear();
  for (const auto& [request, last] : last_drafts_) {
    auto it = sequences_.find(request);
    if (it == sequences_.end()) continue;
    const SeqId seq = it->second.seq;
    const int32_t from = kv_.length(seq);
    if (from + steps > max_positions || kv_.blocks_needed(seq, from + steps) > kv_.free_blocks()) continue;
    kv_.reserve(seq, from + steps);  // fits (checked): the chain's rows [from, from + steps)
    launched_.add(request, 0, last, from);
  }
  last_drafts_.clear();
  if (launched_.requests.empty()) return {};
  std::vector<ForwardWindow> windows;
  for (size_t i = 0; i < launched_.requests.size(); ++i)
    windows.push_back({sequences_.at(launched_.requests[i]).seq, {&launched_.first[i], 1}, LogitsMode::last, -1, true});
  Event done = model_->launch_greedy_chain(windows, steps, kv_, writer_);
  ahead_running_ = true;
  launched_.steps = steps;
  ahead_stats_.launched += static_cast<int64_t>(windows.size());
  return done;
}

void ModelDrafter::settle_ahead() {
  if (!ahead_running_) return;
  ahead_running_ = false;
  launched_done_ = {};
  model_->collect_greedy_chain(chain_ids_);
  const size_t n = launched_.requests.size();
  const int32_t steps = launched_.steps;
  for (size_t i = 0; i < n; ++i) {
    auto it = sequences_.find(launched_.requests[i]);
    if (it == sequences_.end()) continue;
    auto id = [&](int32_t step) { return chain_ids_[static_cast<size_t>(step) * n + i]; };
    const int32_t made = launched_.drafts[i];
    Ahead a;
    if (made > 0) {
      // The round's drafts: the K/V of every one but the last are in the pool (as
      // propose_chain leaves them); the last was fed next, at the ahead part's start.
      std::vector<int32_t> drafts;
      for (int32_t step = 0; step + 1 < made; ++step) drafts.push_back(id(step));
      kv_.commit(it->second.seq, drafts);
      a.from = kv_.length(it->second.seq);
      a.fed.push_back(id(made - 1));
    } else {
      a.from = launched_.from[i];
      a.fed.push_back(launched_.first[i]);
    }
    for (int32_t step = made; step < steps; ++step) {
      a.ids.push_back(id(step));
      if (step + 1 < steps) a.fed.push_back(id(step));
    }
    if (!a.ids.empty()) ahead_[launched_.requests[i]] = std::move(a);
  }
}

bool ModelDrafter::adopt_ahead(RequestId request, Sequence& s, int32_t want, std::vector<int32_t>& drafts) {
  auto it = ahead_.find(request);
  if (it == ahead_.end()) return false;
  const Ahead a = std::move(it->second);
  ahead_.erase(it);
  if (kv_.length(s.seq) != a.from) return false;  // the books moved since (not expected)
  const auto from = static_cast<size_t>(a.from);
  size_t m = 0;  // fed tokens that match the context at their positions
  while (m < a.fed.size() && from + m < s.context.size() && a.fed[m] == s.context[from + m]) ++m;
  // When the matched tokens reach the end of the context (every draft and the bonus
  // accepted), ids[m - 1] onwards are the drafts that continue it.
  const bool covers = m >= 1 && from + m == s.context.size();
  if (want > 0 && covers && a.ids.size() - (m - 1) >= static_cast<size_t>(want)) {
    const auto first = a.ids.begin() + static_cast<std::ptrdiff_t>(m - 1);
    drafts.assign(first, first + want);
    // The context and every draft but the last, as propose_chain leaves them.
    kv_.commit(s.seq, std::span<const int32_t>(a.fed).first(m - 1 + static_cast<size_t>(want)));
    ++ahead_stats_.used;
    return true;
  }
  // Keep the matching K/V but the pending token's: the catch-up window feeds at least it.
  const size_t keep = s.context.size() > from ? std::min(m, s.context.size() - from - 1) : 0;
  if (keep > 0) kv_.commit(s.seq, std::span<const int32_t>(a.fed).first(keep));
  return false;
}

int32_t ModelDrafter::warm_graphs(int32_t max_gamma) {
  if (!sequences_.empty() || ahead_running_)
    fail(ErrorCode::internal, "drafter: warm_graphs with {} sequences started", sequences_.size());
  // A scratch sequence with a short context, prefilled as start() does (a device model's
  // chains then run in the state a request's do), its chains' rows left uncommitted and
  // the sequence released after: the pool blocks it borrowed are overwritten before read.
  DiscardKvRows sink;
  constexpr int32_t kContext = 4;
  constexpr int32_t kLongestFeed = 2;  // a catch-up window: the pending token, or two after a round at gamma 0
  const std::vector<int32_t> tokens(static_cast<size_t>(kContext + kLongestFeed), 0);
  const std::span<const int32_t> context = std::span<const int32_t>(tokens).first(kContext);
  const SeqId seq = kv_.add_sequence({});
  int32_t forwards = 0;
  auto twice = [&](auto&& run) {  // a shape's first forward runs eagerly, its second is captured
    for (int rep = 0; rep < 2; ++rep) {
      run();
      ++forwards;
    }
  };
  // A launched chain is waited for on its event before it is collected: one host sync
  // each, always. collect alone syncs only when its event query finds the chain still
  // running, which at start is a race (an eager chain's last kernels against the host),
  // so the start-up's count of synchronising calls moved from server to server (stop
  // 33: 4 more in one of two processes), and serve_load.sh's syncs per round, a
  // difference of two servers' counts, with it.
  auto collect = [&](const Event& done) {
    done.synchronize();
    model_->collect_greedy_chain(chain_ids_);
  };
  try {
    kv_.reserve(seq, kContext);
    const std::vector<PrefillItem> items{{seq, context}};
    prefill_windows(*model_, kv_, sink, items, prefill_chunk_, logits_);
    kv_.commit(seq, context);
    // Sampled rounds at a pure temperature draft in chains of their own (propose_chain:
    // forward_sampled_chain, never ahead), graphed apart from the greedy ones. Longest
    // first: a device model grows the chain's q buffer at the first, and growing it drops
    // the graphs captured before.
    const std::vector<float> temperature{1.0f};
    for (int32_t gamma = std::min(max_gamma, model_->max_chain_steps()); gamma >= 1; --gamma) {
      const std::vector<double> uniforms(static_cast<size_t>(gamma), 0.5);
      for (int32_t feed = 1; feed <= kLongestFeed; ++feed) {
        const ForwardWindow w{seq, std::span<const int32_t>(tokens).first(static_cast<size_t>(feed)), LogitsMode::last,
                              -1, true};
        kv_.reserve(seq, kContext + feed + gamma - 1);
        twice([&] {
          model_->forward_sampled_chain({&w, 1}, gamma, {temperature, uniforms}, kv_, sink, chain_ids_, chain_q_);
        });
      }
    }
    for (int32_t gamma = 1; gamma <= max_gamma; ++gamma) {
      const DraftRoundChains rc = draft_round_chains(gamma, draft_ahead_, drafts_on_device_, model_->max_chain_steps());
      for (int32_t feed = 1; feed <= kLongestFeed; ++feed) {
        const ForwardWindow w{seq, std::span<const int32_t>(tokens).first(static_cast<size_t>(feed)), LogitsMode::last,
                              -1, true};
        const int32_t steps = rc.launched > 0 ? rc.launched : rc.chain;
        kv_.reserve(seq, kContext + feed + steps - 1);
        if (rc.launched > 0) {
          twice([&] {
            DeviceIds early;
            collect(model_->launch_greedy_chain_early({&w, 1}, steps, gamma, kv_, sink, early, -1));
          });
        } else {
          twice([&] { model_->forward_greedy_chain({&w, 1}, steps, kv_, sink, chain_ids_); });
        }
      }
      if (rc.ahead > 0) {  // one token fed: the last draft
        const ForwardWindow w{seq, std::span<const int32_t>(tokens).first(1), LogitsMode::last, -1, true};
        kv_.reserve(seq, kContext + rc.ahead);
        twice([&] {
          collect(model_->launch_greedy_chain({&w, 1}, rc.ahead, kv_, sink));
        });
      }
    }
  } catch (...) {
    kv_.release(seq);
    throw;
  }
  kv_.release(seq);
  return forwards;
}

void ModelDrafter::finish(RequestId request) {
  settle_ahead();  // its chain may still write this sequence's blocks
  ahead_.erase(request);
  auto it = sequences_.find(request);
  if (it == sequences_.end()) return;
  kv_.release(it->second.seq);
  sequences_.erase(it);
}

}  // namespace specpipe
