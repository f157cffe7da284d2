// The host plan of a CUDA forward (model/cuda/forward_plan.h): rows, slots, block tables,
// attention windows, logits rows, graph keys, the metadata bytes, the checks. No GPU.
#include "model/cuda/forward_plan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/cuda/small_config.h"

namespace specpipe::cuda {
namespace {

constexpr int32_t kBlocks = 128, kBlockSize = 4, kMaxTokens = 16;

struct ForwardPlanTest : ::testing::Test {
  ModelConfig config = small_plan_config();
  KvStore kv{kv_store_layout(config, kBlocks, kBlockSize, /*device_pool=*/true)};
  ForwardGeometry geometry{kMaxTokens, kBlocks, kBlockSize,
                           forward_meta_layout(config, kMaxTokens, kBlocks, kBlockSize)};

  /// A sequence of `committed` tokens with positions [0, reserved) reserved.
  SeqId add(int32_t committed, int32_t reserved) {
    const std::vector<int32_t> prompt(static_cast<size_t>(committed), 7);
    const SeqId s = kv.add_sequence(prompt);
    kv.reserve(s, reserved);
    kv.commit(s, prompt);
    return s;
  }
  /// Block table entries of `seq`, as the plan concatenates them.
  std::vector<int32_t> table(SeqId seq) const {
    const auto t = kv.block_table(seq);
    return {t.begin(), t.end()};
  }
  ForwardPlan plan(std::span<const ForwardWindow> windows, int32_t steps = 1, bool chain = false,
                   bool stage = false) {
    return plan_forward(windows, steps, chain, stage, kv, config, geometry);
  }
};

template <typename T>
T read(const std::vector<unsigned char>& bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof(T));
  return v;
}

ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no Error thrown";
  return ErrorCode::internal;
}

TEST(ForwardMetaLayout, FixedAlignedLayout) {
  const ModelConfig c = small_plan_config();
  const ForwardMetaLayout l = forward_meta_layout(c, kMaxTokens, kBlocks, kBlockSize);
  EXPECT_EQ(l.slots, 0u);
  EXPECT_EQ(l.tokens, 16u * 8);
  EXPECT_EQ(l.positions, l.tokens + 16 * 4);
  EXPECT_EQ(l.token_window, l.positions + 16 * 4);
  EXPECT_EQ(l.logit_index, l.token_window + 16 * 4);
  EXPECT_EQ(l.windows, l.logit_index + 16 * 4);
  EXPECT_EQ(l.tables, l.windows + 16 * sizeof(AttentionWindowDesc));
  // Per row a table of min(pool, positions / block + 1) = min(128, 65) blocks.
  EXPECT_EQ(l.table_capacity(), 16u * 65);
  EXPECT_EQ(l.chain_step_bytes, 16u * 8 + 16 * 4 + 16 * sizeof(AttentionWindowDesc));
  EXPECT_EQ(l.chain_slots(1), l.chain);
  EXPECT_EQ(l.chain_positions(2), l.chain + l.chain_step_bytes + 16 * 8);
  EXPECT_EQ(l.chain_windows(2), l.chain_positions(2) + 16 * 4);
  EXPECT_EQ(l.identity, l.chain + (kMaxChainSteps - 1) * l.chain_step_bytes);
  EXPECT_EQ(l.bytes(), l.identity + 16 * 4);
  for (size_t off : {l.tokens, l.positions, l.token_window, l.logit_index, l.windows, l.tables, l.chain,
                     l.chain_positions(3), l.chain_windows(3), l.identity})
    EXPECT_EQ(off % 16, 0u);
  // A small pool bounds the tables; an odd max_tokens keeps every array 16-byte aligned.
  const ForwardMetaLayout s = forward_meta_layout(c, 3, 5, kBlockSize);
  EXPECT_EQ(s.tokens, 32u);
  EXPECT_EQ(s.positions, 48u);
  EXPECT_EQ(s.chain, s.tables + 64);  // 3 rows x 5 blocks x 4 bytes = 60, aligned
}

TEST_F(ForwardPlanTest, DecodeStepOfTwoSequences) {
  const SeqId a = add(5, 6), b = add(130, 131);
  const int32_t ta = 11, tb = 12;
  const ForwardWindow windows[] = {{a, {&ta, 1}}, {b, {&tb, 1}}};
  const ForwardPlan p = plan(windows);
  EXPECT_EQ(p.total_tokens, 2);
  EXPECT_EQ(p.logit_rows, 2);
  EXPECT_EQ(p.windows(), 2);
  EXPECT_EQ(p.ids(), 2);
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{11, 12}));
  EXPECT_EQ(p.positions, (std::vector<int32_t>{5, 130}));
  EXPECT_EQ(p.slots, (std::vector<int64_t>{kv.slot(a, 5), kv.slot(b, 130)}));
  std::vector<int32_t> tables = table(a);
  const auto table_b = table(b);
  tables.insert(tables.end(), table_b.begin(), table_b.end());
  EXPECT_EQ(p.block_tables, tables);
  ASSERT_EQ(p.attention.windows.size(), 2u);
  EXPECT_EQ(p.attention.windows[1].prefix_len, 130);
  EXPECT_EQ(p.attention.windows[1].first_token, 1);
  EXPECT_EQ(p.attention.windows[1].n, 1);
  EXPECT_EQ(p.attention.windows[1].block_table_offset, static_cast<int32_t>(table(a).size()));
  EXPECT_EQ(p.logit_index, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(p.first_logit_row, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(p.window_logit_rows, (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(p.max_chunks, attention_chunks(131));  // 2
  EXPECT_TRUE(p.chain_steps.empty());
  EXPECT_EQ(p.shape, (std::vector<int32_t>{1, 1, 1, 1}));
  EXPECT_EQ(graph_key(p, true, 0), (std::vector<int32_t>{1, 1, 1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(graph_key(p, false, 4), (std::vector<int32_t>{1, 1, 1, 1, 0, 1, 0, 4}));
  EXPECT_EQ(p.upload_bytes, geometry.meta.tables + tables.size() * 4);
}

TEST_F(ForwardPlanTest, VerifyWindowsOfMixedLength) {
  const SeqId a = add(9, 12), b = add(3, 4), c = add(20, 24);
  const std::vector<int32_t> ta = {1, 2, 3}, tb = {4}, tc = {5, 6, 7, 8};
  const ForwardWindow windows[] = {{a, ta, LogitsMode::all}, {b, tb, LogitsMode::last}, {c, tc, LogitsMode::none}};
  const ForwardPlan p = plan(windows);
  EXPECT_EQ(p.total_tokens, 8);
  EXPECT_EQ(p.logit_rows, 4);
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(p.positions, (std::vector<int32_t>{9, 10, 11, 3, 20, 21, 22, 23}));
  for (int32_t i = 0; i < 3; ++i) EXPECT_EQ(p.slots[static_cast<size_t>(i)], kv.slot(a, 9 + i));
  EXPECT_EQ(p.slots[3], kv.slot(b, 3));
  for (int32_t i = 0; i < 4; ++i) EXPECT_EQ(p.slots[static_cast<size_t>(4 + i)], kv.slot(c, 20 + i));
  EXPECT_EQ(p.attention.token_window, (std::vector<int32_t>{0, 0, 0, 1, 2, 2, 2, 2}));
  EXPECT_EQ(p.attention.windows[2].first_token, 4);
  EXPECT_EQ(p.attention.windows[2].block_table_offset, static_cast<int32_t>(table(a).size() + table(b).size()));
  EXPECT_EQ(p.logit_index, (std::vector<int32_t>{0, 1, 2, 3}));  // all of a, the last (only) of b, none of c
  EXPECT_EQ(p.first_logit_row, (std::vector<int64_t>{0, 3, 4}));
  EXPECT_EQ(p.window_logit_rows, (std::vector<int32_t>{3, 1, 0}));
  EXPECT_EQ(p.shape, (std::vector<int32_t>{3, 3, 1, 1, 4, 0}));
  EXPECT_EQ(p.ids(), 4);

  // An explicit later start (a prefill chunk after one not yet committed); last row only.
  const std::vector<int32_t> chunk = {9, 9};
  const ForwardWindow later[] = {{c, chunk, LogitsMode::last, 22}};
  const ForwardPlan q = plan(later);
  EXPECT_EQ(q.positions, (std::vector<int32_t>{22, 23}));
  EXPECT_EQ(q.logit_index, (std::vector<int32_t>{1}));
  EXPECT_EQ(q.attention.windows[0].prefix_len, 22);

  // A staged round: the rows' "slots" are the rows.
  const ForwardPlan s = plan(windows, 1, false, /*stage=*/true);
  EXPECT_EQ(s.slots, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  const std::vector<int32_t> key = graph_key(s, true, 0);
  EXPECT_EQ(key[key.size() - 2], 1);  // stage
  EXPECT_NE(key, graph_key(p, true, 0));
}

TEST_F(ForwardPlanTest, ChainedSteps) {
  // Each window's later steps write positions start + n - 1 + s, s = 1..steps-1.
  const SeqId a = add(126, 132), b = add(2, 6);
  const std::vector<int32_t> ta = {1, 2}, tb = {3};
  const ForwardWindow windows[] = {{a, ta}, {b, tb}};
  const ForwardPlan p = plan(windows, 4, /*chain=*/true);
  EXPECT_TRUE(p.chain);
  EXPECT_EQ(p.steps, 4);
  EXPECT_EQ(p.total_tokens, 3);
  EXPECT_EQ(p.logit_rows, 2);  // one per window: its last row
  EXPECT_EQ(p.logit_index, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(p.window_logit_rows, (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(p.ids(), 8);  // steps x windows
  // Window a's last step is at position 126 + 2 - 1 + 3 = 130: 131 keys, 2 chunks.
  EXPECT_EQ(p.attention.max_chunks, 1);
  EXPECT_EQ(p.max_chunks, 2);
  ASSERT_EQ(p.chain_steps.size(), 3u);
  for (int32_t s = 1; s < 4; ++s) {
    const ChainStepPlan& cs = p.chain_steps[static_cast<size_t>(s - 1)];
    EXPECT_EQ(cs.positions, (std::vector<int32_t>{127 + s, 2 + s}));
    EXPECT_EQ(cs.slots, (std::vector<int64_t>{kv.slot(a, 127 + s), kv.slot(b, 2 + s)}));
    ASSERT_EQ(cs.windows.size(), 2u);
    EXPECT_EQ(cs.windows[0].prefix_len, 127 + s);
    EXPECT_EQ(cs.windows[0].first_token, 0);
    EXPECT_EQ(cs.windows[1].first_token, 1);
    EXPECT_EQ(cs.windows[1].n, 1);
    EXPECT_EQ(cs.windows[1].block_table_offset, static_cast<int32_t>(table(a).size()));
  }
  EXPECT_EQ(graph_key(p, false, 0), (std::vector<int32_t>{2, 1, 1, 1, 0, 4, 0, 0}));
  // Staging is the caller's business; a chain of one step is a forward with one id per window.
  const ForwardPlan one = plan(windows, 1, true);
  EXPECT_TRUE(one.chain_steps.empty());
  EXPECT_EQ(one.ids(), 2);
}

TEST_F(ForwardPlanTest, PacksTheMetadata) {
  const SeqId a = add(9, 16), b = add(3, 8);
  const std::vector<int32_t> ta = {1, 2, 3}, tb = {4};
  const ForwardWindow windows[] = {{a, ta, LogitsMode::all}, {b, tb}};
  const ForwardMetaLayout& l = geometry.meta;
  std::vector<unsigned char> host(l.bytes(), 0xAB);
  const ForwardPlan p = plan(windows);
  pack_forward_meta(p, l, host);
  for (int32_t i = 0; i < p.total_tokens; ++i) {
    const auto r = static_cast<size_t>(i);
    EXPECT_EQ(read<int64_t>(host, l.slots + r * 8), p.slots[r]);
    EXPECT_EQ(read<int32_t>(host, l.tokens + r * 4), p.tokens[r]);
    EXPECT_EQ(read<int32_t>(host, l.positions + r * 4), p.positions[r]);
    EXPECT_EQ(read<int32_t>(host, l.token_window + r * 4), p.attention.token_window[r]);
  }
  for (size_t r = 0; r < p.logit_index.size(); ++r)
    EXPECT_EQ(read<int32_t>(host, l.logit_index + r * 4), p.logit_index[r]);
  for (size_t w = 0; w < 2; ++w) {
    const auto desc = read<AttentionWindowDesc>(host, l.windows + w * sizeof(AttentionWindowDesc));
    EXPECT_EQ(desc.prefix_len, p.attention.windows[w].prefix_len);
    EXPECT_EQ(desc.first_token, p.attention.windows[w].first_token);
    EXPECT_EQ(desc.n, p.attention.windows[w].n);
    EXPECT_EQ(desc.block_table_offset, p.attention.windows[w].block_table_offset);
  }
  for (size_t i = 0; i < p.block_tables.size(); ++i)
    EXPECT_EQ(read<int32_t>(host, l.tables + i * 4), p.block_tables[i]);
  EXPECT_EQ(p.upload_bytes, l.tables + p.block_tables.size() * 4);
  EXPECT_EQ(host[p.upload_bytes], 0xAB);  // past the used tables: untouched
  EXPECT_EQ(host[l.chain], 0xAB);         // one step: the chain area is neither written nor uploaded

  // A chain writes its later steps and the identity.
  const ForwardPlan c = plan(windows, 3, true);
  pack_forward_meta(c, l, host);
  for (int32_t s = 1; s < 3; ++s)
    for (size_t w = 0; w < 2; ++w) {
      const ChainStepPlan& cs = c.chain_steps[static_cast<size_t>(s - 1)];
      EXPECT_EQ(read<int64_t>(host, l.chain_slots(s) + w * 8), cs.slots[w]);
      EXPECT_EQ(read<int32_t>(host, l.chain_positions(s) + w * 4), cs.positions[w]);
      EXPECT_EQ(read<AttentionWindowDesc>(host, l.chain_windows(s) + w * sizeof(AttentionWindowDesc)).prefix_len,
                cs.windows[w].prefix_len);
    }
  for (int32_t i = 0; i < kMaxTokens; ++i)
    EXPECT_EQ(read<int32_t>(host, l.identity + static_cast<size_t>(i) * 4), i);

  std::vector<unsigned char> small(l.bytes() - 1);
  EXPECT_EQ(code_of([&] { pack_forward_meta(p, l, small); }), ErrorCode::invalid_argument);
}

TEST_F(ForwardPlanTest, RefusesWhatTheForwardCannotRun) {
  const SeqId a = add(9, 12);
  const std::vector<int32_t> three = {1, 2, 3};
  const ForwardWindow ok[] = {{a, three}};
  EXPECT_NO_THROW(plan(ok));
  // No windows.
  EXPECT_EQ(code_of([&] { plan({}); }), ErrorCode::invalid_argument);
  // Past the reserved range (12 reserved, positions 9..12 needed).
  const std::vector<int32_t> four = {1, 2, 3, 4};
  const ForwardWindow past[] = {{a, four}};
  EXPECT_EQ(code_of([&] { plan(past); }), ErrorCode::invalid_argument);
  // A chain's later steps need their positions reserved too.
  EXPECT_EQ(code_of([&] { plan(ok, 2, true); }), ErrorCode::invalid_argument);
  // Starting inside the committed tokens.
  const ForwardWindow inside[] = {{a, three, LogitsMode::last, 8}};
  EXPECT_EQ(code_of([&] { plan(inside); }), ErrorCode::invalid_argument);
  // A token outside the vocabulary.
  const std::vector<int32_t> bad_token = {100};
  const ForwardWindow oov[] = {{a, bad_token}};
  EXPECT_EQ(code_of([&] { plan(oov); }), ErrorCode::invalid_argument);
  // Past the model's positions.
  const SeqId full = add(254, 258);
  const ForwardWindow beyond[] = {{full, three}};
  EXPECT_EQ(code_of([&] { plan(beyond); }), ErrorCode::out_of_capacity);
  // More than max_tokens in one forward.
  const SeqId big = add(1, 1 + kMaxTokens + 1);
  const std::vector<int32_t> many(static_cast<size_t>(kMaxTokens) + 1, 5);
  const ForwardWindow too_many[] = {{big, many}};
  EXPECT_EQ(code_of([&] { plan(too_many); }), ErrorCode::invalid_argument);
  // Chains of 0 or more than kMaxChainSteps steps; steps without a chain.
  EXPECT_EQ(code_of([&] { plan(ok, 0, true); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([&] { plan(ok, kMaxChainSteps + 1, true); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([&] { plan(ok, 2, false); }), ErrorCode::invalid_argument);
  // No pool yet; a store of another layout.
  ForwardGeometry no_pool = geometry;
  no_pool.num_blocks = 0;
  EXPECT_EQ(code_of([&] { plan_forward(ok, 1, false, false, kv, config, no_pool); }), ErrorCode::invalid_argument);
  ForwardGeometry other_blocks = geometry;
  other_blocks.block_size = 8;
  EXPECT_EQ(code_of([&] { plan_forward(ok, 1, false, false, kv, config, other_blocks); }),
            ErrorCode::invalid_argument);
  ModelConfig other_heads = config;
  other_heads.num_kv_heads = 4;
  EXPECT_EQ(code_of([&] { plan_forward(ok, 1, false, false, kv, other_heads, geometry); }),
            ErrorCode::invalid_argument);
  // Block tables past the metadata's room.
  ForwardGeometry cramped = geometry;
  cramped.meta.chain = cramped.meta.tables + 4;
  EXPECT_EQ(code_of([&] { plan_forward(ok, 1, false, false, kv, config, cramped); }), ErrorCode::invalid_argument);
  try {
    plan(past);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reserved"), std::string::npos) << e.what();
  }
}

// SpecPV: a window with a partial view gets each layer's own attention window (the view's
// length as its prefix) and block table (the view's blocks); a window without one in the
// same forward reads its whole table in every layer. The packed bytes hold them layer by
// layer; the graph key tells view forwards apart; bad views are refused.
TEST_F(ForwardPlanTest, PartialViewsPlanEachLayersWindowsAndTables) {
  const SeqId a = add(22, 25), b = add(9, 10);  // a: blocks 0-5 (the last holds 2 tokens)
  const std::vector<int32_t> ta = table(a), tb = table(b);
  PrefixView view;
  view.pool_blocks = {{ta[0], ta[3], ta[5]}, {ta[0], ta[5]}};
  view.lengths = {2 * kBlockSize + 2, kBlockSize + 2};
  const std::vector<int32_t> wa{1, 2, 3}, wb{4};
  ForwardWindow windows[2] = {{a, wa, LogitsMode::all}, {b, wb, LogitsMode::last}};
  windows[0].view = &view;
  const ForwardPlan p = plan(windows);
  ASSERT_TRUE(p.views());
  // Layer 0: a's 3 view blocks then b's table; layer 1: 2 view blocks then b's.
  EXPECT_EQ(p.layer_table_len, 3 + static_cast<int32_t>(tb.size()));
  ASSERT_EQ(p.layer_windows.size(), 4u);
  EXPECT_EQ(p.layer_windows[0].prefix_len, 10);
  EXPECT_EQ(p.layer_windows[0].block_table_offset, 0);
  EXPECT_EQ(p.layer_windows[1].prefix_len, 9);  // b: its whole prefix
  EXPECT_EQ(p.layer_windows[1].first_token, 3);
  EXPECT_EQ(p.layer_windows[1].block_table_offset, 3);
  EXPECT_EQ(p.layer_windows[2].prefix_len, 6);
  EXPECT_EQ(p.layer_windows[3].block_table_offset, 2);
  EXPECT_EQ(p.attention.max_chunks, 1);
  std::vector<int32_t> l1(p.layer_tables.begin() + p.layer_table_len, p.layer_tables.begin() + p.layer_table_len + 2 +
                                                                          static_cast<std::ptrdiff_t>(tb.size()));
  std::vector<int32_t> want1{ta[0], ta[5]};
  want1.insert(want1.end(), tb.begin(), tb.end());
  EXPECT_EQ(l1, want1);
  const size_t stride = view_layer_bytes(p) + 16;
  std::vector<unsigned char> bytes(2 * stride);
  pack_view_meta(p, 2, stride, bytes);
  EXPECT_EQ(read<AttentionWindowDesc>(bytes, stride).prefix_len, 6);
  EXPECT_EQ(read<int32_t>(bytes, stride + view_tables_offset(p) + 4), ta[5]);
  ForwardWindow plain[2] = {{a, wa, LogitsMode::all}, {b, wb, LogitsMode::last}};
  const ForwardPlan q = plan(plain);
  EXPECT_FALSE(q.views());
  EXPECT_EQ(graph_key(p, true, 0).size(), graph_key(q, true, 0).size() + 1);

  // Refused: layers missing, a length its blocks do not hold, one past the prefix, a
  // block outside the pool, a chain.
  auto refused = [&](const PrefixView& v, int32_t steps = 1, bool chain = false) {
    ForwardWindow w{a, wa, LogitsMode::all};
    w.view = &v;
    return code_of([&] { plan({&w, 1}, steps, chain); });
  };
  PrefixView bad = view;
  bad.lengths.pop_back();
  EXPECT_EQ(refused(bad), ErrorCode::invalid_argument);
  bad = view;
  bad.lengths[1] = 2 * kBlockSize + 1;
  EXPECT_EQ(refused(bad), ErrorCode::invalid_argument);
  bad.pool_blocks = {table(a), table(a)};
  bad.lengths = {23, 23};
  EXPECT_EQ(refused(bad), ErrorCode::invalid_argument);
  bad = view;
  bad.pool_blocks[0][1] = kBlocks;
  EXPECT_EQ(refused(bad), ErrorCode::invalid_argument);
  EXPECT_EQ(refused(view, 1, true), ErrorCode::invalid_argument);
}

}  // namespace
}  // namespace specpipe::cuda
