#include "actors/retrieval_actor.h"

#include <caf/all.hpp>

#include <algorithm>
#include <exception>

#include "core/error.h"
#include "kvstore/retrieval_index.h"

namespace specpipe::actors {
namespace {

struct RetrievalState {
  RetrievalDeps deps;
  std::unique_ptr<RetrievalIndex> index;
  KeySummariser summariser;  // a device pool's block summaries (else none)
};

/// One sequence's refresh: summarise its verified blocks not summarised yet, then select
/// every layer's top blocks from the round's query sums.
RetrievalAnswer refresh(RetrievalState& st, const RetrievalQuery& q) {
  const KvStore& kv = *st.deps.kv;
  RetrievalIndex& index = *st.index;
  RetrievalAnswer a;
  a.seq = q.seq;
  if (!kv.contains(q.seq)) fail(ErrorCode::invalid_argument, "retrieval: sequence {} is not in the KV store", q.seq);
  const int32_t layers = kv.config().num_layers;
  // A device's retrieval takes the sums its forward left on the device; the host's, the
  // sums of every layer.
  if (index.on_device() && q.device_sums < 0)
    fail(ErrorCode::invalid_argument, "retrieval: the summaries are on the device and the query sums are not");
  if (!index.on_device() && static_cast<int32_t>(q.layers.size()) != layers)
    fail(ErrorCode::invalid_argument, "retrieval: query sums of {} layers for a model of {}", q.layers.size(), layers);
  const int32_t B = kv.config().block_size;
  const int32_t verified = std::min(q.verified, kv.length(q.seq));
  // Host-tier blocks are summarised on the host, from the tier: moves to it must have
  // landed. A backend that cannot land them selects nothing for the sequence (its partial
  // rounds keep the previous selection; exact stays exact).
  if (index.summarised_blocks(q.seq) < std::min(kv.host_blocks(q.seq), verified / B) && st.deps.target &&
      !st.deps.target->land_host_copies(kv))
    return a;
  // By attention mass: the forward summed each prefix block's softmax mass, every layer
  // (the summaries are still kept up to date, for a later refresh without it).
  const bool by_mass = static_cast<int32_t>(q.mass.size()) == layers;
  if (index.on_device()) {
    // Summaries, scores and top-k on the device: only the chosen blocks come back.
    index.update_on_device(kv, q.seq, verified);
    if (!by_mass) index.select_on_device(q.seq, q.device_sums, q.k, q.first, q.last);
  } else {
    index.update(kv, q.seq, verified, st.summariser);
    if (!by_mass)
      for (int32_t layer = 0; layer < layers; ++layer)
        index.select(q.seq, layer, q.layers[static_cast<size_t>(layer)], q.k, q.first, q.last);
  }
  if (by_mass)
    for (int32_t layer = 0; layer < layers; ++layer)
      index.select_by_mass(q.seq, layer, q.mass[static_cast<size_t>(layer)], q.k, q.first, q.last);
  a.by_mass = by_mass;
  index.mark_ready(q.seq);
  a.selected = true;
  a.blocks.resize(static_cast<size_t>(layers));
  for (int32_t layer = 0; layer < layers; ++layer) {
    const std::span<const int32_t> r = index.retrieved(q.seq, layer);
    a.blocks[static_cast<size_t>(layer)].assign(r.begin(), r.end());
  }
  return a;
}

}  // namespace

retrieval_actor::behavior_type retrieval(retrieval_actor::pointer /*self*/, RetrievalDeps deps) {
  if (!deps.kv) fail(ErrorCode::invalid_argument, "retrieval actor: no KV store");
  auto st = std::make_shared<RetrievalState>();
  st->deps = std::move(deps);
  const KvStoreConfig& k = st->deps.kv->config();
  std::shared_ptr<DeviceRetrieval> device = st->deps.target ? st->deps.target->device_retrieval() : nullptr;
  st->index = std::make_unique<RetrievalIndex>(SummaryShape{k.num_layers, k.num_kv_heads, k.head_dim, k.block_size},
                                               std::move(device));
  if (st->deps.target) st->summariser = st->deps.target->key_summariser();
  return {
      [st](RetrievalWork& w) {
        RetrievalActorStats& s = *st->deps.stats;
        // Sequences released since the last refresh are forgotten first.
        st->index->forget_all_but(*st->deps.kv);
        RetrievalDone done;
        for (const RetrievalQuery& q : w.queries) {
          // Every sequence gets its answer: an exception fails that sequence only.
          try {
            done.answers.push_back(refresh(*st, q));
            (done.answers.back().selected ? s.sequences : s.unselected).fetch_add(1);
            if (done.answers.back().by_mass) s.by_mass.fetch_add(1);
            else if (q.by_mass && done.answers.back().selected) s.mass_fallbacks.fetch_add(1);
            if (done.answers.back().selected && st->index->on_device()) s.on_device.fetch_add(1);
          } catch (const std::exception& e) {
            RetrievalAnswer a;
            a.seq = q.seq;
            a.error = std::string("SpecPV retrieval: ") + e.what();
            done.answers.push_back(std::move(a));
            s.failures.fetch_add(1);
          }
        }
        s.requests.fetch_add(1);
        return done;
      },
  };
}

nlohmann::json retrieval_actor_metrics(const RetrievalActorStats& s) {
  return {{"requests", s.requests.load()},
          {"sequences", s.sequences.load()},
          {"unselected", s.unselected.load()},
          {"on_device", s.on_device.load()},
          {"failures", s.failures.load()},
          {"by_mass", s.by_mass.load()},
          {"mass_fallbacks", s.mass_fallbacks.load()}};
}

}  // namespace specpipe::actors
