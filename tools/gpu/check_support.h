#pragma once
/// Helpers of specpipe_cuda_check: device buffers, seeded random data, comparisons and
/// the JSON report. Errors are exceptions (caught in main: the check reports and fails).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"

namespace specpipe::gpu_check {

/// f32_to_bf16 of every element: BF16 bits (round to nearest even).
inline std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = f32_to_bf16(x[i]);
  return b;
}


inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
#define CUDA_OK(expr) ::specpipe::gpu_check::cuda_ok((expr), #expr)

/// A device array of T, filled from / read back into host vectors.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n) CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)));
    if (n) CUDA_OK(cudaMemset(p_, 0, n * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }

  T* get() const { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    if (host.size() > n_) throw std::runtime_error("upload larger than the device buffer");
    CUDA_OK(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    CUDA_OK(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// The checks and timings of one run, printed as one JSON object.
class Report {
 public:
  /// Numerical comparison: max_rel is max |got - ref| over max |ref| (the error relative
  /// to the tensor's scale, which stays meaningful where ref crosses zero).
  bool compare(const std::string& name, const std::vector<float>& got, const std::vector<float>& ref,
               double tolerance);
  /// Bitwise equality of two results that must agree exactly (batch invariance).
  bool bitwise(const std::string& name, const float* a, const float* b, size_t n);
  /// A check whose result is a count of mismatches (argmax, ids).
  bool exact_count(const std::string& name, int64_t mismatches, const std::string& note = "");
  void fail(const std::string& name, const std::string& why);
  void timing(nlohmann::json entry) { timings_.push_back(std::move(entry)); }
  void info(const std::string& key, nlohmann::json value) { info_[key] = std::move(value); }
  bool all_passed() const { return failures_ == 0; }
  nlohmann::json to_json() const;

 private:
  nlohmann::json checks_ = nlohmann::json::array();
  nlohmann::json timings_ = nlohmann::json::array();
  nlohmann::json info_ = nlohmann::json::object();
  int failures_ = 0;
};

/// Time of `fn` (enqueued on `stream`) in microseconds: the mean of `reps` after `warmup`.
template <typename Fn>
double time_us(cudaStream_t stream, int warmup, int reps, Fn&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  CUDA_OK(cudaEventRecord(start, stream));
  for (int i = 0; i < reps; ++i) fn();
  CUDA_OK(cudaEventRecord(stop, stream));
  CUDA_OK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 1000.0 * ms / reps;
}

struct Options {
  bool timing = true;  ///< --no-timing: correctness only (for compute-sanitizer)
};

void check_elementwise(Report& report, cudaStream_t stream, const Options& options);
void check_kv(Report& report, cudaStream_t stream);
void check_attention(Report& report, cudaStream_t stream, const Options& options);
void check_gemm(Report& report, cudaStream_t stream, const Options& options);
void check_sampling(Report& report, cudaStream_t stream, const Options& options);

}  // namespace specpipe::gpu_check
