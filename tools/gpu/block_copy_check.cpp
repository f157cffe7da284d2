// The GPU check of copy-on-write of a shared prefix-cache block (block_copy_check.h).
#include "tools/gpu/block_copy_check.h"

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kvstore/kv_store.h"
#include "tools/gpu/tool_support.h"

namespace specpipe::gpu_tool {
namespace {

using json = nlohmann::json;

/// `first`, then greedy tokens fed back one at a time into `seq`, until `steps` tokens.
std::vector<int32_t> greedy_steps(CudaTransformer& m, KvStore& kv, SeqId seq, int32_t first, int32_t steps) {
  CudaLogits lg;
  std::vector<int32_t> out{first};
  while (static_cast<int32_t>(out.size()) < steps) {
    kv.reserve(seq, kv.length(seq) + 1);
    const ForwardWindow w{seq, {&out.back(), 1}, LogitsMode::last};
    m.forward({&w, 1}, kv, lg);
    kv.commit(seq, {&out.back(), 1});
    out.push_back(lg.argmax(0));
  }
  return out;
}

/// Plain greedy decoding of `steps` tokens after `prompt` on a fresh sequence of `kv`
/// (the reference both sequences of the check must reproduce).
std::vector<int32_t> plain_greedy(CudaTransformer& m, KvStore& kv, const std::vector<int32_t>& prompt, int32_t steps) {
  CudaLogits lg;
  m.set_copy_logits(false);
  const SeqId seq = kv.add_sequence(prompt);
  gpu_prefill(m, kv, seq, prompt, LogitsMode::last, lg);
  std::vector<int32_t> out = greedy_steps(m, kv, seq, lg.argmax(0), steps);
  kv.release(seq);
  return out;
}

}  // namespace

json check_block_copy(CudaTransformer& m, const json& cases, int32_t steps, bool& ok) {
  constexpr size_t kPrompt = 40;
  std::vector<std::vector<int32_t>> prompts, plain;
  for (const auto& c : cases) {
    auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    if (prompt.size() < kPrompt) continue;
    prompt.resize(kPrompt);
    KvStore reference(m.kv_config());  // gone before the store below books the same pool
    plain.push_back(plain_greedy(m, reference, prompt, steps));
    prompts.push_back(std::move(prompt));
  }
  int64_t copies = 0;
  KvStoreConfig kc = m.kv_config();
  kc.prefix_cache = true;
  KvStore kv(kc, [&m, &copies](int32_t src, int32_t dst) {
    ++copies;
    m.queue_block_copy(src, dst);
  });
  constexpr int32_t kRollback = 20;  // inside the second block (block size 16)
  CudaLogits lg;
  auto decode = [&](SeqId seq, int32_t first) { return greedy_steps(m, kv, seq, first, steps); };
  int checked = 0, b_equal = 0, a_equal = 0, cases_copied = 0;
  json bad = json::array();
  m.set_copy_logits(false);
  for (size_t ci = 0; ci < prompts.size(); ++ci) {
    const std::vector<int32_t>& prompt = prompts[ci];
    const std::vector<int32_t>& want = plain[ci];
    const SeqId a = kv.add_sequence(prompt);
    gpu_prefill(m, kv, a, std::span<const int32_t>(prompt).subspan(static_cast<size_t>(kv.length(a))),
                LogitsMode::last, lg);
    const int32_t a_first = lg.argmax(0);
    int32_t cached = 0;
    const SeqId b = kv.add_sequence(prompt, &cached);
    const int64_t copies_before = copies;
    kv.truncate(b, kRollback);
    gpu_prefill(m, kv, b, std::span<const int32_t>(prompt).subspan(kRollback), LogitsMode::last, lg);
    const bool copied = copies > copies_before && kv.block_table(b)[1] != kv.block_table(a)[1] &&
                        kv.block_table(b)[0] == kv.block_table(a)[0];
    const std::vector<int32_t> b_out = decode(b, lg.argmax(0));
    kv.release(b);
    const std::vector<int32_t> a_out = decode(a, a_first);
    kv.release(a);
    ++checked;
    cases_copied += copied;
    b_equal += b_out == want;
    a_equal += a_out == want;
    if (!copied || b_out != want || a_out != want)
      bad.push_back({{"case", ci}, {"cached_tokens", cached}, {"copied", copied},
                     {"b_differs_at", first_difference(b_out, want)}, {"a_differs_at", first_difference(a_out, want)}});
  }
  if (checked == 0 || !bad.empty()) ok = false;
  return {{"cases_checked", checked}, {"cases_copied", cases_copied}, {"block_copies", copies},
          {"rolled_back_sequence_equals_plain", b_equal}, {"sharing_sequence_equals_plain", a_equal},
          {"steps", steps}, {"problems", bad}};
}

}  // namespace specpipe::gpu_tool
