#pragma once
/// Loading a strategy plugin: dlopen (RTLD_LOCAL), the entry symbol, and the checks on
/// its table (ABI version, size, slots, required hooks) before anything else is called.
/// A refusal is a specpipe::Error naming the file and the reason.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "specpipe/plugin.h"

namespace specpipe {

class PluginLibrary {
 public:
  /// Loads `path` and validates its table. Throws Error: not_found (no such file),
  /// unsupported (not a loadable library, no entry symbol, wrong ABI version, a table
  /// smaller than ABI 1.0's, unknown slot names, a missing required hook). A table of an
  /// older minor version loads; table() then reads its missing fields as NULL.
  static std::shared_ptr<const PluginLibrary> load(const std::filesystem::path& path);
  ~PluginLibrary();
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  const specpipe_plugin_table& table() const { return *table_; }
  const std::filesystem::path& path() const { return path_; }
  const std::string& name() const { return name_; }
  bool fills(const std::string& slot) const;

 private:
  PluginLibrary() = default;
  std::filesystem::path path_;
  void* handle_ = nullptr;
  const specpipe_plugin_table* table_ = nullptr;  // &table_copy_
  specpipe_plugin_table table_copy_{};  // the plugin's table, fields past its struct_size NULL
  std::string name_;
  std::vector<std::string> slots_;
};

/// Finds a plugin file: an existing path as given; else `lib<name>.so` or `<name>` in
/// $SPECPIPE_PLUGIN_PATH (colon-separated), next to the running binary's ../plugins/*/,
/// and in the build tree's plugins/ folders. Throws Error(not_found) listing the places.
std::filesystem::path resolve_plugin_path(const std::string& name_or_path);

}  // namespace specpipe
