#include "pipeline/plain_generator.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "kvstore/offload_policy.h"
#include "pipeline/prefill.h"
#include "pipeline/token_selector.h"

namespace specpipe {
namespace {

/// Releases a sequence's KV when generation ends, however it ends.
class SequenceGuard {
 public:
  SequenceGuard(KvStore& kv, SeqId seq) : kv_(kv), seq_(seq) {}
  ~SequenceGuard() { kv_.release(seq_); }
  SequenceGuard(const SequenceGuard&) = delete;
  SequenceGuard& operator=(const SequenceGuard&) = delete;

 private:
  KvStore& kv_;
  SeqId seq_;
};

}  // namespace

GenerationResult PlainGenerator::generate(std::span<const int32_t> prompt,
                                          const GenerationParams& params,
                                          const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) fail(ErrorCode::invalid_argument, "generate: the prompt is empty");
  if (params.max_tokens < 0) fail(ErrorCode::invalid_argument, "generate: max_tokens is negative");
  check_fits(model_, kv_, static_cast<int64_t>(prompt.size()));
  const std::vector<int32_t>& eos = params.eos_ids.empty() ? model_.config().eos_token_ids : params.eos_ids;

  GenerationResult result;
  result.prompt_tokens = static_cast<int32_t>(prompt.size());
  if (params.max_tokens == 0) return result;
  Stopwatch clock;
  int32_t cached = 0;
  const SeqId seq = kv_.add_sequence(prompt, &cached);
  SequenceGuard guard(kv_, seq);
  result.cached_prompt_tokens = cached;

  Logits logits;
  prefill(model_, kv_, seq, prompt.subspan(static_cast<size_t>(cached)), prefill_chunk_, logits);
  TokenSelector selector(params.sampling, params.seed);
  const int32_t max_positions = model_.config().max_position_embeddings;
  DirectKvWriter writer(kv_);
  for (;;) {
    const int32_t token = selector.select(logits.row(0));
    result.tokens.push_back(token);
    if (result.tokens.size() == 1) {
      result.prefill_ms = clock.elapsed_ms();
      clock.reset();
    }
    if (on_token) on_token(token);
    if (params.stop_at_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
      result.finish = FinishReason::eos;
      break;
    }
    if (static_cast<int32_t>(result.tokens.size()) >= params.max_tokens) break;
    const int32_t length = kv_.length(seq);
    if (length >= max_positions) {
      result.finish = FinishReason::context;
      break;
    }
    reserve_offloading(kv_, seq, length + 1);  // with a host tier, oldest blocks out first
    const ForwardWindow window{seq, {&result.tokens.back(), 1}, LogitsMode::last};
    model_.forward({&window, 1}, kv_, writer, logits);
    kv_.commit(seq, {&result.tokens.back(), 1});
  }
  result.decode_ms = clock.elapsed_ms();
  return result;
}

}  // namespace specpipe
