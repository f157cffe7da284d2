#pragma once
/// Paths of the vendored models and golden data, for tests.
#include <filesystem>

namespace specpipe::test {

std::filesystem::path source_dir();
std::filesystem::path model_dir(const char* name);  ///< models/<name>
std::filesystem::path data_path(const char* name);  ///< tests/data/<name>
/// A fresh empty directory under the system temp dir, unique to this process and call.
std::filesystem::path scratch_dir(const char* tag);

}  // namespace specpipe::test
