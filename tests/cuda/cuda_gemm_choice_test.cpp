// Which GEMM a CUDA model takes (model/cuda/cuda_gemm.h): host logic, no GPU needed.
#include "model/cuda/cuda_gemm.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "tests/support/test_paths.h"

namespace specpipe {
namespace {

ModelConfig demo(const char* name) { return ModelConfig::from_dir(test::model_dir(name)); }

TEST(CudaGemmChoice, AutomaticTakesMmaUnlessTheFusedStepOrTheWidthsForbidIt) {
  const ModelConfig target = demo("demo-target");  // widths 384 / 384 / 1024
  EXPECT_EQ(resolve_cuda_gemm(CudaGemm::automatic, target, false), CudaGemm::mma);
  EXPECT_EQ(resolve_cuda_gemm(CudaGemm::automatic, target, true), CudaGemm::cublaslt);
  ModelConfig odd = target;
  odd.intermediate_size = 1000;  // a multiple of 8, not of 32
  EXPECT_EQ(resolve_cuda_gemm(CudaGemm::automatic, odd, false), CudaGemm::cublaslt);
  EXPECT_EQ(resolve_cuda_gemm(CudaGemm::rows, odd, false), CudaGemm::rows);
  EXPECT_EQ(resolve_cuda_gemm(CudaGemm::cublaslt, target, false), CudaGemm::cublaslt);
}

TEST(CudaGemmChoice, AnExplicitChoiceTheWidthsDoNotAllowIsRefused) {
  ModelConfig odd = demo("demo-target");
  odd.intermediate_size = 1000;
  try {
    resolve_cuda_gemm(CudaGemm::mma, odd, false);
    FAIL() << "mma accepted an intermediate size of 1000";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("divisible by 32"), std::string::npos) << e.what();
  }
  odd.intermediate_size = 1004;
  EXPECT_THROW(resolve_cuda_gemm(CudaGemm::rows, odd, false), Error);
}

TEST(CudaGemmChoice, NamesRoundTripAndUnknownOnesAreRefused) {
  for (CudaGemm g : {CudaGemm::automatic, CudaGemm::cublaslt, CudaGemm::rows, CudaGemm::mma})
    EXPECT_EQ(parse_cuda_gemm(to_string(g)), g);
  try {
    parse_cuda_gemm("fastest");
    FAIL() << "an unknown GEMM name was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("auto, cublaslt, rows or mma"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace specpipe
