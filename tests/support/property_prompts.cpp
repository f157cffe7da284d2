#include "tests/support/property_prompts.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <random>

#include <gtest/gtest.h>

#include "pipeline/plain_generator.h"
#include "tests/support/engine.h"
#include "tests/support/golden.h"
#include "tests/support/models.h"

namespace specpipe::test {

const std::vector<std::vector<int32_t>>& property_prompts() {
  static const std::vector<std::vector<int32_t>> prompts = [] {
    std::mt19937 rng(2026);
    std::vector<std::vector<int32_t>> out;
    const auto& cases = golden_public()["cases"];
    for (int i = 0; i < 16; ++i) {
      const int32_t length = 3 + static_cast<int32_t>(rng() % 118);
      std::vector<int32_t> p;
      if (i % 2 == 0) {
        const auto source = ids(cases[static_cast<size_t>(i)]["prompt_ids"]);
        const size_t start = rng() % (source.size() / 2);
        p.assign(source.begin() + static_cast<std::ptrdiff_t>(start),
                 source.begin() + static_cast<std::ptrdiff_t>(std::min(source.size(), start + static_cast<size_t>(length))));
      } else {
        for (int32_t t = 0; t < length; ++t) p.push_back(1 + static_cast<int32_t>(rng() % 8191));
      }
      out.push_back(std::move(p));
    }
    return out;
  }();
  return prompts;
}

const std::vector<int32_t>& property_reference(size_t i) {
  static std::mutex mutex;
  static std::map<size_t, std::vector<int32_t>> refs;
  const std::lock_guard lock(mutex);
  auto it = refs.find(i);
  if (it == refs.end()) {
    Transformer& target = model("demo-target");
    KvStore kv(target.kv_config(64));
    PlainGenerator plain(target, kv);
    GenerationParams params;
    params.max_tokens = kPropertyNewTokens;
    params.stop_at_eos = false;
    it = refs.emplace(i, plain.generate(property_prompts().at(i), params).tokens).first;
  }
  return it->second;  // std::map nodes stay put as others are added
}

const std::vector<std::vector<int32_t>>& property_references() {
  static const std::vector<std::vector<int32_t>> refs = [] {
    std::vector<std::vector<int32_t>> out;
    for (size_t i = 0; i < property_prompts().size(); ++i) out.push_back(property_reference(i));
    return out;
  }();
  return refs;
}

void expect_property_matrix_equals_plain(actors::Engine& engine, const std::string& what) {
  const auto& prompts = property_prompts();
  const auto& want = property_references();
  size_t rotate = 0;
  for (int32_t gamma = 1; gamma <= 8; ++gamma)
    for (size_t batch : {1u, 4u, 16u}) {
      Completions done;
      std::map<RequestId, size_t> prompt_of;
      for (size_t i = 0; i < batch; ++i, ++rotate) {
        const size_t p = rotate % prompts.size();
        prompt_of[engine.submit(greedy_request(prompts[p], kPropertyNewTokens, gamma), done.sink())] = p;
      }
      for (const auto& [id, c] : done.wait(batch)) {
        ASSERT_EQ(c.reason, FinishReason::length) << what << ": " << c.error;
        EXPECT_EQ(c.tokens, want[prompt_of[id]])
            << what << ", prompt " << prompt_of[id] << ", gamma " << gamma << ", batch " << batch;
      }
    }
  EXPECT_EQ(engine.kv_occupancy().free_blocks, engine.kv_occupancy().total_blocks) << what;
  EXPECT_EQ(engine.kv_occupancy().sequences, 0u) << what;
  EXPECT_EQ(engine.draft_kv_occupancy().free_blocks, engine.draft_kv_occupancy().total_blocks) << what;
}

}  // namespace specpipe::test
