#pragma once
/// How the NWOR plugin reports a refusal inside its C++ code: a HookError carries the
/// status the hook returns at the C boundary (nwor_plugin.cpp turns it into a status
/// and a message there). Nothing thrown here ever crosses that boundary.
#include <stdexcept>
#include <string>

#include "specpipe/plugin.h"

namespace nwor {

class HookError : public std::runtime_error {
 public:
  HookError(specpipe_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  specpipe_status status() const noexcept { return status_; }

 private:
  specpipe_status status_;
};

/// A caller broke the hook's contract (null pointer, bad count, unknown sequence...).
[[noreturn]] inline void fail_invalid(const std::string& message) {
  throw HookError(SPECPIPE_ERR_INVALID_ARGUMENT, message);
}

}  // namespace nwor
