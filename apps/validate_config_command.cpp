// `specpipe validate-config FILE`: checks a pipeline YAML file and prints the
// configuration it describes, every default filled in. A bad file is an Error that
// main.cpp reports (exit code 1).
#include <cstdio>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "pipeline/pipeline_config.h"
#include "pipeline/pipeline_config_yaml.h"

namespace specpipe::app {

Runner add_validate_config_command(CLI::App& app) {
  auto file = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "validate-config", "check a pipeline YAML file (docs/CONFIG.md) and print the effective configuration");
  cmd->add_option("file", *file, "pipeline YAML file")->required();
  return [file] {
    const PipelineConfig config = load_pipeline_config(*file);
    std::printf("# %s: valid; the effective configuration, defaults filled in\n%s", file->c_str(),
                pipeline_config_to_yaml(config).c_str());
    return 0;
  };
}

}  // namespace specpipe::app
