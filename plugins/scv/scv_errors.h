#pragma once
/// The exceptions SCV throws inside the plugin. scv_plugin.cpp catches them at the C
/// boundary and turns them into a specpipe_status and a message; nothing else does.
#include <stdexcept>
#include <string>
#include <utility>

#include "specpipe/plugin.h"

namespace specpipe::scv {

/// A refusal with the status the hook returns.
class PluginError : public std::runtime_error {
 public:
  PluginError(specpipe_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  specpipe_status status() const { return status_; }

 private:
  specpipe_status status_;
};

/// A config create() refuses (SPECPIPE_ERR_CONFIG); key() names the offending key, empty
/// when the text is not a JSON object at all.
class ConfigError : public PluginError {
 public:
  ConfigError(std::string key, const std::string& message)
      : PluginError(SPECPIPE_ERR_CONFIG, message), key_(std::move(key)) {}
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

/// Bad arguments to a hook (SPECPIPE_ERR_INVALID_ARGUMENT).
inline PluginError invalid_argument(const std::string& message) {
  return PluginError(SPECPIPE_ERR_INVALID_ARGUMENT, message);
}

}  // namespace specpipe::scv
