// Why SpecPV's partial verdicts disagree with full ones, on the CPU (docs/BENCHMARKS.md 7,
// plugins/specpv/README.md "Why partial verdicts disagree").
//
// Along the target's own greedy continuation of a prompt (the tokens exact mode must give),
// at every position the target's choice over a partial view of its K/V is compared with
// its choice over the whole K/V, for several view budgets at once. The views are built as
// the engine builds them (kvstore/partial_view.h): a refresh every --interval tokens runs
// a full window over the tokens since the previous refresh plus --gamma drafts (the
// continuation's own next tokens) from a KV rewound to the previous refresh, as a full
// round after partial ones does, and its queries pick each layer's blocks (Quest bound,
// kvstore/block_summaries.h) among the verified blocks before the recent region of that
// rewound length; the positions until the next refresh read sink + those blocks + the
// recent region (the last `window` tokens and every token since the refresh).
//
// Per budget it reports: positions whose argmax differs; the attention mass each layer's
// view misses (softmax over the committed prefix, mean over query heads); for each
// disagreeing position, which layers' views alone flip the choice (every other layer full);
// the same views with the gap closed ("gap-closed": a refresh's candidates stop `window`
// tokens before the length it rewound to, while the next views' recent region starts
// `window` tokens before the later length, so the blocks between are in no view; here they
// are added); and an oracle that picks the blocks by their true attention mass for the
// refresh's queries (selection vs budget), computed here in double over the prefix at the
// refresh's position; "mass" is what the engine's retrieval by attention mass picks: the
// refresh forward's own attention (cpu::AttentionWindow::block_mass, the window's rows
// over the rewound prefix), summed per block. A view of every block is checked to give the
// full forward's logits bit for bit (no numerics difference in the partial path).
//
// By default every K/V here is the full path's. The engine's partial rounds also compute
// their provisional tokens' K/V over the view, and later partial rounds attend to those:
// --provisional-kv partial (or both) probes that too (names end in "pkv": the tokens since
// the refresh are one window over the view, their K/V the view's in every layer).
//
// Usage: specpv_probe [--model demo-target] [--prompts bench/prompts/long.jsonl (prompt_ids,
//          or prompt text: the model's tokenizer)] [--index 0] [--prompt-tokens 0]
//          [--tokens 64] [--budgets 256,512,1024,2048] [--interval 16]
//          [--gamma 4] [--picks quest,gap-closed,kv-heads,heads,oracle,mass] [--json F]
//          [--provisional-kv full|partial|both]
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kvstore/block_summaries.h"
#include "kvstore/kv_write_sink.h"
#include "kvstore/partial_view.h"
#include "model/load_model.h"
#include "model/tokenizer/tokenizer.h"
#include "pipeline/prefill.h"

namespace specpipe {
namespace {

using nlohmann::json;

/// Every layer's query rows of one forward, and with `mass` the engine's block masses
/// (the forward's own attention, as a refresh by attention mass gets them).
struct RowsTap final : QueryTap {
  std::vector<std::vector<float>> q;     // [layer]: n * ld floats
  std::vector<std::vector<float>> mass;  // [layer]: block_mass_scores
  int64_t ld = 0;
  int32_t n = 0;
  bool want_mass = false;
  explicit RowsTap(int32_t layers, bool with_mass = false)
      : q(static_cast<size_t>(layers)), mass(static_cast<size_t>(layers)), want_mass(with_mass) {}
  void on_queries(int32_t layer, const float* rows, int32_t rows_n, int64_t rows_ld) override {
    ld = rows_ld;
    n = rows_n;
    q[static_cast<size_t>(layer)].assign(rows, rows + rows_n * rows_ld);
  }
  bool wants_block_mass() const override { return want_mass; }
  void on_block_mass(int32_t layer, const float* m, int32_t rows, int32_t kv_heads, int32_t blocks) override {
    mass[static_cast<size_t>(layer)] = block_mass_scores(m, rows, kv_heads, blocks);
  }
};

enum class Pick { quest, quest_gap_closed, quest_kv_heads, quest_heads, oracle, mass };
const char* const kPickNames[] = {"quest", "gap-closed", "kv-heads", "heads", "oracle", "mass"};
const double kMarginCuts[] = {0.25, 0.5, 1.0, 2.0};

/// Top-1 minus top-2 of a logits row.
double top2_margin(std::span<const float> row) {
  float first = -INFINITY, second = -INFINITY;
  for (float x : row) {
    if (x > first) {
      second = first;
      first = x;
    } else if (x > second) {
      second = x;
    }
  }
  return static_cast<double>(first) - second;
}

struct Probe {
  std::string name;
  int32_t budget = 0;
  Pick pick = Pick::quest;
  bool partial_kv = false;  // the tokens since the refresh get their K/V over the view (as in partial rounds)
  ViewBudget view;
  std::vector<std::vector<int32_t>> retrieved;  // [layer]
  int32_t candidates_end = 0;                   // the last refresh's candidate blocks end here
  int64_t positions = 0, differ = 0;
  std::vector<double> missed;  // [layer]: sum over positions of the mean missed mass
  std::vector<int64_t> flips;  // [layer]: disagreeing positions that layer's view alone flips
  // Positions whose partial logits' top-2 margin is below kMarginCuts[i], agreeing or not:
  // what a partial verdict gated by its own margin would hold back, and what it would catch.
  std::vector<int64_t> low_agree, low_differ;
  json differing = json::array();
};

/// Attention weights of one query row (every head, RoPE applied) over the committed
/// prefix [0, len) of `layer`: w[t] summed over the heads, each head's softmax summing to
/// 1 (divided by the heads: `mean`).
void attention_weights(const ModelConfig& c, const KvStore& kv, SeqId seq, int32_t layer, const float* q, int32_t len,
                       bool mean, std::vector<double>& w) {
  const int32_t hd = c.head_dim, group = c.num_heads / c.num_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const float* K = kv.tensors().k(layer);
  const int64_t stride = kv.tensors().slot_stride();
  std::vector<const float*> keys(static_cast<size_t>(len));
  for (int32_t t = 0; t < len; ++t) keys[static_cast<size_t>(t)] = K + kv.slot(seq, t) * stride;
  w.assign(static_cast<size_t>(len), 0.0);
  std::vector<double> s(static_cast<size_t>(len));
  for (int32_t h = 0; h < c.num_heads; ++h) {
    const float* qh = q + static_cast<int64_t>(h) * hd;
    const int64_t kh = static_cast<int64_t>(h / group) * hd;
    double top = -1e300;
    for (int32_t t = 0; t < len; ++t) {
      const float* k = keys[static_cast<size_t>(t)] + kh;
      double dot = 0;
      for (int32_t e = 0; e < hd; ++e) dot += static_cast<double>(qh[e]) * k[e];
      top = std::max(top, s[static_cast<size_t>(t)] = dot * scale);
    }
    double sum = 0;
    for (double& x : s) sum += (x = std::exp(x - top));
    for (int32_t t = 0; t < len; ++t) w[static_cast<size_t>(t)] += s[static_cast<size_t>(t)] / sum / (mean ? c.num_heads : 1);
  }
}

/// Round-robin over groups' rankings (a group: a KV head, or a query head): each group in
/// turn adds its best block not chosen yet, until k are chosen; ascending.
std::vector<int32_t> round_robin(const std::vector<std::vector<double>>& scores, int32_t k, int32_t first, int32_t last) {
  std::vector<std::vector<int32_t>> order;
  for (const auto& g : scores) {
    std::vector<int32_t> idx;
    for (int32_t b = first; b < last; ++b) idx.push_back(b);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return g[static_cast<size_t>(a)] > g[static_cast<size_t>(b)]; });
    order.push_back(std::move(idx));
  }
  std::vector<int32_t> chosen;
  std::vector<size_t> at(order.size(), 0);
  const auto want = static_cast<size_t>(std::clamp(k, 0, std::max(0, last - first)));
  while (chosen.size() < want)
    for (size_t g = 0; g < order.size() && chosen.size() < want; ++g) {
      while (at[g] < order[g].size() && std::find(chosen.begin(), chosen.end(), order[g][at[g]]) != chosen.end()) ++at[g];
      if (at[g] < order[g].size()) chosen.push_back(order[g][at[g]++]);
    }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

std::vector<int32_t> top_by(std::vector<double> mass, int32_t k, int32_t first, int32_t last) {
  std::vector<float> scores(static_cast<size_t>(std::max(0, last)));
  for (int32_t b = 0; b < last; ++b) scores[static_cast<size_t>(b)] = static_cast<float>(mass[static_cast<size_t>(b)]);
  return top_blocks(scores, k, first);
}

int run(const std::string& model_arg, const std::string& prompts_path, int32_t index, int32_t tokens,
        const std::vector<int32_t>& budgets, const std::vector<std::string>& picks, int32_t interval, int32_t gamma,
        const std::string& json_out, const std::string& provisional_kv, int32_t prompt_tokens) {
  std::vector<int32_t> prompt;
  {
    std::ifstream in(prompts_path);
    std::string line;
    for (int32_t i = 0; std::getline(in, line); ++i)
      if (i == index) {
        const json j = json::parse(line);
        prompt = j.contains("prompt_ids")
                     ? j["prompt_ids"].get<std::vector<int32_t>>()
                     : Tokenizer::from_file(resolve_model_dir(model_arg) / "tokenizer.json")
                           .encode(j["prompt"].get<std::string>());
      }
  }
  if (prompt.empty()) throw std::runtime_error(fmt::format("no prompt {} in {}", index, prompts_path));
  if (prompt_tokens > 0) {
    if (prompt.size() < static_cast<size_t>(prompt_tokens))
      throw std::runtime_error(
          fmt::format("prompt {}: {} tokens, fewer than --prompt-tokens {}", index, prompt.size(), prompt_tokens));
    prompt.resize(static_cast<size_t>(prompt_tokens));
  }
  auto model = load_transformer(resolve_model_dir(model_arg));
  Transformer& m = *model;
  const ModelConfig& c = m.config();
  const int32_t B = 16, L = c.num_layers;
  const auto P = static_cast<int32_t>(prompt.size());
  KvStore kv(m.kv_config((P + tokens + gamma + 64) / B + 8, B));
  const SeqId seq = kv.add_sequence(prompt);
  Logits logits;
  prefill(m, kv, seq, prompt, 512, logits);
  DirectKvWriter writer(kv);
  auto forward = [&](std::span<const int32_t> window, const PrefixView* view, QueryTap* tap, LogitsMode mode) {
    kv.reserve(seq, kv.length(seq) + static_cast<int32_t>(window.size()));
    ForwardWindow w{seq, window, mode};
    w.view = view;
    w.query_tap = tap;
    m.forward({&w, 1}, kv, writer, logits);
  };

  // The plain continuation (plus gamma more for the last refresh's drafts).
  std::vector<int32_t> S = prompt;
  S.push_back(logits.argmax(0));
  for (int32_t i = 0; i < tokens + gamma; ++i) {
    forward({&S.back(), 1}, nullptr, nullptr, LogitsMode::last);
    kv.commit(seq, {&S.back(), 1});
    S.push_back(logits.argmax(0));
  }
  kv.truncate(seq, P);

  std::vector<Probe> probes;
  std::vector<bool> kv_paths;
  if (provisional_kv != "partial") kv_paths.push_back(false);
  if (provisional_kv != "full") kv_paths.push_back(true);
  for (bool partial_kv : kv_paths)
  for (int32_t b : budgets)
    for (Pick pick : {Pick::quest, Pick::quest_gap_closed, Pick::quest_kv_heads, Pick::quest_heads, Pick::oracle,
                      Pick::mass}) {
      const char* name = kPickNames[static_cast<int>(pick)];
      if (std::find(picks.begin(), picks.end(), name) == picks.end()) continue;
      Probe p;
      p.budget = b;
      p.pick = pick;
      p.partial_kv = partial_kv;
      p.name = fmt::format("{} {}{}", b, name, partial_kv ? " pkv" : "");
      p.view = {b / 16, b / 32, b / 4, b * 3 / 16};
      p.missed.assign(static_cast<size_t>(L), 0.0);
      p.flips.assign(static_cast<size_t>(L), 0);
      p.low_agree.assign(std::size(kMarginCuts), 0);
      p.low_differ.assign(std::size(kMarginCuts), 0);
      probes.push_back(std::move(p));
    }

  BlockSummaries summaries(SummaryShape{L, c.num_kv_heads, c.head_dim, B});
  auto summarise_below = [&](int32_t len) {
    const std::span<const int32_t> table = kv.block_table(seq);
    const int64_t stride = kv.tensors().slot_stride();
    for (int32_t b = summaries.blocks(); b < len / B; ++b) {
      for (int32_t l = 0; l < L; ++l)
        summaries.add_layer_block(l, kv.tensors().k(l) + int64_t{table[static_cast<size_t>(b)]} * B * stride, stride);
      summaries.finish_block();
    }
  };
  // One layer's view as the sequence's block indices: the engine's (view_blocks), plus for
  // gap-closed the blocks from the refresh's candidate end up to the recent region; every
  // block when the view would cover the prefix or the layer is not the one probed.
  auto blocks_of = [&](const Probe& p, int32_t len, int32_t verified, int32_t layer, int32_t partial_layer) {
    std::vector<int32_t> blocks;
    const int32_t total = (len + B - 1) / B;
    if (partial_layer < 0 || partial_layer == layer) {
      const auto vb = view_blocks(len, verified, B, p.view, p.retrieved[static_cast<size_t>(layer)]);
      if (vb) {
        blocks = *vb;
        if (p.pick == Pick::quest_gap_closed) {
          for (int32_t b = p.candidates_end; b < recent_first_block(len, verified, B, p.view.window_tokens); ++b)
            blocks.push_back(b);
          std::sort(blocks.begin(), blocks.end());
          blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
        }
      }
    }
    if (blocks.empty() || static_cast<int32_t>(blocks.size()) >= total) {
      blocks.clear();
      for (int32_t b = 0; b < total; ++b) blocks.push_back(b);
    }
    return blocks;
  };
  auto view_of = [&](const Probe& p, int32_t len, int32_t verified, int32_t partial_layer) {
    PrefixView v;
    const std::span<const int32_t> table = kv.block_table(seq);
    for (int32_t l = 0; l < L; ++l) {
      const std::vector<int32_t> blocks = blocks_of(p, len, verified, l, partial_layer);
      std::vector<int32_t> pool;
      for (int32_t b : blocks) pool.push_back(table[static_cast<size_t>(b)]);
      v.pool_blocks.push_back(std::move(pool));
      v.lengths.push_back(view_length(blocks, len, B));
    }
    return v;
  };

  bool bits_equal = true;
  bool partial_kv_dirty = false;  // a pkv verdict left the view's K/V since the refresh
  int32_t last_refresh = -1;  // the verified length of the previous refresh (the rewind point)
  std::vector<double> w;
  for (int32_t pos = P; pos < P + tokens; ++pos) {
    if (last_refresh < 0 || pos - last_refresh >= interval) {
      // The full round: rewind to the previous refresh, recompute up to pos, pending, drafts.
      const int32_t from = last_refresh < 0 ? pos : last_refresh;
      kv.truncate(seq, from);
      RowsTap tap(L, true);
      const std::span<const int32_t> window(S.data() + from, static_cast<size_t>(pos - from + 1 + gamma));
      forward(window, nullptr, &tap, LogitsMode::none);
      kv.commit(seq, window.first(static_cast<size_t>(pos - from)));
      summarise_below(pos);
      // The oracle's block masses: the refresh rows' attention over the prefix, per layer.
      std::vector<std::vector<double>> mass(static_cast<size_t>(L), std::vector<double>(static_cast<size_t>(summaries.blocks()), 0.0));
      const bool oracle = std::any_of(probes.begin(), probes.end(), [](const Probe& p) { return p.pick == Pick::oracle; });
      for (int32_t l = 0; l < L && oracle; ++l)
        for (int32_t i = 0; i < tap.n; ++i) {
          attention_weights(c, kv, seq, l, tap.q[static_cast<size_t>(l)].data() + i * tap.ld, pos, false, w);
          for (int32_t t = 0; t < summaries.blocks() * B; ++t)
            mass[static_cast<size_t>(l)][static_cast<size_t>(t / B)] += w[static_cast<size_t>(t)];
        }
      for (Probe& p : probes) {
        const int32_t first = (p.view.sink_tokens + B - 1) / B;
        // The engine's candidates: verified blocks below the rewound length's recent region.
        p.candidates_end = std::min(recent_first_block(from, from, B, p.view.window_tokens), summaries.blocks());
        p.retrieved.assign(static_cast<size_t>(L), {});
        for (int32_t l = 0; l < L; ++l) {
          if (p.pick == Pick::oracle) {
            p.retrieved[static_cast<size_t>(l)] = top_by(mass[static_cast<size_t>(l)], p.view.retrieval_blocks, first, p.candidates_end);
            continue;
          }
          if (p.pick == Pick::mass) {  // the engine's: the refresh window's own attention (from the rewound prefix)
            const std::vector<float>& bm = tap.mass[static_cast<size_t>(l)];
            p.retrieved[static_cast<size_t>(l)] = top_blocks(
                std::span<const float>(bm).first(static_cast<size_t>(std::min<int32_t>(p.candidates_end, static_cast<int32_t>(bm.size())))),
                p.view.retrieval_blocks, first);
            continue;
          }
          if (p.pick == Pick::quest_kv_heads || p.pick == Pick::quest_heads) {
            // Quest's bound per KV head (the group's query heads summed) or per query head,
            // summed over the rows; the heads' rankings merged round-robin.
            const bool per_head = p.pick == Pick::quest_heads;
            const int32_t groups = per_head ? c.num_heads : c.num_kv_heads, hd = c.head_dim;
            const float* q = tap.q[static_cast<size_t>(l)].data();
            std::vector<std::vector<double>> sc(static_cast<size_t>(groups), std::vector<double>(static_cast<size_t>(summaries.blocks()), 0.0));
            for (int32_t h = 0; h < c.num_heads; ++h) {
              const int32_t g = per_head ? h : h / (c.num_heads / c.num_kv_heads), kvh = h / (c.num_heads / c.num_kv_heads);
              std::vector<double> plus(static_cast<size_t>(hd), 0.0), neg(static_cast<size_t>(hd), 0.0);
              for (int32_t i = 0; i < tap.n; ++i)
                for (int32_t e = 0; e < hd; ++e) {
                  const float x = q[i * tap.ld + h * hd + e];
                  (x > 0 ? plus : neg)[static_cast<size_t>(e)] += x;
                }
              for (int32_t b = 0; b < summaries.blocks(); ++b) {
                const float* mx = summaries.kmax(l, b) + kvh * hd;
                const float* mn = summaries.kmin(l, b) + kvh * hd;
                double v = 0;
                for (int32_t e = 0; e < hd; ++e) v += plus[static_cast<size_t>(e)] * mx[e] + neg[static_cast<size_t>(e)] * mn[e];
                sc[static_cast<size_t>(g)][static_cast<size_t>(b)] += v;
              }
            }
            p.retrieved[static_cast<size_t>(l)] = round_robin(sc, p.view.retrieval_blocks, first, p.candidates_end);
            continue;
          }
          std::vector<float> scores(static_cast<size_t>(summaries.blocks()));
          summaries.score(l, QuerySums::of(summaries.shape(), tap.q[static_cast<size_t>(l)].data(), tap.n, tap.ld, c.num_heads),
                          scores);
          p.retrieved[static_cast<size_t>(l)] = top_blocks(
              std::span<const float>(scores).first(static_cast<size_t>(p.candidates_end)), p.view.retrieval_blocks, first);
        }
      }
      last_refresh = pos;
    }
    const int32_t token = S[static_cast<size_t>(pos)];
    // The full verdict (its query rows for the missed mass), then each probe's.
    RowsTap tap(L);
    forward({&token, 1}, nullptr, &tap, LogitsMode::last);
    const std::vector<float> full(logits.row(0).begin(), logits.row(0).end());
    const int32_t want = logits.argmax(0);
    if (want != S[static_cast<size_t>(pos) + 1]) throw std::runtime_error(fmt::format("position {}: not the plain token", pos));
    const double margin = top2_margin(full);
    if (pos == P) {  // a view of every block: the full forward's bits
      Probe all;  // sink and window of the whole prefix: view_blocks says covers_context
      all.view = {pos, 1, pos, pos};
      all.retrieved.assign(static_cast<size_t>(L), {});
      const PrefixView v = view_of(all, pos, pos, -1);
      forward({&token, 1}, &v, nullptr, LogitsMode::last);
      bits_equal = std::equal(full.begin(), full.end(), logits.row(0).begin());
    }
    std::vector<std::vector<double>> weights(static_cast<size_t>(L));
    for (int32_t l = 0; l < L; ++l)
      attention_weights(c, kv, seq, l, tap.q[static_cast<size_t>(l)].data(), pos, true, weights[static_cast<size_t>(l)]);
    for (Probe& p : probes) {
      for (int32_t l = 0; l < L; ++l) {
        double in = 0;
        for (int32_t b : blocks_of(p, pos, last_refresh, l, -1))
          for (int32_t t = b * B; t < std::min(pos, (b + 1) * B); ++t) in += weights[static_cast<size_t>(l)][static_cast<size_t>(t)];
        p.missed[static_cast<size_t>(l)] += 1.0 - in;
      }
      // The partial verdict at pos. With full-path K/V: one row over the view of [0, pos).
      // With partial-path K/V (pkv): the tokens since the refresh as one window over the
      // view of [0, last_refresh), so their K/V are the view's in every layer, as the
      // engine's partial rounds leave them for the next partial rounds.
      auto verdict = [&](int32_t partial_layer) {
        if (!p.partial_kv || pos == last_refresh) {
          const PrefixView v = view_of(p, pos, last_refresh, partial_layer);
          forward({&token, 1}, &v, nullptr, LogitsMode::last);
        } else {
          kv.truncate(seq, last_refresh);
          const PrefixView v = view_of(p, last_refresh, last_refresh, partial_layer);
          forward(std::span<const int32_t>(S.data() + last_refresh, static_cast<size_t>(pos - last_refresh + 1)), &v,
                  nullptr, LogitsMode::last);
          partial_kv_dirty = true;
        }
        return logits.argmax(0);
      };
      const int32_t got = verdict(-1);
      ++p.positions;
      const double own_margin = top2_margin(logits.row(0));
      for (size_t i = 0; i < std::size(kMarginCuts); ++i)
        if (own_margin < kMarginCuts[i]) ++(got == want ? p.low_agree : p.low_differ)[i];
      if (got == want) continue;
      ++p.differ;
      const double partial_margin = logits.row(0)[static_cast<size_t>(got)] - logits.row(0)[static_cast<size_t>(want)];
      json layers = json::array();
      for (int32_t l = 0; l < L; ++l) {
        if (verdict(l) != want) {
          ++p.flips[static_cast<size_t>(l)];
          layers.push_back(l);
        }
      }
      p.differing.push_back({{"position", pos}, {"since_refresh", pos - last_refresh}, {"full", want}, {"partial", got},
                             {"full_margin", margin}, {"partial_margin", partial_margin},
                             {"flipped_by_layer_alone", layers}});
    }
    // Leave the full path's K/V at pos and commit it (after a pkv verdict, the full path's
    // K/V since the refresh again).
    if (partial_kv_dirty) {
      kv.truncate(seq, last_refresh);
      const std::span<const int32_t> again(S.data() + last_refresh, static_cast<size_t>(pos - last_refresh + 1));
      forward(again, nullptr, nullptr, LogitsMode::last);
      kv.commit(seq, again);
      partial_kv_dirty = false;
    } else {
      forward({&token, 1}, nullptr, nullptr, LogitsMode::last);
      kv.commit(seq, {&token, 1});
    }
  }

  json out = {{"prompt_tokens", P}, {"tokens", tokens}, {"interval", interval}, {"gamma", gamma},
              {"full_view_bits_equal", bits_equal}, {"probes", json::array()}};
  std::printf("prompt %d tokens, %d positions, refresh every %d, a view of every block == full bit for bit: %s\n", P,
              tokens, interval, bits_equal ? "yes" : "NO");
  std::printf("%-18s %8s %9s  %s\n", "budget / pick", "agree", "differ", "missed attention mass per layer (mean over positions, heads)");
  for (const Probe& p : probes) {
    std::string missed;
    json jm = json::array(), jf = json::array();
    for (int32_t l = 0; l < L; ++l) {
      const double v = p.missed[static_cast<size_t>(l)] / static_cast<double>(std::max<int64_t>(1, p.positions));
      missed += fmt::format(" {:.3f}", v);
      jm.push_back(v);
      jf.push_back(p.flips[static_cast<size_t>(l)]);
    }
    std::string flips;
    for (int32_t l = 0; l < L; ++l) flips += fmt::format(" {}", p.flips[static_cast<size_t>(l)]);
    std::string low;
    json jl = json::array();
    for (size_t i = 0; i < std::size(kMarginCuts); ++i) {
      low += fmt::format(" <{}: {}/{}", kMarginCuts[i], p.low_agree[i], p.low_differ[i]);
      jl.push_back({{"below", kMarginCuts[i]}, {"agree", p.low_agree[i]}, {"differ", p.low_differ[i]}});
    }
    std::printf("%-18s %7.1f%% %5lld/%lld %s | flips by one layer:%s | partial margin agree/differ:%s\n", p.name.c_str(),
                100.0 * static_cast<double>(p.positions - p.differ) / static_cast<double>(p.positions),
                static_cast<long long>(p.differ), static_cast<long long>(p.positions), missed.c_str(), flips.c_str(),
                low.c_str());
    out["probes"].push_back({{"name", p.name}, {"budget", p.budget}, {"positions", p.positions}, {"differ", p.differ},
                             {"missed_mass_per_layer", jm}, {"flips_by_layer_alone", jf}, {"low_partial_margin", jl},
                             {"differing", p.differing}});
  }
  if (!json_out.empty()) std::ofstream(json_out) << out.dump(1) << "\n";
  return bits_equal ? 0 : 1;
}

}  // namespace
}  // namespace specpipe

int main(int argc, char** argv) {
  CLI::App app("Why SpecPV's partial verdicts disagree with full ones (CPU)");
  std::string model = "demo-target", prompts = "bench/prompts/long.jsonl", json_out, provisional_kv = "full";
  int32_t index = 0, tokens = 64, interval = 16, gamma = 4, prompt_tokens = 0;
  std::vector<int32_t> budgets{256, 512, 1024, 2048};
  std::vector<std::string> picks{"quest", "gap-closed", "kv-heads", "heads", "oracle", "mass"};
  app.add_option("--model", model, "checkpoint directory or name under models/")->capture_default_str();
  app.add_option("--prompts", prompts, "JSONL of {prompt_ids}")->capture_default_str();
  app.add_option("--index", index, "which line")->capture_default_str();
  app.add_option("--prompt-tokens", prompt_tokens, "cut the prompt to its first N tokens (0: whole)")->capture_default_str();
  app.add_option("--tokens", tokens, "positions of the continuation probed")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--budgets", budgets, "view budgets (split as bench/specpv_bench.sh)")->delimiter(',')->capture_default_str();
  app.add_option("--picks", picks, "block choices probed: quest, gap-closed, kv-heads, heads, oracle, mass")
      ->delimiter(',')->capture_default_str();
  app.add_option("--interval", interval, "tokens between refreshes")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--gamma", gamma, "drafts in a refresh window")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--json", json_out, "write the JSON report here");
  app.add_option("--provisional-kv", provisional_kv,
                 "K/V of the tokens since the refresh: full (the full path's), partial (computed over the view, as "
                 "the engine's partial rounds do: names end in pkv) or both")
      ->check(CLI::IsMember({"full", "partial", "both"}))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return specpipe::run(model, prompts, index, tokens, budgets, picks, interval, gamma, json_out, provisional_kv,
                         prompt_tokens);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "specpv_probe: %s\n", e.what());
    return 2;
  }
}
