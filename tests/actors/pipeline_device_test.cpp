// What load_pipeline does with the `device` and KV sizing options before anything runs:
// each refusal is an Error that names the option and says why. The CUDA path itself runs
// on GPU machines only (tests/cuda, label `cuda`).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "actors/engine.h"
#include "actors/pipeline_builder.h"
#include "core/error.h"
#include "model/open_model.h"
#include "pipeline/gamma.h"
#include "tests/support/engine.h"
#include "tests/support/limited_model.h"
#include "tests/support/models.h"

namespace specpipe::actors {
namespace {

std::string refusal(const PipelineConfig& c, ErrorCode expected) {
  try {
    load_pipeline(c);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expected) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "load_pipeline accepted the config";
  return {};
}

TEST(PipelineDevice, KvTokensAutoNeedsADevice) {
  PipelineConfig c;
  c.kv.tokens = KvConfig::kAuto;
  const std::string what = refusal(c, ErrorCode::unsupported);
  EXPECT_NE(what.find("kv.tokens: auto"), std::string::npos) << what;
}

// The models report what they can run (ForwardModel::max_forward_tokens, positions) and
// max_gamma is checked against it once, at load (pipeline/gamma.h). A device-like
// forward limit of 1024 tokens: 64 sequences of max_gamma + 2 tokens fit up to 14.
TEST(PipelineDevice, MaxGammaBeyondTheTargetsForwardIsRefusedNamingTheLimit) {
  test::LimitedModel target(test::model("demo-target"), 1024);
  const GammaLimits limits = gamma_limits(target, nullptr, 64);
  EXPECT_EQ(limits.max_gamma, 14);
  DrafterConfig d;
  d.max_gamma = 14;
  EXPECT_NO_THROW(check_gamma_config(d, limits));
  d.max_gamma = 16;
  try {
    check_gamma_config(d, limits);
    ADD_FAILURE() << "max_gamma 16 accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(what.find("slots.drafter.max_gamma: 16 exceeds the 14"), std::string::npos) << what;
    EXPECT_NE(what.find("scheduler.max_batch 64"), std::string::npos) << what;
    EXPECT_NE(what.find("1024 tokens"), std::string::npos) << what;
  }
}

// The same check on the CPU, where the positions bound gamma: a YAML max_gamma past the
// demo pair's 8192 positions is refused when the pipeline loads.
TEST(PipelineDevice, YamlMaxGammaBeyondTheModelsPositionsIsRefusedAtLoad) {
  const PipelineConfig c = parse_pipeline_config("slots: {drafter: {gamma: 4, max_gamma: 9000}}", "big.yaml");
  const std::string what = refusal(c, ErrorCode::invalid_argument);
  EXPECT_NE(what.find("slots.drafter.max_gamma: 9000 exceeds the 8190"), std::string::npos) << what;
  EXPECT_NE(what.find("8192 positions"), std::string::npos) << what;
}

// A --gamma override above max_gamma (the YAML reader never saw it) is refused at load.
TEST(PipelineDevice, GammaAboveMaxGammaIsRefusedAtLoad) {
  PipelineConfig c;
  c.drafter.gamma = 20;
  const std::string what = refusal(c, ErrorCode::invalid_argument);
  EXPECT_NE(what.find("slots.drafter.gamma: 20 is out of range [0, 16]"), std::string::npos) << what;
}

// The per-request check (the scheduler's, once): a request's gamma above max_gamma is
// refused with an error naming the limit, and the engine goes on serving.
TEST(PipelineDevice, RequestGammaAboveMaxGammaIsRefusedAndTheEngineKeepsServing) {
  Engine engine(test::demo_engine_config());
  const std::vector<int32_t> prompt = engine.tokenizer().encode("def f(x):");
  const Completion refused = engine.generate(test::greedy_request(prompt, 4, 2000000));
  EXPECT_EQ(refused.reason, FinishReason::error);
  EXPECT_EQ(refused.error_code, "bad_request");
  EXPECT_NE(refused.error.find("gamma 2000000 is out of range [0, 16] (the server's slots.drafter.max_gamma)"),
            std::string::npos)
      << refused.error;
  const Completion served = engine.generate(test::greedy_request(prompt, 4, 16));
  EXPECT_EQ(served.reason, FinishReason::length) << served.error;
  EXPECT_EQ(served.tokens.size(), 4u);
}

TEST(PipelineDevice, Bf16KvIsRefusedOnTheCpu) {
  PipelineConfig c;
  c.kv.dtype = "bf16";
  const std::string what = refusal(c, ErrorCode::unsupported);
  EXPECT_NE(what.find("kv.dtype BF16: the CPU backend keeps FP32 K/V"), std::string::npos) << what;
}

TEST(PipelineDevice, CudaWithoutTheBackendSaysSo) {
  if (cuda_built()) GTEST_SKIP() << "this build has the CUDA backend; the GPU tests run it";
  PipelineConfig c;
  c.device = "cuda:0";
  const std::string what = refusal(c, ErrorCode::unsupported);
  EXPECT_NE(what.find("no CUDA backend"), std::string::npos) << what;
}

}  // namespace
}  // namespace specpipe::actors
