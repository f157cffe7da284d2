#include "tools/gpu/tool_support.h"

namespace specpipe::gpu_tool {

void gpu_prefill(CudaTransformer& m, KvStore& kv, SeqId seq, std::span<const int32_t> tokens, LogitsMode last_mode,
                 CudaLogits& logits) {
  for (size_t at = 0; at < tokens.size(); at += kPrefillChunk) {
    const auto chunk = tokens.subspan(at, std::min<size_t>(kPrefillChunk, tokens.size() - at));
    const bool last = at + chunk.size() == tokens.size();
    kv.reserve(seq, kv.length(seq) + static_cast<int32_t>(chunk.size()));
    const ForwardWindow w{seq, chunk, last ? last_mode : LogitsMode::none};
    m.forward({&w, 1}, kv, logits);
    kv.commit(seq, chunk);
  }
}

}  // namespace specpipe::gpu_tool
