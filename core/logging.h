#pragma once
/// Logging setup. Every module logs through spdlog's default logger; nothing on a hot
/// path logs above debug level (ARCHITECTURE.md section 10).
#include <spdlog/spdlog.h>

#include <string_view>

namespace specpipe {

/// Sets the default logger to stderr with the given level ("trace", "debug", "info",
/// "warn", "error", "off"). Calling it again changes the level. Throws
/// Error(invalid_argument) for an unknown level.
void init_logging(std::string_view level);

}  // namespace specpipe
