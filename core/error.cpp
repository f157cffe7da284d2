#include "core/error.h"

namespace specpipe {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::not_found: return "not_found";
    case ErrorCode::corrupt_file: return "corrupt_file";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::out_of_capacity: return "out_of_capacity";
    case ErrorCode::io: return "io";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

}  // namespace specpipe
