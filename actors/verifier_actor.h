#pragma once
/// The verifier actor: owns the target model. Prefills admitted sequences and runs
/// each round's verify windows [pending, d_1..d_g] of every sequence as one varlen
/// forward, then turns the logits into verdicts (pipeline/acceptance.h).
///
/// It reads the target KV store and writes K/V only through the kv-router's sink; it
/// never changes block tables or lengths (the kv-router reserves before and commits
/// after), and runs only between those steps, so the two never touch the store at once.
#include <memory>

#include "actors/interfaces.h"
#include "kvstore/kv_store.h"
#include "kvstore/kv_write_sink.h"
#include "model/forward_model.h"

namespace specpipe::actors {

struct VerifierDeps {
  std::shared_ptr<const Peers> peers;
  std::shared_ptr<ForwardModel> target;
  std::shared_ptr<const KvStore> kv;      ///< owned by the kv-router; read here
  std::shared_ptr<KvWriteSink> sink;      ///< the kv-router's interception point
  int32_t prefill_chunk = 256;
  /// A verify_view strategy may ask for partial views: build them from the retrieval
  /// actor's answers (Peers::retrieval), which refresh rounds ask for.
  bool partial_views = false;
};

verifier_actor::behavior_type verifier(verifier_actor::pointer self, VerifierDeps deps);

}  // namespace specpipe::actors
