#include "pipeline/plugin_library.h"

#include <dlfcn.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/error.h"

#ifndef SPECPIPE_PLUGIN_BUILD_DIR
#define SPECPIPE_PLUGIN_BUILD_DIR ""
#endif

namespace specpipe {
namespace {

const char* const kKnownSlots[] = {"kv_write", "verify_plan", "verify_view"};

std::vector<std::string> split_slots(const char* text) {
  std::vector<std::string> out;
  std::stringstream ss(text ? text : "");
  for (std::string item; std::getline(ss, item, ',');) {
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

std::shared_ptr<const PluginLibrary> PluginLibrary::load(const std::filesystem::path& path) {
  const std::string file = path.string();
  std::error_code ec;  // a path the file system refuses (too long, say) is no such file
  if (!std::filesystem::exists(path, ec)) fail(ErrorCode::not_found, "plugin {}: no such file", file);
  std::shared_ptr<PluginLibrary> lib(new PluginLibrary());
  lib->path_ = path;
  // RTLD_LOCAL: a plugin's symbols never resolve another plugin's; RTLD_NOW: a missing
  // symbol is found here, not in the middle of a round.
  lib->handle_ = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle_) fail(ErrorCode::unsupported, "plugin {}: cannot load: {}", file, dlerror());
  dlerror();
  void* symbol = dlsym(lib->handle_, SPECPIPE_PLUGIN_ENTRY_SYMBOL);
  if (!symbol)
    fail(ErrorCode::unsupported, "plugin {}: no entry symbol '{}' (is it a specpipe plugin?)", file,
         SPECPIPE_PLUGIN_ENTRY_SYMBOL);
  auto entry = reinterpret_cast<specpipe_plugin_entry_fn>(symbol);
  const specpipe_plugin_table* t = entry(SPECPIPE_PLUGIN_ABI_VERSION);
  if (!t) fail(ErrorCode::unsupported, "plugin {}: declined host ABI version {}", file, SPECPIPE_PLUGIN_ABI_VERSION);
  // The version comes first and is read before anything else in the table.
  if (t->abi_version != SPECPIPE_PLUGIN_ABI_VERSION)
    fail(ErrorCode::unsupported, "plugin {}: built for plugin ABI version {}, this host speaks {}", file,
         t->abi_version, SPECPIPE_PLUGIN_ABI_VERSION);
  // A table from an older minor version ends early: the host keeps its own copy, read
  // up to the plugin's size, the later fields NULL (plugin.h, ABI minor versions).
  if (t->struct_size < SPECPIPE_PLUGIN_TABLE_SIZE_1_0)
    fail(ErrorCode::unsupported, "plugin {}: table of {} bytes, ABI {} needs at least {}", file, t->struct_size,
         SPECPIPE_PLUGIN_ABI_VERSION, SPECPIPE_PLUGIN_TABLE_SIZE_1_0);
  std::memcpy(&lib->table_copy_, t, std::min<size_t>(t->struct_size, sizeof(specpipe_plugin_table)));
  t = &lib->table_copy_;
  if (!t->name || !*t->name) fail(ErrorCode::unsupported, "plugin {}: the table has no name", file);
  if (!t->create || !t->destroy) fail(ErrorCode::unsupported, "plugin {}: create and destroy are required", file);
  lib->slots_ = split_slots(t->slots);
  if (lib->slots_.empty()) fail(ErrorCode::unsupported, "plugin {}: fills no slot", file);
  for (const std::string& s : lib->slots_) {
    bool known = false;
    for (const char* k : kKnownSlots) known |= s == k;
    if (!known)
      fail(ErrorCode::unsupported, "plugin {}: unknown slot '{}' (known: kv_write, verify_plan, verify_view)", file, s);
  }
  if (lib->fills("kv_write")) {
    const specpipe_kv_write_hooks* h = t->kv_write;
    if (!h || !h->begin || !h->stage || !h->commit || !h->abort)
      fail(ErrorCode::unsupported, "plugin {}: slot kv_write needs begin, stage, commit and abort", file);
  }
  if (lib->fills("verify_plan") && (!t->verify_plan || !t->verify_plan->plan))
    fail(ErrorCode::unsupported, "plugin {}: slot verify_plan needs plan", file);
  if (lib->fills("verify_view") && (!t->verify_view || !t->verify_view->decide))
    fail(ErrorCode::unsupported, "plugin {}: slot verify_view needs decide (and a table of ABI 1.1 or later)", file);
  lib->table_ = t;
  lib->name_ = t->name;
  return lib;
}

PluginLibrary::~PluginLibrary() {
  if (handle_) dlclose(handle_);
}

bool PluginLibrary::fills(const std::string& slot) const {
  for (const std::string& s : slots_)
    if (s == slot) return true;
  return false;
}

std::filesystem::path resolve_plugin_path(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  // The name comes from a config: the error_code overloads make one the file system
  // refuses (too long, say) a plugin not found, not a filesystem_error.
  std::error_code ec;
  if (fs::exists(name_or_path, ec)) return name_or_path;
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("SPECPIPE_PLUGIN_PATH")) {
    std::stringstream ss(env);
    for (std::string d; std::getline(ss, d, ':');)
      if (!d.empty()) dirs.emplace_back(d);
  }
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  auto add_subdirs = [&](const fs::path& root) {
    if (!fs::is_directory(root)) return;
    dirs.push_back(root);
    for (const auto& entry : fs::directory_iterator(root, ec))
      if (entry.is_directory()) dirs.push_back(entry.path());
  };
  if (!ec) {
    add_subdirs(exe.parent_path().parent_path() / "plugins");              // build tree / bundle
    add_subdirs(exe.parent_path().parent_path() / "lib" / "specpipe" / "plugins");  // installed
  }
  if (*SPECPIPE_PLUGIN_BUILD_DIR) add_subdirs(SPECPIPE_PLUGIN_BUILD_DIR);
  std::vector<std::string> tried;
  for (const fs::path& d : dirs)
    for (const fs::path& candidate : {d / ("libspecpipe_" + name_or_path + ".so"), d / ("lib" + name_or_path + ".so"), d / name_or_path}) {
      if (std::error_code e; fs::is_regular_file(candidate, e)) return candidate;
      tried.push_back(candidate.string());
    }
  fail(ErrorCode::not_found, "plugin '{}' not found (looked in: {})", name_or_path,
       tried.empty() ? std::string("no plugin directories") : fmt::format("{}", fmt::join(tried, ", ")));
}

}  // namespace specpipe
