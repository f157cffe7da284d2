// specpipe_cuda_check: every CUDA kernel against its CPU reference on seeded random
// inputs, the batch invariance of the GEMMs and of attention, and (unless --no-timing)
// kernel timings at Llama-3-8B shapes. Prints one JSON object; exit 1 on any failure.
// --groups a,b runs only those check groups (elementwise, kv, attention, gemm, sampling).
//
// Runs on the GPU machine from the bundle (tools/gpu/bundle.sh, tools/gpu/check.sh).
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include "tools/gpu/check_support.h"

using namespace specpipe::gpu_check;

int main(int argc, char** argv) {
  Options options;
  std::string groups = "elementwise,kv,attention,gemm,sampling";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-timing") == 0) {
      options.timing = false;
    } else if (std::strcmp(argv[i], "--groups") == 0 && i + 1 < argc) {
      groups = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--no-timing] [--groups elementwise,kv,attention,gemm,sampling]\n", argv[0]);
      return 2;
    }
  }
  auto wanted = [&](const std::string& group) { return ("," + groups + ",").find("," + group + ",") != std::string::npos; };
  Report report;
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaError_t status = cudaGetDevice(&device); status != cudaSuccess) {
    report.fail("device", cudaGetErrorString(status));
  } else {
    cudaGetDeviceProperties(&prop, device);
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    report.info("device", prop.name);
    report.info("sm", std::to_string(prop.major) + std::to_string(prop.minor));
    report.info("multiprocessors", prop.multiProcessorCount);
    report.info("driver", driver);
    report.info("runtime", runtime);
    cudaStream_t stream = nullptr;
    auto run = [&](const char* group, auto&& fn) {
      try {
        fn();
        CUDA_OK(cudaStreamSynchronize(stream));
      } catch (const std::exception& e) {
        report.fail(group, e.what());
        cudaGetLastError();  // clear a sticky launch error where possible
      }
    };
    run("stream", [&] { CUDA_OK(cudaStreamCreate(&stream)); });
    report.info("groups", groups);
    if (wanted("elementwise")) run("elementwise", [&] { check_elementwise(report, stream, options); });
    if (wanted("kv")) run("kv", [&] { check_kv(report, stream); });
    if (wanted("attention")) run("attention", [&] { check_attention(report, stream, options); });
    if (wanted("gemm")) run("gemm", [&] { check_gemm(report, stream, options); });
    if (wanted("sampling")) run("sampling", [&] { check_sampling(report, stream, options); });
    if (stream) cudaStreamDestroy(stream);
  }
  std::cout << report.to_json().dump(2) << std::endl;
  return report.all_passed() ? 0 : 1;
}
