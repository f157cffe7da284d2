#pragma once
/// The random prompts of the speculative property tests and their plain greedy
/// continuations (computed once per process).
#include <cstdint>
#include <string>
#include <vector>

#include "actors/engine.h"

namespace specpipe::test {

constexpr int32_t kPropertyNewTokens = 24;

/// 16 prompts of 3 to 120 tokens: slices of the golden Python prompts (drafts are often
/// accepted) and uniformly random token ids (they rarely are). Seeded.
const std::vector<std::vector<int32_t>>& property_prompts();
/// Plain greedy decoding of each, kPropertyNewTokens tokens, EOS ignored.
const std::vector<std::vector<int32_t>>& property_references();
/// The reference of prompt `i` alone (computed on first use): for suites that need a
/// few, so a process does not decode all 16 (minutes under ASan).
const std::vector<int32_t>& property_reference(size_t i);

/// The property matrix on a running engine: gamma 1..8 x batches of 1, 4 and 16
/// property prompts; every output must equal its plain greedy reference, and every KV
/// block (target and draft) must be free afterwards. `what` names the configuration.
void expect_property_matrix_equals_plain(actors::Engine& engine, const std::string& what);

}  // namespace specpipe::test
