// Regression tests of what fuzz/pipeline_yaml_fuzz.cpp found in the pipeline YAML reader:
// each input crashed or escaped as a non-specpipe exception before its fix.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "pipeline/pipeline_config.h"

namespace specpipe {
namespace {

// A plugin's config holding bytes that are not UTF-8 (yaml-cpp passes them through)
// escaped as nlohmann's type_error 316 from dumping it as the plugin's JSON config,
// which `specpipe serve` did not report as a config error.
TEST(PipelineConfigFuzz, PluginConfigThatIsNotUtf8IsRefusedNamingTheKey) {
  const std::string yaml = "version: 1\nplugins:\n  p:\n    path: /no/such.so\n    config: {k: a\xEE" "b}\n";
  try {
    parse_pipeline_config(yaml, "x.yaml");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("x.yaml"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("plugins.p.config"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("UTF-8"), std::string::npos) << e.what();
  }
}

// YAML aliases share one node: nine levels of ten aliases each are 10^9 values once a
// plugin's config is expanded into its JSON string. The reader ran out of memory (2 GiB
// under the fuzzer) before the limit on the values a config expands to.
TEST(PipelineConfigFuzz, PluginConfigOfNestedAliasesIsRefusedBeforeExpanding) {
  std::string yaml = "version: 1\nplugins:\n  p:\n    path: /no/such.so\n    config:\n      l0: &l0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n";
  for (int level = 1; level < 9; ++level) {
    yaml += "      l" + std::to_string(level) + ": &l" + std::to_string(level) + " [";
    for (int k = 0; k < 10; ++k) yaml += (k ? ", *l" : "*l") + std::to_string(level - 1);
    yaml += "]\n";
  }
  try {
    parse_pipeline_config(yaml, "x.yaml");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("plugins.p.config"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("more than 1048576 bytes"), std::string::npos) << e.what();
  }
}

// Under the value count the first fix allowed, one aliased 1,000-byte string repeated
// 8^5 times made 32 MB of JSON, printed back as YAML and read again: 2 GiB under the fuzzer.
TEST(PipelineConfigFuzz, PluginConfigOfAliasedLongStringsIsRefusedBeforeExpanding) {
  std::string yaml = "version: 1\nplugins:\n  p:\n    path: /no/such.so\n    config:\n      s: &s " +
                     std::string(1000, 'a') + "\n      l0: &l0 [*s, *s, *s, *s, *s, *s, *s, *s]\n";
  for (int level = 1; level < 5; ++level) {
    yaml += "      l" + std::to_string(level) + ": &l" + std::to_string(level) + " [";
    for (int k = 0; k < 8; ++k) yaml += (k ? ", *l" : "*l") + std::to_string(level - 1);
    yaml += "]\n";
  }
  try {
    parse_pipeline_config(yaml, "x.yaml");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("plugins.p.config"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("more than 1048576 bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace specpipe
