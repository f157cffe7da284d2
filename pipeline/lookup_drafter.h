#pragma once
/// The n-gram `drafter` (prompt lookup): proposes the tokens that followed the latest
/// earlier occurrence of the context's last n tokens. No model, no KV; deterministic
/// proposals (a point mass, so sampling acceptance stays exact).
#include <map>
#include <vector>

#include "pipeline/drafter.h"
#include "pipeline/ngram_drafter.h"

namespace specpipe {

class LookupDrafter final : public Drafter {
 public:
  explicit LookupDrafter(NgramConfig config) : config_(config) {}
  std::string name() const override { return "ngram"; }
  void start(RequestId request, std::span<const int32_t> context) override;
  void propose(std::span<const DraftItem> items, std::vector<Proposal>& out) override;
  void finish(RequestId request) override { contexts_.erase(request); }

 private:
  NgramConfig config_;
  std::map<RequestId, std::vector<int32_t>> contexts_;
};

}  // namespace specpipe
