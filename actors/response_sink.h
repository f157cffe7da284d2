#pragma once
/// Where a request's output goes: streamed deltas, then one completion. Called on the
/// scheduler actor's thread, in order; implementations must be quick and must not call
/// back into the engine synchronously.
#include <string>
#include <vector>

#include "pipeline/drafter.h"
#include "pipeline/generation.h"
#include "pipeline/spec_stats.h"

namespace specpipe::actors {

struct TokenDelta {
  RequestId id = 0;
  std::vector<int32_t> tokens;  ///< new tokens (after stop truncation)
  std::string text;             ///< new text: whole characters, stop strings excluded
};

struct Completion {
  RequestId id = 0;
  std::vector<int32_t> tokens;  ///< every generated token
  std::string text;
  FinishReason reason = FinishReason::length;
  /// When reason == error: a protocol error code (docs/PROTOCOL.md): bad_request,
  /// out_of_capacity, overloaded, duplicate_id or internal; and a message.
  std::string error_code;
  std::string error;
  SpecStats stats;              ///< this request's speculation statistics
};

class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  virtual void on_delta(const TokenDelta& delta) = 0;
  virtual void on_complete(const Completion& completion) = 0;
};

}  // namespace specpipe::actors
