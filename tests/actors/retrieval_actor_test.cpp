// The retrieval actor alone (a real CAF actor, no model): asked with a refresh round's
// query sums, it summarises the sequences' verified full blocks from the store and
// answers each layer's top blocks. Keys and queries are small integers, so every score
// is exact and the brute-force Quest bound below gives the same ranking in any order.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <algorithm>
#include <memory>
#include <vector>

#include "actors/retrieval_actor.h"

namespace specpipe::actors {
namespace {

constexpr int32_t kLayers = 2, kKvHeads = 2, kHeadDim = 4, kBlock = 4, kHeads = 4;
constexpr int32_t kKvDim = kKvHeads * kHeadDim;

float key_at(int32_t pos, int32_t layer, int32_t i) {  // in [-7, 7], exact
  return static_cast<float>((pos * 7 + layer * 5 + i * 3) % 15 - 7);
}
float query_at(int32_t row, int32_t layer, int32_t i) {  // in [-4, 4]
  return static_cast<float>((row * 5 + layer * 3 + i * 7) % 9 - 4);
}

// The Quest bound of block b summed over the rows and heads, straight from the keys.
double bound(int32_t layer, int32_t b, int32_t rows) {
  double s = 0;
  for (int32_t r = 0; r < rows; ++r)
    for (int32_t h = 0; h < kHeads; ++h)
      for (int32_t e = 0; e < kHeadDim; ++e) {
        const int32_t i = h / (kHeads / kKvHeads) * kHeadDim + e;
        float mx = key_at(b * kBlock, layer, i), mn = mx;
        for (int32_t p = b * kBlock; p < (b + 1) * kBlock; ++p) {
          mx = std::max(mx, key_at(p, layer, i));
          mn = std::min(mn, key_at(p, layer, i));
        }
        const double q = query_at(r, layer, h * kHeadDim + e);
        s += std::max(q * mx, q * mn);
      }
  return s;
}

std::vector<int32_t> expected_top(int32_t layer, int32_t k, int32_t first, int32_t last, int32_t rows) {
  std::vector<int32_t> idx;
  for (int32_t b = first; b < last; ++b) idx.push_back(b);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return bound(layer, a, rows) > bound(layer, b, rows); });
  idx.resize(static_cast<size_t>(std::min<int32_t>(k, static_cast<int32_t>(idx.size()))));
  std::sort(idx.begin(), idx.end());
  return idx;
}

RetrievalQuery query_of(SeqId seq, int32_t verified, int32_t k, int32_t first, int32_t last, int32_t rows) {
  RetrievalQuery q{seq, verified, k, first, last, {}};
  const SummaryShape shape{kLayers, kKvHeads, kHeadDim, kBlock};
  for (int32_t l = 0; l < kLayers; ++l) {
    std::vector<float> rows_q;
    for (int32_t r = 0; r < rows; ++r)
      for (int32_t i = 0; i < kHeads * kHeadDim; ++i) rows_q.push_back(query_at(r, l, i));
    q.layers.push_back(QuerySums::of(shape, rows_q.data(), rows, kHeads * kHeadDim, kHeads));
  }
  return q;
}

TEST(RetrievalActor, AnswersTheTopBlocksOfEveryLayerFromTheRoundsQuerySums) {
  auto kv = std::make_shared<KvStore>(KvStoreConfig{.num_layers = kLayers, .num_kv_heads = kKvHeads, .head_dim = kHeadDim,
                                                    .block_size = kBlock, .num_blocks = 16, .prefix_cache = false});
  auto fill = [&](SeqId seq, int32_t n) {
    kv->reserve(seq, n);
    for (int32_t p = 0; p < n; ++p)
      for (int32_t l = 0; l < kLayers; ++l)
        for (int32_t i = 0; i < kKvDim; ++i) kv->tensors().k(l)[kv->slot(seq, p) * kKvDim + i] = key_at(p, l, i);
    kv->commit(seq, std::vector<int32_t>(static_cast<size_t>(n)));
  };
  const SeqId a = kv->add_sequence({});
  fill(a, 30);  // 7 full blocks
  const SeqId b = kv->add_sequence({});
  fill(b, 22);  // 5 full blocks, 2 of them verified

  caf::actor_system_config config;
  config.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system system{config};
  auto stats = std::make_shared<RetrievalActorStats>();
  auto actor = system.spawn(retrieval, RetrievalDeps{kv, nullptr, stats});
  auto ask = [&](RetrievalWork work) {
    RetrievalDone done;
    caf::scoped_actor self{system};
    self->request(actor, caf::infinite, std::move(work))
        .receive([&](RetrievalDone& d) { done = std::move(d); }, [&](const caf::error& e) { FAIL() << system.render(e); });
    return done;
  };

  RetrievalWork work;
  work.queries.push_back(query_of(a, 30, 3, 1, 6, 3));
  work.queries.push_back(query_of(b, 9, 2, 0, 5, 2));  // only blocks 0 and 1 are summarised
  work.queries.push_back(query_of(a + b + 7, 8, 1, 0, 2, 1));
  RetrievalQuery short_sums = query_of(b, 9, 1, 0, 5, 1);
  short_sums.layers.pop_back();
  work.queries.push_back(std::move(short_sums));
  RetrievalDone done = ask(std::move(work));
  ASSERT_EQ(done.answers.size(), 4u);
  for (int32_t l = 0; l < kLayers; ++l) {
    EXPECT_EQ(done.answers[0].blocks.at(static_cast<size_t>(l)), expected_top(l, 3, 1, 6, 3)) << "layer " << l;
    EXPECT_EQ(done.answers[1].blocks.at(static_cast<size_t>(l)), expected_top(l, 2, 0, 2, 2)) << "layer " << l;
  }
  EXPECT_TRUE(done.answers[0].selected && done.answers[0].error.empty());
  EXPECT_TRUE(done.answers[1].selected && done.answers[1].error.empty());
  // A sequence the store does not hold, sums of the wrong layers: that answer fails alone.
  EXPECT_FALSE(done.answers[2].selected);
  EXPECT_NE(done.answers[2].error.find("not in the KV store"), std::string::npos) << done.answers[2].error;
  EXPECT_NE(done.answers[3].error.find("query sums of 1 layers"), std::string::npos) << done.answers[3].error;

  // b's verified blocks grow: the next refresh summarises the new ones and ranks all 5.
  work.queries.clear();
  work.queries.push_back(query_of(b, 22, 2, 0, 5, 2));
  done = ask(std::move(work));
  ASSERT_EQ(done.answers.size(), 1u);
  for (int32_t l = 0; l < kLayers; ++l)
    EXPECT_EQ(done.answers[0].blocks.at(static_cast<size_t>(l)), expected_top(l, 2, 0, 5, 2)) << "layer " << l;
  EXPECT_EQ(stats->requests.load(), 2);
  EXPECT_EQ(stats->sequences.load(), 3);
  EXPECT_EQ(stats->failures.load(), 2);
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
}

// Retrieval by attention mass: a refresh whose forward gave each layer's block masses is
// answered by them (the top k of [first, last), past the masses' end no candidate); one
// that asked for it and got none (a backend without it) by the query sums, counted.
TEST(RetrievalActor, ChoosesByTheRoundsAttentionMassWhenTheForwardGaveIt) {
  auto kv = std::make_shared<KvStore>(KvStoreConfig{.num_layers = kLayers, .num_kv_heads = kKvHeads, .head_dim = kHeadDim,
                                                    .block_size = kBlock, .num_blocks = 16, .prefix_cache = false});
  const SeqId a = kv->add_sequence({});
  kv->reserve(a, 30);
  for (int32_t p = 0; p < 30; ++p)
    for (int32_t l = 0; l < kLayers; ++l)
      for (int32_t i = 0; i < kKvDim; ++i) kv->tensors().k(l)[kv->slot(a, p) * kKvDim + i] = key_at(p, l, i);
  kv->commit(a, std::vector<int32_t>(30));
  caf::actor_system_config config;
  config.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system system{config};
  auto stats = std::make_shared<RetrievalActorStats>();
  auto actor = system.spawn(retrieval, RetrievalDeps{kv, nullptr, stats});
  RetrievalWork work;
  RetrievalQuery by_mass = query_of(a, 30, 2, 1, 7, 2);
  by_mass.by_mass = true;
  by_mass.mass = {{.9f, .1f, .5f, .05f, .3f, .2f}, {.0f, .2f, .1f, .4f, .3f, .7f, .9f, .8f}};
  work.queries.push_back(by_mass);
  RetrievalQuery none = query_of(a, 30, 2, 1, 6, 2);
  none.by_mass = true;  // asked, but no masses came
  work.queries.push_back(none);
  RetrievalDone done;
  caf::scoped_actor self{system};
  self->request(actor, caf::infinite, std::move(work))
      .receive([&](RetrievalDone& d) { done = std::move(d); }, [&](const caf::error& e) { FAIL() << system.render(e); });
  ASSERT_EQ(done.answers.size(), 2u);
  EXPECT_TRUE(done.answers[0].selected && done.answers[0].by_mass) << done.answers[0].error;
  EXPECT_EQ(done.answers[0].blocks.at(0), (std::vector<int32_t>{2, 4}));  // block 0 is below `first`
  EXPECT_EQ(done.answers[0].blocks.at(1), (std::vector<int32_t>{5, 6}));  // block 7 is past `last`
  EXPECT_FALSE(done.answers[1].by_mass);
  for (int32_t l = 0; l < kLayers; ++l)
    EXPECT_EQ(done.answers[1].blocks.at(static_cast<size_t>(l)), expected_top(l, 2, 1, 6, 2)) << "layer " << l;
  EXPECT_EQ(stats->by_mass.load(), 1);
  EXPECT_EQ(stats->mass_fallbacks.load(), 1);
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace specpipe::actors
