#include "pipeline/lookup_drafter.h"

#include "core/error.h"

namespace specpipe {

void LookupDrafter::start(RequestId request, std::span<const int32_t> context) {
  contexts_[request].assign(context.begin(), context.end());
}

void LookupDrafter::propose(std::span<const DraftItem> items, std::vector<Proposal>& out) {
  out.assign(items.size(), Proposal{});
  for (size_t i = 0; i < items.size(); ++i) {
    auto it = contexts_.find(items[i].request);
    if (it == contexts_.end()) fail(ErrorCode::invalid_argument, "drafter: unknown request {}", items[i].request);
    std::vector<int32_t>& context = it->second;
    if (items[i].rewind >= 0 && static_cast<size_t>(items[i].rewind) < context.size())
      context.resize(static_cast<size_t>(items[i].rewind));
    context.insert(context.end(), items[i].appended.begin(), items[i].appended.end());
    if (items[i].gamma > 0) out[i].tokens = ngram_propose(context, items[i].gamma, config_);
  }
}

}  // namespace specpipe
