#pragma once
/// Shared by the libFuzzer harnesses: the parsers under test read files, so each input is
/// written to a fixed per-process scratch file first (tmpfs-fast, no leak between runs).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace specpipe::fuzz {

/// A per-process scratch directory under the system temp dir, created once.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("specpipe-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

/// Writes the fuzzer's bytes to `scratch_dir() / name` and returns that path.
inline std::filesystem::path write_input(const char* name, const uint8_t* data, size_t size) {
  auto path = scratch_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

/// Reads every tensor's first and last byte, so that ASan reports any entry of an opened
/// archive (a SafetensorsArchive) lying outside its mapping.
template <class Archive>
void touch_every_tensor(const Archive& archive) {
  volatile std::byte sink{};
  for (const auto& [name, entry] : archive.tensors())
    if (entry.nbytes > 0) sink = entry.data[0] ^ entry.data[entry.nbytes - 1];
  (void)sink;
}

}  // namespace specpipe::fuzz
