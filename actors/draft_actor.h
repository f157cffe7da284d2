#pragma once
/// The draft actor: owns the drafter (a draft model with its own KV, or n-gram lookup)
/// and proposes each round's drafts for every sequence in one batch.
#include <memory>

#include "actors/interfaces.h"
#include "pipeline/drafter.h"

namespace specpipe::actors {

struct DraftDeps {
  std::shared_ptr<const Peers> peers;
  std::shared_ptr<Drafter> drafter;
};

draft_actor::behavior_type draft(draft_actor::pointer self, DraftDeps deps);

}  // namespace specpipe::actors
