// What load_pipeline does with the `device` and KV sizing options before anything runs:
// each refusal is an Error that names the option and says why. The CUDA path itself runs
// on GPU machines only (tests/cuda, label `cuda`).
#include <gtest/gtest.h>

#include <string>

#include "actors/pipeline_builder.h"
#include "core/error.h"
#include "model/open_model.h"

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

TEST(PipelineDevice, TooManyVerifyTokensForADeviceForward) {
  PipelineConfig c;
  c.device = "cuda:0";
  c.scheduler.max_batch = 64;
  c.drafter.max_gamma = 16;
  const std::string what = refusal(c, ErrorCode::invalid_argument);
  EXPECT_NE(what.find("scheduler.max_batch 64"), std::string::npos) << what;
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
