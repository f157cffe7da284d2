#pragma once
/// Small helpers the GPU tools share (specpipe_gpu_generate, specpipe_specpv_gpu):
/// wall-clock timing, medians, CUDA status checks, a chunked prefill and the command-line
/// walk (ArgReader).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvstore/kv_store.h"
#include "model/cuda/cuda_transformer.h"

namespace specpipe::gpu_tool {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// Throws std::runtime_error("what: <CUDA's message>") unless e is cudaSuccess.
inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// Milliseconds the device takes for the work `enqueue` puts on the default stream
/// (cudaEvents around it; waits for it).
double stream_ms(const std::function<void()>& enqueue);

/// The name of the current CUDA device ("NVIDIA H100 80GB HBM3"), for reports.
std::string device_name();

/// The store's HostTierCopier over `m`'s queue_host_copy (both directions; fields set by
/// name, so a copier that grows a field still builds).
HostTierCopier host_tier_copier(CudaTransformer& m);

/// The first index where a and b differ (the shorter length when one is a prefix).
size_t first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

/// Prefill chunk (at most the CudaTransformer's max_tokens).
constexpr int32_t kPrefillChunk = 64;

/// Prefills `tokens` into `seq` (committed), kPrefillChunk at a time; the last chunk's
/// logits as `last_mode` asks.
void gpu_prefill(CudaTransformer& m, KvStore& kv, SeqId seq, std::span<const int32_t> tokens, LogitsMode last_mode,
                 CudaLogits& logits);

/// A sequence of `context` random tokens (ids below `vocab`, from `rng`) booked in `kv`
/// as committed, its K/V not written (a window's cost does not depend on them), with
/// `window` more positions reserved; `prompt` gets the tokens.
SeqId book_random_context(KvStore& kv, int32_t vocab, int32_t context, int32_t window, std::mt19937& rng,
                          std::vector<int32_t>& prompt);
/// Host wall time of one forward of `w` in microseconds (incl. its sync): 3 warm-up
/// forwards, then the median of `iters`.
double median_forward_us(CudaTransformer& m, const ForwardWindow& w, const KvStore& kv, int iters);

/// Walks a tool's command line, argv[1] onwards: next() moves to the next argument, arg() is
/// it, value() takes the one after it as the flag's value. A flag without one prints
/// "<flag> needs a value" and exits with status 2; a value that is not a number throws
/// (std::stoi and friends), as the tools always did.
class ArgReader {
 public:
  ArgReader(int argc, char** argv) : argc_(argc), argv_(argv) {}
  bool next();
  const std::string& arg() const { return arg_; }
  std::string value();
  int32_t int_value() { return std::stoi(value()); }
  double double_value() { return std::stod(value()); }
  uint64_t u64_value() { return std::stoull(value()); }

 private:
  int argc_;
  char** argv_;
  int at_ = 0;
  std::string arg_;
};

/// --kv-dtype's value: "fp32" (also "f32" where accept_f32) or "bf16" into `out`; anything
/// else prints "--kv-dtype: <value> is not fp32 or bf16" and returns false (the tool exits 2).
bool read_kv_dtype(ArgReader& args, DType& out, bool accept_f32);

/// "256,512,1024" -> {256, 512, 1024} (std::stoi on each item).
std::vector<int32_t> parse_int_list(const std::string& list);

}  // namespace specpipe::gpu_tool
