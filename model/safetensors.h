#pragma once
/// Safetensors checkpoints, single-file (`model.safetensors`) or sharded
/// (`model.safetensors.index.json` + shards), memory-mapped and validated on open.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace specpipe {

struct TensorEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const std::byte* data;  ///< inside the mapped shard; valid while the archive lives
  size_t nbytes;
  std::filesystem::path file;  ///< the shard holding it (for error messages)

  int64_t numel() const;
};

/// A tensor shape as error messages print it: "[2, 3]".
std::string shape_string(const std::vector<int64_t>& shape);

class SafetensorsArchive {
 public:
  /// Opens `<model_dir>/model.safetensors.index.json` if present, else
  /// `<model_dir>/model.safetensors`. Validates every header: length inside the file,
  /// JSON well formed, known dtypes, data_offsets inside the data section and matching
  /// dtype x shape, no two tensors overlapping, every tensor of the index present in the
  /// shard it names, no tensor in two shards. Throws Error naming the file (and tensor) at
  /// fault: not_found (directory, file or shard missing), corrupt_file (any of the checks
  /// above), unsupported (a dtype of the format other than F32/F16/BF16/I32/I64), io.
  /// Shard names in the index must be plain file names inside `model_dir`.
  static std::shared_ptr<const SafetensorsArchive> open(const std::filesystem::path& model_dir);
  /// Opens one safetensors file (used by open() and by tests).
  static std::shared_ptr<const SafetensorsArchive> open_file(const std::filesystem::path& file);

  /// nullptr if absent.
  const TensorEntry* find(const std::string& name) const;
  /// Throws Error(not_found) naming the tensor and the checkpoint if absent.
  const TensorEntry& get(const std::string& name) const;
  const std::map<std::string, TensorEntry>& tensors() const { return tensors_; }
  const std::filesystem::path& location() const { return location_; }
  size_t total_bytes() const;

 private:
  SafetensorsArchive() = default;
  void add_file(const std::filesystem::path& file);

  std::filesystem::path location_;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::map<std::string, TensorEntry> tensors_;
};

}  // namespace specpipe
