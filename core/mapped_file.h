#pragma once
/// A read-only memory map of a whole file (RAII). Weights are used in place from the
/// map: loading a checkpoint copies nothing and the page cache shares it between
/// processes.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace specpipe {

class MappedFile {
 public:
  /// Maps `path` read-only. Throws Error(not_found) if it does not exist, Error(io) if
  /// it cannot be opened or mapped.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace specpipe
