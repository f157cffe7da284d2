// The demo pair's GPU runs (golden_runs.h).
#include "tools/gpu/golden_runs.h"

#include <algorithm>
#include <cmath>

#include "kvstore/kv_write_sink.h"
#include "tools/gpu/tool_support.h"

namespace specpipe::gpu_tool {

PlainRun gpu_plain(CudaTransformer& m, KvStore& kv, const std::vector<int32_t>& prompt, int32_t max_new,
                   const std::vector<int32_t>& want, bool keep_logits, std::vector<float>* step_logits) {
  PlainRun r;
  CudaLogits lg;
  m.set_copy_logits(keep_logits || !want.empty() || step_logits);
  const auto t0 = Clock::now();
  const SeqId seq = kv.add_sequence(prompt);
  gpu_prefill(m, kv, seq, prompt, LogitsMode::last, lg);
  r.prefill_ms = ms_since(t0);
  if (keep_logits) r.first_logits.assign(lg.row(0).begin(), lg.row(0).end());
  const auto t1 = Clock::now();
  for (;;) {
    const int32_t token = lg.argmax(0);
    if (step_logits) step_logits->insert(step_logits->end(), lg.row(0).begin(), lg.row(0).end());
    const size_t i = r.tokens.size();
    if (!want.empty() && i < want.size() && token != want[i] && r.gap_at.empty()) {
      const auto row = lg.row(0);
      r.gap_at.push_back(static_cast<double>(i));
      r.gap_at.push_back(std::abs(double{row[static_cast<size_t>(token)]} - row[static_cast<size_t>(want[i])]));
    }
    r.tokens.push_back(token);
    if (static_cast<int32_t>(r.tokens.size()) >= max_new) break;
    kv.reserve(seq, kv.length(seq) + 1);
    const ForwardWindow w{seq, {&r.tokens.back(), 1}, LogitsMode::last};
    m.forward({&w, 1}, kv, lg);
    kv.commit(seq, {&r.tokens.back(), 1});
  }
  r.decode_ms = ms_since(t1);
  kv.release(seq);
  return r;
}

SpecRun gpu_spec(CudaTransformer& target, KvStore& kvt, CudaTransformer& draft, KvStore& kvd,
                 const std::vector<int32_t>& prompt, int32_t max_new, int32_t gamma, bool chain) {
  SpecRun r;
  target.set_copy_logits(false);
  draft.set_copy_logits(false);
  CudaLogits lt, ld;
  const auto t0 = Clock::now();
  const SeqId st = kvt.add_sequence(prompt);
  const SeqId sd = kvd.add_sequence(prompt);
  std::vector<int32_t> seq(prompt.begin(), prompt.end());  // prompt + output so far
  const std::span<const int32_t> context(prompt.data(), prompt.size() - 1);
  if (!context.empty()) {
    gpu_prefill(target, kvt, st, context, LogitsMode::none, lt);
    gpu_prefill(draft, kvd, sd, context, LogitsMode::none, ld);
  }
  r.prefill_ms = ms_since(t0);
  std::vector<int32_t> window;
  while (static_cast<int32_t>(r.tokens.size()) < max_new) {
    const auto len = static_cast<int32_t>(seq.size());  // target has len - 1 committed
    // Draft: feed what it has not seen (ends with the pending token), then its drafts.
    const int32_t dl = kvd.length(sd);
    kvd.reserve(sd, len + gamma - 1);
    window.assign(seq.begin() + dl, seq.end());
    std::vector<int32_t> drafts;
    const auto td = Clock::now();
    if (chain) {
      const ForwardWindow w{sd, window, LogitsMode::last};
      draft.forward_greedy_chain({&w, 1}, gamma, kvd, drafts);
    } else {
      const ForwardWindow w{sd, window, LogitsMode::last};
      draft.forward({&w, 1}, kvd, ld);
      drafts.push_back(ld.argmax(0));
    }
    for (int32_t j = 1; j < gamma && !chain; ++j) {
      const ForwardWindow w{sd, {&drafts.back(), 1}, LogitsMode::last, len + j - 1};
      draft.forward({&w, 1}, kvd, ld);
      drafts.push_back(ld.argmax(0));
    }
    r.draft_ms += ms_since(td);
    // Verify [pending, d1..dg].
    window.assign(1, seq.back());
    window.insert(window.end(), drafts.begin(), drafts.end());
    kvt.reserve(st, len + gamma);
    const ForwardWindow w{st, window, LogitsMode::all};
    const auto tv = Clock::now();
    target.forward({&w, 1}, kvt, lt);
    r.verify_ms += ms_since(tv);
    int32_t k = 0;
    while (k < gamma && lt.argmax(0, k) == drafts[static_cast<size_t>(k)]) ++k;
    const int32_t bonus = lt.argmax(0, k);
    // Target KV: [pending, d1..dk] become committed.
    kvt.commit(st, {window.data(), static_cast<size_t>(k) + 1});
    kvt.truncate(st, kvt.length(st));
    // Draft KV: what it was fed plus d1..d_min(k, gamma-1) holds valid K/V.
    const int32_t keep = std::min(k, gamma - 1);
    std::vector<int32_t> dcommit(seq.begin() + dl, seq.end());
    dcommit.insert(dcommit.end(), drafts.begin(), drafts.begin() + keep);
    kvd.commit(sd, dcommit);
    kvd.truncate(sd, kvd.length(sd));
    for (int32_t i = 0; i < k; ++i) {
      seq.push_back(drafts[static_cast<size_t>(i)]);
      r.tokens.push_back(drafts[static_cast<size_t>(i)]);
    }
    seq.push_back(bonus);
    r.tokens.push_back(bonus);
    r.accepted_per_round.push_back(k);
  }
  r.tokens.resize(static_cast<size_t>(max_new));
  r.ms = ms_since(t0);
  kvt.release(st);
  kvd.release(sd);
  return r;
}

std::vector<float> cpu_last_logits(Transformer& m, const std::vector<int32_t>& prompt) {
  KvStoreConfig kc = m.kv_config(static_cast<int32_t>(prompt.size() / 16 + 2));
  kc.prefix_cache = false;
  KvStore kv(kc);
  DirectKvWriter writer(kv);
  const SeqId seq = kv.add_sequence(prompt);
  Logits lg;
  const std::span<const int32_t> all(prompt);
  for (size_t at = 0; at < all.size(); at += kPrefillChunk) {
    const auto chunk = all.subspan(at, std::min<size_t>(kPrefillChunk, all.size() - at));
    kv.reserve(seq, kv.length(seq) + static_cast<int32_t>(chunk.size()));
    const ForwardWindow w{seq, chunk, LogitsMode::last};
    m.forward({&w, 1}, kv, writer, lg);
    kv.commit(seq, chunk);
  }
  return {lg.row(0).begin(), lg.row(0).end()};
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(double{a[i]} - b[i]));
  return worst;
}

int32_t argmax_of(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace specpipe::gpu_tool
