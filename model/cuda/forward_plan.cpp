#include "model/cuda/forward_plan.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "core/error.h"

namespace specpipe::cuda {
namespace {

size_t align16(size_t v) { return (v + 15) / 16 * 16; }

template <typename T>
void put(std::span<unsigned char> host, size_t at, const std::vector<T>& values) {
  if (!values.empty()) std::memcpy(host.data() + at, values.data(), values.size() * sizeof(T));
}

/// Offload: points the first host_blocks(seq) entries of the sequence's `table` (kOnHost)
/// at the ring blocks holding them, giving the sequence its ring blocks on first sight (a
/// sequence in two windows is loaded once).
void add_ring_blocks(const KvStore& kv, SeqId seq, std::span<int32_t> table,
                     std::unordered_map<SeqId, int32_t>& ring_at, std::vector<int32_t>& ring_host_blocks) {
  const std::span<const int32_t> host = kv.host_block_table(seq);
  if (host.empty()) return;
  auto [at, fresh] = ring_at.try_emplace(seq, static_cast<int32_t>(ring_host_blocks.size()));
  if (fresh) ring_host_blocks.insert(ring_host_blocks.end(), host.begin(), host.end());
  for (size_t i = 0; i < host.size(); ++i) {
    if (table[i] != KvStore::kOnHost)
      fail(ErrorCode::internal, "CUDA forward: sequence {}'s block {} is on the host tier but its table holds {}", seq,
           i, table[i]);
    table[i] = ring_table_entry(at->second + static_cast<int32_t>(i));
  }
}

/// A window's partial view against its sequence (plan_forward's contract).
void check_view(const PrefixView& v, SeqId seq, int32_t start, bool chain, const KvStore& kv, const ModelConfig& c) {
  if (chain) fail(ErrorCode::invalid_argument, "CUDA forward: a greedy chain over a partial view (sequence {})", seq);
  // A sequence with host-tier K/V too: its view names pool blocks only (copies of its
  // host blocks, KvStore::set_view_copies), checked below; nothing of it streams.
  const auto layers = static_cast<size_t>(c.num_layers);
  if (v.pool_blocks.size() != layers || v.lengths.size() != layers)
    fail(ErrorCode::invalid_argument, "CUDA forward: sequence {}'s partial view has {} / {} layers, the model {}", seq,
         v.pool_blocks.size(), v.lengths.size(), layers);
  const int32_t B = kv.config().block_size;
  for (size_t l = 0; l < layers; ++l) {
    const int32_t len = v.lengths[l];
    if (len < 0 || len > start || static_cast<int64_t>(v.pool_blocks[l].size()) != (int64_t{len} + B - 1) / B)
      fail(ErrorCode::invalid_argument,
           "CUDA forward: sequence {}'s partial view of layer {}: {} tokens in {} blocks over a prefix of {}", seq, l,
           len, v.pool_blocks[l].size(), start);
    for (int32_t b : v.pool_blocks[l])
      if (b < 0 || b >= kv.config().num_blocks)
        fail(ErrorCode::invalid_argument, "CUDA forward: sequence {}'s partial view of layer {} names pool block {}",
             seq, l, b);
  }
}

/// Every layer's windows and tables of a forward with partial views (ForwardPlan::layer_windows).
void plan_views(std::span<const ForwardWindow> windows, const KvStore& kv, const ModelConfig& c, ForwardPlan& p) {
  const size_t nw = windows.size();
  std::vector<int32_t> len(static_cast<size_t>(c.num_layers), 0);  // each layer's tables, all windows
  for (const ForwardWindow& w : windows)
    for (size_t l = 0; l < len.size(); ++l)
      len[l] += static_cast<int32_t>(w.view ? w.view->pool_blocks[l].size() : kv.block_table(w.seq).size());
  for (int32_t n : len) p.layer_table_len = std::max(p.layer_table_len, n);
  p.layer_windows.resize(len.size() * nw);
  p.layer_tables.assign(len.size() * static_cast<size_t>(p.layer_table_len), 0);
  for (size_t l = 0; l < len.size(); ++l) {
    int32_t at = 0;
    for (size_t wi = 0; wi < nw; ++wi) {
      const ForwardWindow& w = windows[wi];
      const AttentionWindowDesc& all = p.attention.windows[wi];
      // Without a view: the window's whole table as planned, its host-tier blocks pointing
      // at their ring blocks (the store's table holds kOnHost there, no block at all).
      const std::span<const int32_t> table =
          w.view ? std::span<const int32_t>(w.view->pool_blocks[l])
                 : std::span<const int32_t>(p.block_tables)
                       .subspan(static_cast<size_t>(all.block_table_offset), kv.block_table(w.seq).size());
      // Without a view the window reads its whole prefix: [0, its start).
      const int32_t prefix = w.view ? w.view->lengths[l] : p.positions[static_cast<size_t>(all.first_token)];
      p.layer_windows[l * nw + wi] = {prefix, all.first_token, all.n, at};
      std::copy(table.begin(), table.end(), p.layer_tables.begin() + static_cast<std::ptrdiff_t>(l) * p.layer_table_len + at);
      at += static_cast<int32_t>(table.size());
    }
  }
}

}  // namespace

size_t view_tables_offset(const ForwardPlan& p) { return align16(static_cast<size_t>(p.windows()) * sizeof(AttentionWindowDesc)); }

size_t view_layer_bytes(const ForwardPlan& p) {
  return view_tables_offset(p) + align16(static_cast<size_t>(p.layer_table_len) * 4);
}

void pack_view_meta(const ForwardPlan& p, int32_t num_layers, size_t stride, std::span<unsigned char> host) {
  if (stride < view_layer_bytes(p) || host.size() < stride * static_cast<size_t>(num_layers))
    fail(ErrorCode::invalid_argument, "CUDA forward: a view metadata buffer of {} bytes, {} layers of {} needed",
         host.size(), num_layers, view_layer_bytes(p));
  const auto nw = static_cast<size_t>(p.windows());
  const auto tl = static_cast<size_t>(p.layer_table_len);
  for (size_t l = 0; l < static_cast<size_t>(num_layers); ++l) {
    unsigned char* at = host.data() + l * stride;
    std::memcpy(at, p.layer_windows.data() + l * nw, nw * sizeof(AttentionWindowDesc));
    if (tl > 0) std::memcpy(at + view_tables_offset(p), p.layer_tables.data() + l * tl, tl * 4);
  }
}

size_t ForwardMetaLayout::chain_positions(int32_t step) const { return chain_slots(step) + align16(max_tokens * 8); }

size_t ForwardMetaLayout::chain_windows(int32_t step) const {
  return chain_positions(step) + align16(max_tokens * 4);
}

ForwardMetaLayout forward_meta_layout(const ModelConfig& config, int32_t max_tokens, int32_t num_blocks,
                                      int32_t block_size, bool host_tier) {
  ForwardMetaLayout l;
  const auto m = static_cast<size_t>(max_tokens);
  l.max_tokens = m;
  l.slots = 0;
  l.tokens = align16(m * 8);
  l.positions = l.tokens + align16(m * 4);
  l.token_window = l.positions + align16(m * 4);
  l.logit_index = l.token_window + align16(m * 4);
  l.windows = l.logit_index + align16(m * 4);
  l.tables = l.windows + align16(m * sizeof(AttentionWindowDesc));
  const int64_t positions_max = (config.max_position_embeddings + block_size - 1) / block_size + 1;
  const int64_t table_max = host_tier ? positions_max : std::min<int64_t>(num_blocks, positions_max);
  l.chain = align16(l.tables + m * static_cast<size_t>(table_max) * 4);
  l.chain_step_bytes = align16(m * 8) + align16(m * 4) + align16(m * sizeof(AttentionWindowDesc));
  l.identity = l.chain + static_cast<size_t>(kMaxChainSteps - 1) * l.chain_step_bytes;
  l.chain_bytes = l.identity + align16(m * 4) - l.chain;
  return l;
}

void check_store_layout(const KvStore& kv, const ModelConfig& c, const ForwardGeometry& g) {
  const KvStoreConfig& kc = kv.config();
  if (kc.block_size != g.block_size || kc.num_blocks > g.num_blocks || kc.num_layers != c.num_layers ||
      kc.num_kv_heads != c.num_kv_heads || kc.head_dim != c.head_dim)
    fail(ErrorCode::invalid_argument, "CUDA forward: the KV store's layout does not match the device pool");
  if (g.num_blocks == 0) fail(ErrorCode::invalid_argument, "CUDA forward: no KV pool allocated (allocate_kv_pool)");
}

ForwardPlan plan_forward(std::span<const ForwardWindow> windows, int32_t steps, bool chain, bool stage,
                         const KvStore& kv, const ModelConfig& c, const ForwardGeometry& g) {
  if (chain && (steps < 1 || steps > kMaxChainSteps))
    fail(ErrorCode::invalid_argument, "CUDA forward: a greedy chain of {} steps (1..{})", steps, kMaxChainSteps);
  if (!chain && steps != 1) fail(ErrorCode::invalid_argument, "CUDA forward: {} steps without a greedy chain", steps);
  check_store_layout(kv, c, g);
  if (windows.empty()) fail(ErrorCode::invalid_argument, "CUDA forward: no windows");

  ForwardPlan p;
  p.steps = steps;
  p.chain = chain;
  p.stage = stage;
  // A chain's later steps need positions [start + n, start + n + steps - 1) reserved too.
  const std::vector<int32_t> starts = window_starts(windows, kv, c, steps - 1);
  std::vector<AttentionWindowSpec> specs;
  std::vector<int32_t> table_at;
  int32_t table_len = 0, chain_chunks = 0;
  bool views = false;
  for (size_t wi = 0; wi < windows.size(); ++wi) {
    const ForwardWindow& w = windows[wi];
    const auto n = static_cast<int32_t>(w.tokens.size());
    int32_t keys = starts[wi];  // the longest prefix any layer reads (the split-K grid)
    if (w.view) {
      keys = 0;
      check_view(*w.view, w.seq, starts[wi], chain, kv, c);
      for (int32_t len : w.view->lengths) keys = std::max(keys, len);
      views = true;
    }
    specs.push_back({keys, n, table_len});
    table_at.push_back(table_len);
    table_len += static_cast<int32_t>(kv.block_table(w.seq).size());
    p.total_tokens += n;
    p.logit_rows += chain ? 1 : logit_rows(w);
    // The keys a row may reach: a view's, or the whole prefix (a chain's later steps too).
    // A view of a host-tier sequence reaches far less than its context, which the pool,
    // and so a graph's chunk capacity, may not cover.
    chain_chunks = std::max(chain_chunks, attention_chunks(w.view ? keys + n : starts[wi] + n + steps - 1));
    if (chain && kv.host_blocks(w.seq) > 0)
      fail(ErrorCode::unsupported, "CUDA forward: a greedy chain over sequence {}, whose oldest K/V are on the host tier",
           w.seq);
  }
  if (p.total_tokens > g.max_tokens)
    fail(ErrorCode::invalid_argument, "CUDA forward: {} tokens in one forward, more than max_tokens {}",
         p.total_tokens, g.max_tokens);
  p.attention = plan_attention(specs);
  p.max_chunks = std::max(p.attention.max_chunks, chain_chunks);
  if (static_cast<size_t>(table_len) * 4 > g.meta.chain - g.meta.tables)
    fail(ErrorCode::invalid_argument, "CUDA forward: {} block table entries exceed the metadata buffer", table_len);
  p.upload_bytes = g.meta.tables + static_cast<size_t>(table_len) * 4;

  // Rows window after window: token ids, positions, slots, block tables, logits rows.
  const size_t nw = windows.size();
  p.tokens.reserve(static_cast<size_t>(p.total_tokens));
  p.positions.reserve(static_cast<size_t>(p.total_tokens));
  p.slots.reserve(static_cast<size_t>(p.total_tokens));
  p.block_tables.reserve(static_cast<size_t>(table_len));
  p.logit_index.reserve(static_cast<size_t>(p.logit_rows));
  p.shape.reserve(2 * nw);
  int32_t row = 0, lr = 0;
  std::unordered_map<SeqId, int32_t> ring_at;  // a sequence's first ring block (offload)
  for (size_t wi = 0; wi < nw; ++wi) {
    const ForwardWindow& w = windows[wi];
    const auto n = static_cast<int32_t>(w.tokens.size());
    for (int32_t i = 0; i < n; ++i) {
      p.tokens.push_back(w.tokens[static_cast<size_t>(i)]);
      p.positions.push_back(starts[wi] + i);
      p.slots.push_back(stage ? row + i : kv.slot(w.seq, starts[wi] + i));
    }
    const auto table = kv.block_table(w.seq);
    const size_t table_start = p.block_tables.size();
    p.block_tables.insert(p.block_tables.end(), table.begin(), table.end());
    // A partial view reads the pool only (its layer tables): its host blocks stay put,
    // and its whole-prefix table, which no kernel reads then, keeps their kOnHost entries.
    if (!w.view)
      add_ring_blocks(kv, w.seq, std::span<int32_t>(p.block_tables).subspan(table_start), ring_at, p.ring_host_blocks);
    const int32_t rows = chain ? 1 : logit_rows(w);
    p.first_logit_row.push_back(lr);
    p.window_logit_rows.push_back(rows);
    for (int32_t i = 0; i < rows; ++i) p.logit_index.push_back(row + n - rows + i);
    lr += rows;
    row += n;
    p.shape.push_back(n);
    p.shape.push_back(rows);
  }
  if (views) plan_views(windows, kv, c, p);
  for (int32_t s = 1; s < steps; ++s) {
    ChainStepPlan cs;
    for (size_t wi = 0; wi < nw; ++wi) {
      const ForwardWindow& w = windows[wi];
      const int32_t pos = starts[wi] + static_cast<int32_t>(w.tokens.size()) - 1 + s;
      cs.slots.push_back(kv.slot(w.seq, pos));
      cs.positions.push_back(pos);
      cs.windows.push_back({pos, static_cast<int32_t>(wi), 1, table_at[wi]});
    }
    p.chain_steps.push_back(std::move(cs));
  }
  return p;
}

std::vector<int32_t> graph_key(const ForwardPlan& plan, bool copy_logits, int32_t timing_skip) {
  std::vector<int32_t> key;
  key.reserve(plan.shape.size() + 4);
  key.insert(key.end(), plan.shape.begin(), plan.shape.end());
  key.push_back(copy_logits ? 1 : 0);
  key.push_back(plan.steps);
  key.push_back(plan.stage ? 1 : 0);
  key.push_back(timing_skip);
  // Partial views: per-layer windows and tables from their own buffer (an odd-length key).
  if (plan.views()) key.push_back(1);
  return key;
}

void pack_forward_meta(const ForwardPlan& p, const ForwardMetaLayout& meta, std::span<unsigned char> host) {
  if (host.size() < meta.bytes())
    fail(ErrorCode::invalid_argument, "CUDA forward: a metadata buffer of {} bytes, the layout needs {}", host.size(),
         meta.bytes());
  put(host, meta.token_window, p.attention.token_window);
  put(host, meta.windows, p.attention.windows);
  put(host, meta.tokens, p.tokens);
  put(host, meta.positions, p.positions);
  put(host, meta.slots, p.slots);
  put(host, meta.tables, p.block_tables);
  put(host, meta.logit_index, p.logit_index);
  if (p.steps <= 1) return;
  for (int32_t s = 1; s < p.steps; ++s) {
    const ChainStepPlan& cs = p.chain_steps[static_cast<size_t>(s - 1)];
    put(host, meta.chain_slots(s), cs.slots);
    put(host, meta.chain_positions(s), cs.positions);
    put(host, meta.chain_windows(s), cs.windows);
  }
  auto* identity = reinterpret_cast<int32_t*>(host.data() + meta.identity);
  for (size_t i = 0; i < meta.max_tokens; ++i) identity[i] = static_cast<int32_t>(i);
}

}  // namespace specpipe::cuda
