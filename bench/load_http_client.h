#pragma once
// The load generator's HTTP client: streaming POST /v1/completions requests back to back
// on one keep-alive connection to the gateway (docs/HTTP.md), server-sent events read as
// they arrive.
#include <string>
#include <vector>

#include "bench/load_samples.h"

namespace specpipe::bench {

/// `count` requests, prompts taken round-robin from `index`; results go into `out`.
void http_client(const std::string& address, const std::vector<std::vector<int32_t>>& prompts, int index, int count,
                 int max_tokens, Samples& out);

}  // namespace specpipe::bench
