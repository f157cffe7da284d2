#pragma once
/// Paths of the vendored models and golden data, for tests.
#include <filesystem>
#include <string>

namespace specpipe::test {

std::filesystem::path source_dir();
std::filesystem::path model_dir(const char* name);  ///< models/<name>
std::filesystem::path data_path(const char* name);  ///< tests/data/<name>
/// A plugin library the build made, given its path in the build tree; with
/// $SPECPIPE_PLUGIN_DIR set (test binaries run from a bundle on another machine), the
/// file of the same name there.
std::string plugin_library(const char* built);
/// A fresh empty directory under the system temp dir, unique to this process and call.
std::filesystem::path scratch_dir(const char* tag);

}  // namespace specpipe::test
