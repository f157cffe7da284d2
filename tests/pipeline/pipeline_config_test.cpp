// Pipeline YAML files: defaults, every field read, model paths, the shipped examples and
// `specpipe validate-config`. The error cases are in pipeline_config_errors_test.cpp.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "pipeline/pipeline_config.h"
#include "pipeline/pipeline_config_yaml.h"
#include "tests/support/test_paths.h"

namespace specpipe {
namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

/// Field-by-field equality through the emitted YAML, which writes every field.
void expect_same(const PipelineConfig& a, const PipelineConfig& b) {
  EXPECT_EQ(pipeline_config_to_yaml(a), pipeline_config_to_yaml(b));
}

TEST(PipelineConfig, EmptyTextAndEmptyMapGiveTheDefaults) {
  const PipelineConfig defaults;
  for (const char* text : {"", "{}", "# nothing but a comment\n", "---\n", "kv:\nslots:\n  drafter: ~\n"}) {
    SCOPED_TRACE(text);
    expect_same(parse_pipeline_config(text, "empty.yaml"), defaults);
  }
  // The defaults are the embedded demo pair on the CPU.
  EXPECT_EQ(defaults.models.target, "demo-target");
  EXPECT_EQ(defaults.models.draft, "demo-draft");
  EXPECT_EQ(defaults.device, "cpu");
  EXPECT_EQ(defaults.models.gemm, "auto");
  EXPECT_TRUE(defaults.models.warm_graphs);
  EXPECT_EQ(defaults.drafter.type, DrafterKind::model);
}

TEST(PipelineConfig, ReadsEveryField) {
  const PipelineConfig c = parse_pipeline_config(R"(
version: 1
models: {target: demo-draft, draft: demo-target, draft_fused_step: false, draft_fused_blocks: 66, gemm: mma,
         warm_graphs: false}
device: cuda:1
threads: 3
kv: {tokens: 4096, block_size: 32, prefix_cache: false}
slots:
  drafter:
    type: ngram
    gamma: 7
    max_gamma: 9
    ngram: {max_n: 5, min_n: 2}
    draft_ahead: off
  verify_plan: {type: fixed}
  kv_write: {type: direct}
  acceptance: {type: standard}
scheduler: {max_batch: 8, max_queue: 100, prefill_chunk: 64, actor_threads: 2, micro_batches: 3}
server: {endpoint: "ipc:///tmp/specpipe.sock", max_message_bytes: 4096, max_inflight: 10, shutdown_grace_ms: 0,
         heartbeat_timeout_ms: 700, http: "127.0.0.1:0", http_timeout_ms: 2500}
defaults: {max_tokens: 0, temperature: 1.5, top_k: 40, top_p: 0.5, stop_at_eos: false}
logging: {level: debug}
)",
                                                 "full.yaml");
  EXPECT_EQ(c.version, 1);
  EXPECT_EQ(c.models.target, "demo-draft");
  EXPECT_EQ(c.models.draft, "demo-target");
  EXPECT_FALSE(c.models.draft_fused_step);
  EXPECT_EQ(c.models.draft_fused_blocks, 66);
  EXPECT_EQ(c.models.gemm, "mma");
  EXPECT_FALSE(c.models.warm_graphs);
  EXPECT_EQ(c.device, "cuda:1");
  EXPECT_EQ(c.threads, 3);
  EXPECT_EQ(c.kv.tokens, 4096);
  EXPECT_EQ(c.kv.block_size, 32);
  EXPECT_FALSE(c.kv.prefix_cache);
  EXPECT_EQ(c.drafter.type, DrafterKind::ngram);
  EXPECT_EQ(c.drafter.gamma, 7);
  EXPECT_EQ(c.drafter.max_gamma, 9);
  EXPECT_EQ(c.drafter.ngram.max_ngram, 5);
  EXPECT_EQ(c.drafter.ngram.min_ngram, 2);
  EXPECT_EQ(c.drafter.draft_ahead, DraftAhead::off);
  EXPECT_EQ(c.scheduler.max_batch, 8);
  EXPECT_EQ(c.scheduler.max_queue, 100);
  EXPECT_EQ(c.scheduler.prefill_chunk, 64);
  EXPECT_EQ(c.scheduler.actor_threads, 2);
  EXPECT_EQ(c.scheduler.micro_batches, 3);
  EXPECT_EQ(c.server.endpoint, "ipc:///tmp/specpipe.sock");
  EXPECT_EQ(c.server.max_message_bytes, 4096);
  EXPECT_EQ(c.server.max_inflight, 10);
  EXPECT_EQ(c.server.shutdown_grace_ms, 0);
  EXPECT_EQ(c.server.heartbeat_timeout_ms, 700);
  EXPECT_EQ(c.server.http, "127.0.0.1:0");
  EXPECT_EQ(c.server.http_timeout_ms, 2500);
  EXPECT_EQ(c.defaults.max_tokens, 0);
  EXPECT_EQ(c.defaults.temperature, 1.5f);
  EXPECT_EQ(c.defaults.top_k, 40);
  EXPECT_EQ(c.defaults.top_p, 0.5f);
  EXPECT_FALSE(c.defaults.stop_at_eos);
  EXPECT_EQ(c.log_level, "debug");

  // Emitting and parsing again changes nothing, defaults and all.
  const std::string emitted = pipeline_config_to_yaml(c);
  EXPECT_EQ(pipeline_config_to_yaml(parse_pipeline_config(emitted, "emitted.yaml")), emitted);
  const PipelineConfig defaults;
  expect_same(parse_pipeline_config(pipeline_config_to_yaml(defaults), "d.yaml"), defaults);
}

TEST(PipelineConfig, BoundsThemselvesAreAccepted) {
  const PipelineConfig c = parse_pipeline_config(R"(
kv: {tokens: 2147483648, block_size: 1024}
slots: {drafter: {type: none, gamma: 0, max_gamma: 0, ngram: {max_n: 16, min_n: 16}}}
scheduler: {max_batch: 4096, max_queue: 1000000, prefill_chunk: 65536, actor_threads: 64, micro_batches: 16}
server: {max_message_bytes: 1073741824, max_inflight: 1000000, shutdown_grace_ms: 600000}
defaults: {max_tokens: 1000000, temperature: +0, top_p: 1, top_k: 2147483647}
)",
                                                 "edges.yaml");
  EXPECT_EQ(c.kv.tokens, int64_t{1} << 31);
  EXPECT_EQ(c.drafter.type, DrafterKind::none);
  EXPECT_EQ(c.server.max_message_bytes, 1 << 30);
  EXPECT_EQ(c.defaults.top_p, 1.0f);
}

TEST(PipelineConfig, DeviceCudaMeansTheFirstGpu) {
  EXPECT_EQ(parse_pipeline_config("device: cuda", "d.yaml").device, "cuda:0");
}

TEST(PipelineConfig, KvTokensAutoSurvivesTheRoundTrip) {
  const PipelineConfig c =
      parse_pipeline_config("device: cuda:1\nkv: {tokens: auto, memory_fraction: 0.5}", "auto.yaml");
  EXPECT_EQ(c.kv.tokens, KvConfig::kAuto);
  EXPECT_EQ(c.kv.memory_fraction, 0.5f);
  expect_same(parse_pipeline_config(pipeline_config_to_yaml(c), "emitted.yaml"), c);
}

TEST(PipelineConfig, KvDtypeBf16SurvivesTheRoundTrip) {
  EXPECT_EQ(parse_pipeline_config("device: cuda:0", "d.yaml").kv.dtype, "fp32");
  const PipelineConfig c = parse_pipeline_config("device: cuda:0\nkv: {dtype: bf16}", "bf16.yaml");
  EXPECT_EQ(c.kv.dtype, "bf16");
  expect_same(parse_pipeline_config(pipeline_config_to_yaml(c), "emitted.yaml"), c);
}

TEST(PipelineConfig, RelativeModelDirectoriesResolveAgainstTheFile) {
  const fs::path dir = test::scratch_dir("config-paths");
  fs::create_directories(dir / "configs" / "my-target");
  fs::create_directories(dir / "drafts" / "small");
  write_file(dir / "configs" / "p.yaml",
             "models: {target: my-target, draft: ../drafts/small}\n");
  const PipelineConfig c = load_pipeline_config(dir / "configs" / "p.yaml");
  EXPECT_EQ(fs::path(c.models.target), dir / "configs" / "my-target");
  EXPECT_EQ(fs::path(c.models.draft), dir / "drafts" / "small");
  EXPECT_TRUE(fs::path(c.models.target).is_absolute());

  // The same file named by a path relative to the working directory.
  const PipelineConfig r = load_pipeline_config(fs::relative(dir / "configs" / "p.yaml"));
  EXPECT_EQ(fs::path(r.models.target), dir / "configs" / "my-target");

  // Nothing of that name beside the file: the name lookup (models/) decides, and the
  // value stays a name.
  write_file(dir / "configs" / "named.yaml", "models: {target: demo-target}\n");
  EXPECT_EQ(load_pipeline_config(dir / "configs" / "named.yaml").models.target, "demo-target");

  // Text has no file: an absolute directory is used as is.
  const std::string abs = (dir / "drafts" / "small").string();
  EXPECT_EQ(parse_pipeline_config("models: {target: \"" + abs + "\"}", "t.yaml").models.target, abs);
  fs::remove_all(dir);
}

std::vector<fs::path> example_pipelines() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(test::source_dir() / "examples" / "pipelines"))
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(PipelineConfig, EveryExamplePipelineParses) {
  const auto files = example_pipelines();
  ASSERT_GE(files.size(), 4u);
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    EXPECT_NO_THROW(load_pipeline_config(file));
  }
  const fs::path dir = test::source_dir() / "examples" / "pipelines";
  const PipelineConfig demo = load_pipeline_config(dir / "cpu-demo.yaml");
  EXPECT_EQ(demo.drafter.type, DrafterKind::model);
  EXPECT_EQ(demo.drafter.gamma, 4);
  EXPECT_EQ(demo.models.target, "demo-target");
  EXPECT_EQ(load_pipeline_config(dir / "server.yaml").server.endpoint, "tcp://127.0.0.1:5555");
  const PipelineConfig ngram = load_pipeline_config(dir / "ngram.yaml");
  EXPECT_EQ(ngram.drafter.type, DrafterKind::ngram);
  EXPECT_EQ(ngram.drafter.gamma, 2);
  const PipelineConfig sampling = load_pipeline_config(dir / "sampling.yaml");
  EXPECT_EQ(sampling.defaults.temperature, 0.8f);
  EXPECT_EQ(sampling.defaults.top_p, 0.95f);
}

TEST(PipelineConfig, TheCompleteExampleInTheDocsIsTheDefaults) {
  std::ifstream in(test::source_dir() / "docs" / "CONFIG.md");
  std::ostringstream doc;
  doc << in.rdbuf();
  const std::string text = doc.str();
  const size_t begin = text.find("```yaml\n", text.find("## A complete example"));
  ASSERT_NE(begin, std::string::npos);
  const size_t end = text.find("```", begin + 8);
  const PipelineConfig defaults;
  expect_same(parse_pipeline_config(text.substr(begin + 8, end - begin - 8), "CONFIG.md"), defaults);
}

/// Runs the built `specpipe` with `args`; stdout and stderr together, and the exit code.
std::pair<std::string, int> run_cli(const std::string& args) {
  const std::string command = std::string("\"") + SPECPIPE_CLI + "\" " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {"popen failed", -1};
  std::string output;
  char buffer[4096];
  while (const size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  const int status = ::pclose(pipe);
  return {output, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

TEST(PipelineConfig, ValidateConfigPrintsTheEffectiveConfigOfEachExample) {
  for (const fs::path& file : example_pipelines()) {
    SCOPED_TRACE(file.string());
    const auto [output, code] = run_cli("validate-config \"" + file.string() + "\"");
    ASSERT_EQ(code, 0) << output;
    // What it prints is YAML that reads back as the file's configuration.
    EXPECT_EQ(pipeline_config_to_yaml(parse_pipeline_config(output, "stdout")),
              pipeline_config_to_yaml(load_pipeline_config(file)));
  }
}

TEST(PipelineConfig, ValidateConfigReportsAnErrorAndExitsOne) {
  const fs::path dir = test::scratch_dir("config-cli");
  write_file(dir / "bad.yaml", "scheduler:\n  max_batch: 0\n");
  const auto [output, code] = run_cli("validate-config \"" + (dir / "bad.yaml").string() + "\"");
  EXPECT_EQ(code, 1);
  EXPECT_NE(output.find("bad.yaml: scheduler.max_batch: 0 is out of range [1, 4096]"), std::string::npos)
      << output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace specpipe
