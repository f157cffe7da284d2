#pragma once
/// Reading one YAML map into typed fields, for the pipeline config parser
/// (pipeline_config_yaml.cpp). One helper per value type checks the YAML node kind, the
/// value's syntax and its range, and throws Error(invalid_argument) as
/// "<source>: <key.path>: <reason>". Internal to specpipe_pipeline: nothing outside it
/// sees YAML.
#include <yaml-cpp/yaml.h>

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace specpipe::config_yaml {

/// Inclusive integer bounds.
struct IntRange {
  int64_t lo;
  int64_t hi;
};

/// Real bounds, `lo` open or closed; `hi` may be infinity (then "no upper bound").
struct RealRange {
  double lo;
  double hi;
  bool lo_open = false;
};

/// A YAML map at a key path. Absent and null maps read as empty, so a section whose
/// keys are all commented out keeps its defaults. Each read leaves its field untouched
/// when the key is absent.
class Section {
 public:
  /// Throws when `node` is neither a map nor null/absent, or holds a key twice, a
  /// non-scalar key, or a key not in `known`. `path` is "" for the document root.
  Section(const YAML::Node& node, std::string path, std::string source,
          std::initializer_list<std::string_view> known);

  /// The map under `key`, with its own known keys.
  Section child(std::string_view key, std::initializer_list<std::string_view> known) const;

  template <std::integral Int>
    requires(!std::same_as<Int, bool>)
  void read(std::string_view key, Int& out, IntRange range) const {
    if (const auto value = integer(key, range)) out = static_cast<Int>(*value);
  }
  /// Finite reals only: .nan and .inf are errors whatever the range.
  void read(std::string_view key, float& out, RealRange range) const;
  /// Plain `true` or `false` only: YAML 1.1's yes/no/on/off are errors, not booleans.
  void read(std::string_view key, bool& out) const;
  /// Any non-empty scalar, quoted or not.
  void read(std::string_view key, std::string& out) const;
  /// A string that must be one of `choices`.
  void read_choice(std::string_view key, std::string& out,
                   std::initializer_list<std::string_view> choices) const;

  bool has(std::string_view key) const;
  /// "path.key" ("key" at the root).
  std::string key_path(std::string_view key) const;
  const std::string& source() const { return source_; }
  /// Throws Error(invalid_argument) "<source>: <path.key>: <reason>".
  [[noreturn]] void fail(std::string_view key, std::string_view reason) const;

 private:
  /// The scalar under `key`; nullopt when absent. Throws for a map, list or null, and
  /// when `plain_only` for a quoted scalar (a number or boolean in quotes is a string).
  std::optional<YAML::Node> scalar(std::string_view key, std::string_view expected,
                                   bool plain_only = true) const;
  std::optional<int64_t> integer(std::string_view key, IntRange range) const;

  YAML::Node node_;
  std::string path_;
  std::string source_;
  std::vector<std::string_view> known_;
};

}  // namespace specpipe::config_yaml
