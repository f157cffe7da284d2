#include "pipeline/generation.h"

namespace specpipe {

const char* to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::length: return "length";
    case FinishReason::eos: return "eos";
    case FinishReason::stop: return "stop";
    case FinishReason::context: return "context";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
  }
  return "?";
}

double GenerationResult::decode_tokens_per_s() const {
  const double after_first = tokens.size() > 1 ? static_cast<double>(tokens.size() - 1) : 0.0;
  return decode_ms > 0 ? after_first * 1000.0 / decode_ms : 0.0;
}

}  // namespace specpipe
