#pragma once
/// Errors inside the engine. Modules throw specpipe::Error with a code and a message
/// that names the file, tensor or key at fault; the edges (CLI, actors, server,
/// plugin calls) catch it and turn it into their own error form. Never let one cross
/// a shared-library or actor boundary (docs/STYLE.md, "Interfaces that last").
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace specpipe {

enum class ErrorCode {
  invalid_argument,  ///< a caller passed something outside the contract
  not_found,         ///< a file, key or tensor that must exist does not
  corrupt_file,      ///< a file exists but its bytes are not what its format promises
  unsupported,       ///< valid input that this engine does not implement
  out_of_capacity,   ///< a bounded resource (KV blocks, queues) is exhausted
  io,                ///< the operating system refused a read, map or write
  internal,          ///< a broken invariant: a bug in specpipe
};

std::string_view to_string(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

/// Throws Error(code, fmt::format(fmt, args...)).
template <typename... Args>
[[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(code, fmt::format(format, std::forward<Args>(args)...));
}

/// Checks an internal invariant; a failure is a specpipe bug, never bad user input.
#define SPECPIPE_CHECK(cond)                                                          \
  do {                                                                                \
    if (!(cond))                                                                      \
      ::specpipe::fail(::specpipe::ErrorCode::internal, "internal check failed: {} ({}:{})", \
                       #cond, __FILE__, __LINE__);                                    \
  } while (0)

}  // namespace specpipe
