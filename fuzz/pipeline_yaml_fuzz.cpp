// libFuzzer harness: a pipeline YAML of arbitrary bytes (parse_pipeline_config, as
// `specpipe serve --config` reads it). It must return a config or throw specpipe::Error
// naming the problem; any other exception (yaml-cpp's own, nlohmann's), a crash or a
// sanitizer report is a bug. A config it returns must print back (pipeline_config_to_yaml)
// into YAML that parses to the same text again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"
#include "fuzz/fuzz_file.h"
#include "pipeline/pipeline_config.h"
#include "pipeline/pipeline_config_yaml.h"

// Plugin names resolve on $SPECPIPE_PLUGIN_PATH (pipeline/plugin_library.cpp), which only
// looks for the file: empty stand-ins let the examples' plugin sections parse.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  for (const char* name : {"nwor", "scv", "specpv", "faulty_plugin"})
    specpipe::fuzz::write_input((std::string("libspecpipe_") + name + ".so").c_str(), nullptr, 0);
  setenv("SPECPIPE_PLUGIN_PATH", specpipe::fuzz::scratch_dir().c_str(), 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  std::string printed;
  try {
    printed = specpipe::pipeline_config_to_yaml(specpipe::parse_pipeline_config(yaml, "fuzz.yaml"));
  } catch (const specpipe::Error&) {
    return 0;
  }
  try {
    if (specpipe::pipeline_config_to_yaml(specpipe::parse_pipeline_config(printed, "printed.yaml")) != printed)
      std::abort();
  } catch (const specpipe::Error&) {
    std::abort();  // what the emitter writes must read back
  }
  return 0;
}
