#include "model/transformer.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/thread_pool.h"
#include "kvstore/copy_stream.h"
#include "kvstore/layer_prefill_writer.h"
#include "model/layer_prefill_check.h"

namespace specpipe {

/// Activations of one forward, [tokens, width] row-major; grown, never shrunk.
struct Transformer::Scratch {
  std::vector<float> x, h, q, k, v, attn, gate, up;
  std::vector<int32_t> positions;  // each row's absolute position (RoPE)
  int64_t tokens = 0;
  void resize(const ModelConfig& c, int64_t t) {
    if (t <= tokens) return;
    tokens = t;
    auto grow = [t](std::vector<float>& b, int64_t width) { b.resize(static_cast<size_t>(t * width)); };
    grow(x, c.hidden_size);
    grow(h, c.hidden_size);
    grow(q, c.q_dim());
    grow(k, c.kv_dim());
    grow(v, c.kv_dim());
    grow(attn, c.q_dim());
    grow(gate, c.intermediate_size);
    grow(up, c.intermediate_size);
  }
};

namespace {
cpu::PackedMatrix pack(const MatrixWeight& w) { return {w.dtype, w.data, w.rows, w.cols}; }
}  // namespace

Transformer::Transformer(ModelConfig config, ModelWeights weights)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      lm_head_(pack(weights_.lm_head)),
      rope_(config_.head_dim, config_.rope_theta, config_.max_position_embeddings, config_.rope_scaling),
      scratch_(std::make_unique<Scratch>()) {
  for (const LayerWeights& l : weights_.layers)
    packed_.push_back({pack(l.q_proj), pack(l.k_proj), pack(l.v_proj), pack(l.o_proj),
                       pack(l.gate_proj), pack(l.up_proj), pack(l.down_proj)});
}

Transformer::~Transformer() = default;

KvStoreConfig Transformer::kv_config(int32_t num_blocks, int32_t block_size) const {
  return kv_store_layout(config_, num_blocks, block_size, /*device_pool=*/false);
}

namespace {
cpu::LinearTarget target(const cpu::PackedMatrix& w, const std::vector<float>& bias, float* y,
                         int64_t ldy, bool accumulate = false) {
  return {&w, bias.empty() ? nullptr : bias.data(), y, ldy, accumulate};
}
}  // namespace

void Transformer::forward(std::span<const ForwardWindow> windows, const KvStore& kv,
                          KvWriteSink& sink, Logits& out) {
  phases_.start(phase_profile_);
  const ModelConfig& c = config_;
  if (!kv.tensors().holds_pool())
    fail(ErrorCode::invalid_argument, "CPU forward: the KV store keeps no host tensors (its pool is on a device)");
  const std::vector<int32_t> starts = window_starts(windows, kv, c);
  int64_t total = 0;
  for (const ForwardWindow& w : windows) total += static_cast<int64_t>(w.tokens.size());
  Scratch& s = *scratch_;
  s.resize(c, total);
  phases_.end(ForwardPhaseProfile::other);

  embed(windows);
  phases_.end(ForwardPhaseProfile::embed);
  // Sequences with K/V on the host tier: every layer's host part streams through the
  // ring; a forward that fails half way drains the ring's copies before it returns.
  LayerRing* ring = nullptr;
  if (const HostKvTier* tier = kv.host_tier()) {
    std::vector<std::span<const int32_t>> host_tables;
    for (const ForwardWindow& w : windows) {
      // A SpecPV partial view reads pool blocks only (copies of its host-tier blocks):
      // nothing of it streams.
      host_tables.push_back(w.view ? std::span<const int32_t>{} : kv.host_block_table(w.seq));
      if (!host_tables.back().empty() && !ring_)
        fail(ErrorCode::invalid_argument,
             "CPU forward: sequence {} has K/V on the host tier but the model has no layer ring (enable_layer_ring)",
             w.seq);
      if (!host_tables.back().empty()) ring = ring_.get();
    }
    if (ring) ring->begin(*tier, host_tables, c.num_layers);
  }
  struct RingGuard {
    LayerRing* ring;
    ~RingGuard() {
      if (ring && ring->active()) ring->abandon();
    }
  } guard{ring};
  row_positions(windows, starts);
  for (int32_t layer = 0; layer < c.num_layers; ++layer) layer_forward(layer, windows, starts, kv, sink, ring);
  if (ring) ring->finish();
  phases_.end(ForwardPhaseProfile::other);
  head(windows, out);
  phases_.start(nullptr);
}

void Transformer::prefill_layerwise(SeqId seq, std::span<const int32_t> prompt, const KvStore& kv,
                                    KvWriteSink& sink, Logits& out) {
  const ModelConfig& c = config_;
  if (!kv.tensors().holds_pool())
    fail(ErrorCode::invalid_argument, "CPU forward: the KV store keeps no host tensors (its pool is on a device)");
  check_layer_prefill(seq, prompt, kv, c);
  phases_.start(nullptr);
  // One window of the whole prompt from position 0: no prefix to read (the host part is
  // booked, not written), every key from the window's own rows; the sink sends each
  // layer's rows to the host tier and the pool.
  const ForwardWindow w{seq, prompt, LogitsMode::last};
  const std::array<int32_t, 1> starts{0};
  scratch_->resize(c, static_cast<int64_t>(prompt.size()));
  embed({&w, 1});
  row_positions({&w, 1}, starts);
  for (int32_t layer = 0; layer < c.num_layers; ++layer) layer_forward(layer, {&w, 1}, starts, kv, sink, nullptr);
  head({&w, 1}, out);
}

void Transformer::prefill_layerwise(SeqId seq, std::span<const int32_t> prompt, const KvStore& kv, Logits& out) {
  // The writer fills the booked host blocks through the tier's memory, as the device's
  // copies do; the store's books are not changed.
  KvStore& store = const_cast<KvStore&>(kv);
  std::shared_ptr<CopyStream> copies;
  if (copy_overlap_) copies = std::make_shared<ThreadCopyStream>();
  else copies = std::make_shared<InlineCopyStream>();
  LayerPrefillWriter writer(store, seq, std::move(copies));
  prefill_layerwise(seq, prompt, kv, writer, out);
  writer.finish();
}

void Transformer::embed(std::span<const ForwardWindow> windows) {
  const ModelConfig& c = config_;
  int64_t row = 0;
  for (const ForwardWindow& w : windows) {
    cpu::embedding(weights_.embed_tokens.dtype, weights_.embed_tokens.data, c.vocab_size, c.hidden_size, w.tokens,
                   scratch_->x.data() + row * c.hidden_size, c.hidden_size);
    row += static_cast<int64_t>(w.tokens.size());
  }
}

void Transformer::head(std::span<const ForwardWindow> windows, Logits& out) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  // Final norm and LM head, only for the rows that need logits.
  std::vector<int32_t> rows_per_window;
  int64_t logit_rows_total = 0;
  int64_t row = 0;
  for (const ForwardWindow& w : windows) {
    const auto n = static_cast<int32_t>(w.tokens.size());
    const int32_t rows = logit_rows(w);
    rows_per_window.push_back(rows);
    // Gather the rows into h (contiguous), so the LM head runs once for the batch.
    const int64_t first_row = row + n - rows;
    for (int32_t i = 0; i < rows; ++i)
      std::copy_n(s.x.data() + (first_row + i) * c.hidden_size, c.hidden_size,
                  s.h.data() + (logit_rows_total + i) * c.hidden_size);
    logit_rows_total += rows;
    row += n;
  }
  const std::span<float> logits = out.prepare(c.vocab_size, rows_per_window);
  if (logit_rows_total == 0) return;
  cpu::rms_norm(s.h.data(), c.hidden_size, weights_.final_norm.data(), c.rms_norm_eps, logit_rows_total,
                c.hidden_size, s.h.data(), c.hidden_size);
  phases_.end(ForwardPhaseProfile::head_norm);
  const cpu::LinearTarget head = target(lm_head_, {}, logits.data(), c.vocab_size);
  cpu::linear(s.h.data(), logit_rows_total, c.hidden_size, c.hidden_size, {&head, 1});
  phases_.end(ForwardPhaseProfile::lm_head);
}

void Transformer::enable_layer_ring(int32_t slots, bool overlap) {
  copy_overlap_ = overlap;
  ring_ = std::make_unique<LayerRing>(slots, overlap ? nullptr : std::make_unique<InlineCopyStream>());
}

void Transformer::row_positions(std::span<const ForwardWindow> windows, std::span<const int32_t> starts) {
  // Checked before the layers: the QK-norm + RoPE region must not throw.
  if (config_.qk_norm && config_.head_dim % 8 != 0)
    fail(ErrorCode::unsupported, "QK-norm: head_dim = {} is not a multiple of 8", config_.head_dim);
  std::vector<int32_t>& positions = scratch_->positions;
  positions.clear();
  for (size_t wi = 0; wi < windows.size(); ++wi) {
    const auto n = static_cast<int32_t>(windows[wi].tokens.size());
    if (n > 0 && starts[wi] + n > rope_.max_positions())
      fail(ErrorCode::out_of_capacity, "rope: position {} outside the model's {} positions", starts[wi] + n - 1,
           rope_.max_positions());
    for (int32_t i = 0; i < n; ++i) positions.push_back(starts[wi] + i);
  }
}

void Transformer::layer_forward(int32_t layer, std::span<const ForwardWindow> windows,
                                std::span<const int32_t> starts, const KvStore& kv,
                                KvWriteSink& sink, LayerRing* ring) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[static_cast<size_t>(layer)];
  const PackedLayer& pw = packed_[static_cast<size_t>(layer)];
  Scratch& s = *scratch_;
  const int64_t hidden = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), inter = c.intermediate_size;
  const int64_t total = [&] {
    int64_t t = 0;
    for (const ForwardWindow& fw : windows) t += static_cast<int64_t>(fw.tokens.size());
    return t;
  }();

  phases_.end(ForwardPhaseProfile::other);

  // --- attention block ---
  cpu::rms_norm(s.x.data(), hidden, w.input_norm.data(), c.rms_norm_eps, total, hidden, s.h.data(), hidden);
  phases_.end(ForwardPhaseProfile::norm);
  const cpu::LinearTarget qkv[] = {target(pw.q, w.q_bias, s.q.data(), qd),
                                   target(pw.k, w.k_bias, s.k.data(), kvd),
                                   target(pw.v, w.v_bias, s.v.data(), kvd)};
  cpu::linear(s.h.data(), total, hidden, hidden, qkv);
  phases_.end(ForwardPhaseProfile::qkv);

  // QK-norm (per head) and RoPE at each token's absolute position. Every head of q and k
  // is independent (rms_norm's rows are; apply_rope rotates head by head), so the rows x
  // heads split over the pool with the same bits as one thread; under two grains (a
  // 0.6B decode step's 24 heads) stay on the calling thread.
  const std::vector<int32_t>& positions = s.positions;  // row_positions, once a forward
  const int64_t heads = int64_t{c.num_heads} + c.num_kv_heads;
  auto qk_heads = [&](int64_t begin, int64_t end) {
    // The range's heads in runs of one row's q or k heads: one rms_norm and one
    // apply_rope call a run, as many calls as one row at a time took.
    for (int64_t u = begin, run; u < end; u += run) {
      const int64_t r = u / heads, h = u % heads;
      const bool is_q = h < c.num_heads;
      run = std::min(end - u, (is_q ? c.num_heads : heads) - h);
      float* x = is_q ? s.q.data() + r * qd + h * c.head_dim : s.k.data() + r * kvd + (h - c.num_heads) * c.head_dim;
      if (c.qk_norm)
        cpu::rms_norm(x, c.head_dim, (is_q ? w.q_norm : w.k_norm).data(), c.rms_norm_eps, run, c.head_dim, x,
                      c.head_dim);
      cpu::apply_rope(rope_, positions[static_cast<size_t>(r)], x, static_cast<int32_t>(run));
    }
  };
  constexpr int64_t kQkHeadGrain = 32;  // ~3 us of heads of 128 a chunk
  const int64_t qk_count = total * heads;
  if (qk_count >= 2 * kQkHeadGrain)
    cpu::parallel_for(qk_count, std::max(kQkHeadGrain, cpu::default_grain(qk_count)), qk_heads);
  else
    qk_heads(0, qk_count);
  phases_.end(ForwardPhaseProfile::qk_norm_rope);

  std::vector<WindowKvRows> kv_rows;
  std::vector<cpu::AttentionWindow> attn;
  std::vector<std::vector<float>> masses(windows.size());  // taps that want block mass
  const auto prefix_blocks = [&](size_t wi) {
    return (starts[wi] + kv.config().block_size - 1) / kv.config().block_size;
  };
  int64_t row = 0;
  const KvTensors& t = kv.tensors();
  for (size_t wi = 0; wi < windows.size(); ++wi) {
    const ForwardWindow& fw = windows[wi];
    const int32_t n = static_cast<int32_t>(fw.tokens.size());
    kv_rows.push_back({fw.seq, starts[wi], n, s.k.data() + row * kvd, s.v.data() + row * kvd, kvd});
    cpu::PagedPrefix prefix{t.k(layer), t.v(layer), t.slot_stride(), kv.block_table(fw.seq).data(),
                            kv.config().block_size, starts[wi]};
    if (fw.view) {
      // SpecPV: a gathered subset of the pool's blocks; the window itself still follows.
      prefix.block_table = fw.view->pool_blocks[static_cast<size_t>(layer)].data();
      prefix.length = fw.view->lengths[static_cast<size_t>(layer)];
    }
    if (fw.query_tap) fw.query_tap->on_queries(layer, s.q.data() + row * qd, n, qd);
    attn.push_back({prefix, s.q.data() + row * qd, s.k.data() + row * kvd, s.v.data() + row * kvd,
                    qd, kvd, n, s.attn.data() + row * qd, qd});
    if (fw.query_tap && fw.query_tap->wants_block_mass() && !fw.view) {
      masses[wi].resize(static_cast<size_t>(int64_t{n} * c.num_kv_heads * prefix_blocks(wi)));
      attn.back().block_mass = masses[wi].data();
    }
    row += n;
  }
  sink.write_layer(layer, kv_rows);
  phases_.end(ForwardPhaseProfile::kv_write);
  const cpu::AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim,
                                  1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  if (ring) {
    // This layer's host-tier K/V: the dense segment in front of each pool prefix. The
    // slot is taken as late and given back as early as the attention allows.
    const RingSlot slot = ring->acquire(layer);
    for (size_t wi = 0; wi < windows.size(); ++wi) {
      cpu::PagedPrefix& p = attn[wi].prefix;
      if (windows[wi].view) continue;  // its view is all in the pool
      p.dense_length = kv.host_blocks(windows[wi].seq) * kv.config().block_size;
      p.dense_k = slot.k + ring->offset(wi) * t.slot_stride();
      p.dense_v = slot.v + ring->offset(wi) * t.slot_stride();
    }
  }
  cpu::attention(shape, attn);
  if (ring) ring->release(layer);
  for (size_t wi = 0; wi < windows.size(); ++wi)
    if (attn[wi].block_mass)
      windows[wi].query_tap->on_block_mass(layer, attn[wi].block_mass, attn[wi].n, c.num_kv_heads, prefix_blocks(wi));
  phases_.end(ForwardPhaseProfile::attention);
  // x += o_proj(attn): the residual add is fused into the projection.
  const cpu::LinearTarget o = target(pw.o, w.o_bias, s.x.data(), hidden, true);
  cpu::linear(s.attn.data(), total, qd, qd, {&o, 1});
  phases_.end(ForwardPhaseProfile::o_proj);

  // --- MLP block ---
  cpu::rms_norm(s.x.data(), hidden, w.post_attention_norm.data(), c.rms_norm_eps, total, hidden,
                s.h.data(), hidden);
  phases_.end(ForwardPhaseProfile::norm);
  const cpu::LinearTarget gate_up[] = {target(pw.gate, w.gate_bias, s.gate.data(), inter),
                                       target(pw.up, w.up_bias, s.up.data(), inter)};
  cpu::linear(s.h.data(), total, hidden, hidden, gate_up);
  phases_.end(ForwardPhaseProfile::gate_up);
  cpu::silu_gate(s.gate.data(), s.up.data(), s.gate.data(), total, inter, inter);
  phases_.end(ForwardPhaseProfile::silu);
  const cpu::LinearTarget down = target(pw.down, w.down_bias, s.x.data(), hidden, true);
  cpu::linear(s.gate.data(), total, inter, inter, {&down, 1});
  phases_.end(ForwardPhaseProfile::down);
}

}  // namespace specpipe
