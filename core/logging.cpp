#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "core/error.h"

namespace specpipe {

void init_logging(std::string_view level) {
  auto parsed = spdlog::level::from_str(std::string(level));
  // from_str maps anything it does not know to "off"; only "off" itself may mean off.
  if (parsed == spdlog::level::off && level != "off")
    fail(ErrorCode::invalid_argument, "unknown log level '{}' (trace, debug, info, warn, error, off)",
         level);
  auto logger = spdlog::get("specpipe");  // calling again only changes the level
  if (!logger) {
    logger = spdlog::stderr_color_mt("specpipe");
    logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    spdlog::set_default_logger(logger);
  }
  logger->set_level(parsed);
}

}  // namespace specpipe
