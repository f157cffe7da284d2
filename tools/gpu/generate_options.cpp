// specpipe_gpu_generate's command line (generate_options.h).
#include "tools/gpu/generate_options.h"

#include <cstdio>
#include <exception>
#include <string>

#include "tools/gpu/tool_support.h"

namespace specpipe::gpu_tool {

int parse_generate_options(int argc, char** argv, GenerateOptions& o) {
  ArgReader args(argc, argv);
  while (args.next()) {
    const std::string& arg = args.arg();
    if (arg == "--target") o.target_dir = args.value();
    else if (arg == "--draft") o.draft_dir = args.value();
    else if (arg == "--golden") o.golden_path = args.value();
    else if (arg == "--rope-model") o.rope_model_dir = args.value();
    else if (arg == "--repeat") o.repeat = args.int_value();
    else if (arg == "--tie-tol") o.tie_tol = args.double_value();
    else if (arg == "--logit-tol") o.logit_tol = args.double_value();
    else if (arg == "--max-near-ties") o.max_near_ties = args.int_value();
    else if (arg == "--cases") o.max_cases = static_cast<size_t>(std::stoul(args.value()));
    else if (arg == "--no-timing") o.timing = false;
    else if (arg == "--no-graphs") o.gpu_options.graphs = false;
    else if (arg == "--synthetic") o.synthetic = args.value();
    else if (arg == "--context") o.context = args.int_value();
    else if (arg == "--prefill-max") o.prefill_max = args.int_value();
    else if (arg == "--seed") o.seed = args.u64_value();
    else if (arg == "--iters") o.iters = args.int_value();
    else if (arg == "--fused-draft") o.fused_draft = true;
    else if (arg == "--offload-check") o.offload_check_mode = true;
    else if (arg == "--offload-bench") o.offload_bench_mode = true;
    else if (arg == "--prefill-bench") o.prefill_bench_mode = true;
    else if (arg == "--chunk") o.chunk = args.int_value();
    else if (arg == "--ring-slots") o.ring_slots = args.int_value();
    else if (arg == "--pool-tokens") o.pool_tokens = args.int_value();
    else if (arg == "--prefill-ways") o.prefill_ways = args.value();
    else if (arg == "--kv-dtype") {
      if (!read_kv_dtype(args, o.gpu_options.kv_dtype, /*accept_f32=*/true)) return 2;
    }
    else if (arg == "--fused-blocks") o.fused_blocks = args.int_value();
    else if (arg == "--fused-trace") o.fused_trace = true;
    else if (arg == "--gemm" || arg == "--draft-gemm") {
      CudaGemm choice{};
      try {
        choice = parse_cuda_gemm(args.value());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", arg.c_str(), e.what());
        return 2;
      }
      if (arg == "--gemm") o.gpu_options.gemm = choice;
      else o.draft_gemm = choice;
    }
    else {
      std::fprintf(stderr,
                   "usage: %s [--target DIR] [--draft DIR] [--golden FILE] [--rope-model DIR] [--repeat N] [--no-timing] "
                   "[--tie-tol X] [--logit-tol X] [--max-near-ties N] [--cases N] [--gemm auto|cublaslt|rows|mma] [--draft-gemm auto|cublaslt|rows|mma] "
                   "[--no-graphs] [--fused-draft [--fused-blocks N] [--fused-trace]] "
                   "[--synthetic NAME [--context N] [--prefill-max N] [--seed S] [--iters N]] "
                   "[--offload-check | --offload-bench [--ring-slots N] [--pool-tokens N] | --prefill-bench [--chunk N] "
                   "[--ring-slots N] [--pool-tokens N] [--prefill-ways LIST]] "
                   "[--kv-dtype fp32|bf16]\n",
                   argv[0]);
      return 2;
    }
  }
  return 0;
}

}  // namespace specpipe::gpu_tool
