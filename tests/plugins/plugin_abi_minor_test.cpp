// ABI minor versions: a plugin built for ABI 1.0 (a table that ends before verify_view)
// still loads, and the host never reads past the plugin's struct_size; the 1.0 plugins of
// this repository (NWOR, SCV) load with no verify_view.
#include <gtest/gtest.h>

#include "pipeline/plugin_library.h"

namespace specpipe {
namespace {

TEST(PluginAbiMinor, LegacyTableLoadsWithoutVerifyView) {
  const auto lib = PluginLibrary::load(FAULTY_LEGACY_PATH);
  EXPECT_EQ(lib->table().struct_size, SPECPIPE_PLUGIN_TABLE_SIZE_1_0);
  // The legacy build leaves garbage past its size: the host's copy must read NULL there.
  EXPECT_EQ(lib->table().verify_view, nullptr);
  ASSERT_NE(lib->table().kv_write, nullptr);
  ASSERT_NE(lib->table().verify_plan, nullptr);
  EXPECT_TRUE(lib->fills("kv_write"));
  EXPECT_FALSE(lib->fills("verify_view"));
}

TEST(PluginAbiMinor, RepositoryPluginsFillNoVerifyView) {
  for (const char* path : {NWOR_PLUGIN_PATH, SCV_PLUGIN_PATH}) {
    const auto lib = PluginLibrary::load(path);
    EXPECT_EQ(lib->table().verify_view, nullptr) << path;
    EXPECT_FALSE(lib->fills("verify_view")) << path;
  }
}

TEST(PluginAbiMinor, MinorVersionIsOneWithVerifyView) {
  EXPECT_EQ(SPECPIPE_PLUGIN_ABI_VERSION, 1u);
  EXPECT_GE(SPECPIPE_PLUGIN_ABI_MINOR_VERSION, 1u);
  EXPECT_LT(SPECPIPE_PLUGIN_TABLE_SIZE_1_0, sizeof(specpipe_plugin_table));
}

}  // namespace
}  // namespace specpipe
