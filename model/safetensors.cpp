#include "model/safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <limits>
#include <string_view>
#include <system_error>
#include <utility>

#include "core/error.h"
#include "model/json_file.h"

namespace specpipe {
namespace {

using nlohmann::json;

/// The safetensors reference implementation refuses larger headers; so do we, so that a
/// garbage length can never make us parse hundreds of megabytes as JSON.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

/// Dtypes of the safetensors format that this engine does not compute with. A tensor of
/// one is refused as unsupported; any other unknown spelling means a corrupt header.
constexpr std::array<std::string_view, 15> kUnsupportedDtypes{
    "BOOL", "U8",      "I8",      "I16",     "U16", "U32", "U64", "F64",
    "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64"};

/// Reads an integer in [0, INT64_MAX] from a header field, or nullopt.
std::optional<int64_t> non_negative(const json& value) {
  if (value.is_number_unsigned()) {
    uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(v);
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) return value.get<int64_t>();
  return std::nullopt;
}

/// Turns one header entry into a TensorEntry, checking everything that can be checked
/// about it alone. `data` is the start of the data section, `data_size` its length.
TensorEntry parse_entry(const std::filesystem::path& file, const std::string& name,
                        const json& desc, const std::byte* data, uint64_t data_size) {
  const auto where = [&] { return fmt::format("{}: tensor '{}'", file.string(), name); };
  if (!desc.is_object())
    fail(ErrorCode::corrupt_file, "{}: header entry is {}, object expected", where(),
         json_type_name(desc));

  auto dtype_it = desc.find("dtype");
  if (dtype_it == desc.end() || !dtype_it->is_string())
    fail(ErrorCode::corrupt_file, "{}: 'dtype' missing or not a string", where());
  const auto dtype_name_str = dtype_it->get<std::string>();
  auto dtype = dtype_from_safetensors(dtype_name_str);
  if (!dtype) {
    bool known = std::find(kUnsupportedDtypes.begin(), kUnsupportedDtypes.end(),
                           dtype_name_str) != kUnsupportedDtypes.end();
    if (known)
      fail(ErrorCode::unsupported, "{}: dtype {} is not supported (F32, F16, BF16, I32, I64)",
           where(), dtype_name_str);
    fail(ErrorCode::corrupt_file, "{}: unknown dtype {}", where(), json_preview(*dtype_it));
  }

  auto shape_it = desc.find("shape");
  if (shape_it == desc.end() || !shape_it->is_array())
    fail(ErrorCode::corrupt_file, "{}: 'shape' missing or not a list", where());
  std::vector<int64_t> shape;
  int64_t numel = 1;
  for (const json& dim_value : *shape_it) {
    auto dim = non_negative(dim_value);
    if (!dim)
      fail(ErrorCode::corrupt_file, "{}: shape dimension {} is not a non-negative integer",
           where(), json_preview(dim_value));
    shape.push_back(*dim);
    if (__builtin_mul_overflow(numel, *dim, &numel))
      fail(ErrorCode::corrupt_file, "{}: shape has more elements than fit in 64 bits", where());
  }
  int64_t expected_bytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(dtype_size(*dtype)), &expected_bytes))
    fail(ErrorCode::corrupt_file, "{}: shape {} is too large", where(), shape_string(shape));

  auto offsets_it = desc.find("data_offsets");
  std::optional<int64_t> begin, end;
  if (offsets_it != desc.end() && offsets_it->is_array() && offsets_it->size() == 2) {
    begin = non_negative((*offsets_it)[0]);
    end = non_negative((*offsets_it)[1]);
  }
  if (!begin || !end)
    fail(ErrorCode::corrupt_file, "{}: 'data_offsets' missing or not [begin, end] of "
         "non-negative integers", where());
  if (*begin > *end)
    fail(ErrorCode::corrupt_file, "{}: data_offsets [{}, {}] begin after end", where(), *begin,
         *end);
  if (static_cast<uint64_t>(*end) > data_size)
    fail(ErrorCode::corrupt_file, "{}: data_offsets [{}, {}] run past the end of the data "
         "section ({} bytes); the file is truncated or corrupt", where(), *begin, *end, data_size);
  if (*end - *begin != expected_bytes)
    fail(ErrorCode::corrupt_file, "{}: data_offsets [{}, {}] span {} bytes, but {} {} needs {}",
         where(), *begin, *end, *end - *begin, dtype_name_str, shape_string(shape),
         expected_bytes);

  return TensorEntry{name,        *dtype, std::move(shape), data + *begin,
                     static_cast<size_t>(expected_bytes), file};
}

/// Two tensors sharing bytes would alias silently; the format forbids it.
void check_no_overlap(const std::filesystem::path& file, const std::byte* data,
                      std::vector<const TensorEntry*> entries) {
  std::erase_if(entries, [](const TensorEntry* e) { return e->nbytes == 0; });
  std::sort(entries.begin(), entries.end(),
            [](const TensorEntry* a, const TensorEntry* b) { return a->data < b->data; });
  for (size_t i = 1; i < entries.size(); ++i) {
    const TensorEntry& prev = *entries[i - 1];
    const TensorEntry& cur = *entries[i];
    if (prev.data + prev.nbytes > cur.data)
      fail(ErrorCode::corrupt_file, "{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap",
           file.string(), prev.name, prev.data - data, prev.data + prev.nbytes - data, cur.name,
           cur.data - data, cur.data + cur.nbytes - data);
  }
}

/// Parses and validates the header of one mapped safetensors file.
std::vector<TensorEntry> parse_file(const MappedFile& mapped) {
  const auto& file = mapped.path();
  const auto bytes = mapped.bytes();
  if (bytes.size() < 8)
    fail(ErrorCode::corrupt_file, "{}: {} bytes, too short for a safetensors file (an 8-byte "
         "header length comes first)", file.string(), bytes.size());
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i)  // little-endian, whatever the host
    header_len = (header_len << 8) | std::to_integer<uint64_t>(bytes[static_cast<size_t>(i)]);
  const uint64_t available = bytes.size() - 8;
  if (header_len > available)
    fail(ErrorCode::corrupt_file, "{}: header length {} runs past the end of the file ({} "
         "bytes); truncated or not a safetensors file", file.string(), header_len, bytes.size());
  if (header_len > kMaxHeaderBytes)
    fail(ErrorCode::corrupt_file, "{}: header length {} exceeds the {}-byte limit",
         file.string(), header_len, kMaxHeaderBytes);

  const char* header = reinterpret_cast<const char*>(bytes.data() + 8);
  json parsed;
  try {
    parsed = json::parse(header, header + header_len);
  } catch (const json::exception& e) {
    fail(ErrorCode::corrupt_file, "{}: header is not well-formed JSON: {}", file.string(),
         e.what());
  }
  if (!parsed.is_object())
    fail(ErrorCode::corrupt_file, "{}: header is {}, JSON object expected", file.string(),
         json_type_name(parsed));

  const std::byte* data = bytes.data() + 8 + header_len;
  const uint64_t data_size = available - header_len;
  std::vector<TensorEntry> entries;
  entries.reserve(parsed.size());
  for (const auto& [name, desc] : parsed.items()) {
    if (name == "__metadata__") continue;  // free-form strings; nothing we need
    entries.push_back(parse_entry(file, name, desc, data, data_size));
  }
  std::vector<const TensorEntry*> views;
  for (const auto& e : entries) views.push_back(&e);
  check_no_overlap(file, data, std::move(views));
  return entries;
}

/// A shard name from an index must stay inside the checkpoint directory.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

}  // namespace

std::string shape_string(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

int64_t TensorEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void SafetensorsArchive::add_file(const std::filesystem::path& file) {
  auto mapped = std::make_unique<MappedFile>(file);
  auto entries = parse_file(*mapped);
  for (auto& entry : entries) {
    auto [it, inserted] = tensors_.try_emplace(entry.name, entry);
    if (!inserted)
      fail(ErrorCode::corrupt_file, "tensor '{}' appears in both {} and {}", entry.name,
           it->second.file.string(), file.string());
  }
  files_.push_back(std::move(mapped));
}

std::shared_ptr<const SafetensorsArchive> SafetensorsArchive::open_file(
    const std::filesystem::path& file) {
  std::shared_ptr<SafetensorsArchive> archive(new SafetensorsArchive());
  archive->location_ = file;
  archive->add_file(file);
  return archive;
}

std::shared_ptr<const SafetensorsArchive> SafetensorsArchive::open(
    const std::filesystem::path& model_dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(model_dir, ec))
    fail(ErrorCode::not_found, "{}: no such checkpoint directory", model_dir.string());
  const auto index_path = model_dir / "model.safetensors.index.json";
  if (!std::filesystem::exists(index_path, ec)) {
    const auto single = model_dir / "model.safetensors";
    if (!std::filesystem::exists(single, ec))
      fail(ErrorCode::not_found, "{}: neither model.safetensors.index.json nor "
           "model.safetensors found", model_dir.string());
    std::shared_ptr<SafetensorsArchive> archive(new SafetensorsArchive());
    archive->location_ = model_dir;
    archive->add_file(single);
    return archive;
  }

  const json index = read_json_object_file(index_path);
  auto map_it = index.find("weight_map");
  if (map_it == index.end() || !map_it->is_object())
    fail(ErrorCode::corrupt_file, "{}: 'weight_map' missing or not an object", index_path.string());
  std::map<std::string, std::string> shard_of;  // tensor -> shard file name
  std::map<std::string, std::string> first_tensor_of;  // shard -> a tensor it holds
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string() || !is_plain_file_name(shard.get<std::string>()))
      fail(ErrorCode::corrupt_file, "{}: weight_map['{}'] = {} is not a file name in the "
           "checkpoint directory", index_path.string(), tensor, json_preview(shard));
    shard_of.emplace(tensor, shard.get<std::string>());
    first_tensor_of.try_emplace(shard.get<std::string>(), tensor);
  }

  std::shared_ptr<SafetensorsArchive> archive(new SafetensorsArchive());
  archive->location_ = model_dir;
  for (const auto& [shard, tensor] : first_tensor_of) {
    const auto path = model_dir / shard;
    if (!std::filesystem::exists(path, ec))
      fail(ErrorCode::not_found, "{}: shard '{}' (holding tensor '{}') not found: {}",
           index_path.string(), shard, tensor, path.string());
    archive->add_file(path);
  }
  for (const auto& [tensor, shard] : shard_of) {
    const TensorEntry* entry = archive->find(tensor);
    if (!entry || entry->file.filename() != shard)
      fail(ErrorCode::corrupt_file, "{}: tensor '{}' is mapped to shard {}, which does not "
           "contain it", index_path.string(), tensor, (model_dir / shard).string());
  }
  if (archive->tensors_.size() != shard_of.size()) {
    std::vector<std::string> unlisted;
    for (const auto& [name, entry] : archive->tensors_)
      if (!shard_of.contains(name)) unlisted.push_back(name);
    spdlog::warn("{}: {} tensor(s) in the shards are not listed in the index (still loaded): {}",
                 index_path.string(), unlisted.size(), fmt::join(unlisted, ", "));
  }
  return archive;
}

const TensorEntry* SafetensorsArchive::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const TensorEntry& SafetensorsArchive::get(const std::string& name) const {
  const TensorEntry* entry = find(name);
  if (!entry)
    fail(ErrorCode::not_found, "tensor '{}' not found in checkpoint {}", name,
         location_.string());
  return *entry;
}

size_t SafetensorsArchive::total_bytes() const {
  size_t total = 0;
  for (const auto& [name, entry] : tensors_) total += entry.nbytes;
  return total;
}

}  // namespace specpipe
