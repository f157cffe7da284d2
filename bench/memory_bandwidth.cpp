#include "bench/memory_bandwidth.h"

#include "kernels/cpu/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

namespace specpipe::bench {

double measure_read_bandwidth(size_t bytes, int repeats) {
  const size_t n = bytes / sizeof(float);
  std::vector<float> data(n, 1.0f);  // touched once so every page is mapped
  std::vector<double> rates;
  volatile float sink = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::atomic<float> total{0};
    constexpr int64_t kChunk = 1 << 18;  // floats: 1 MiB per claim
    const int64_t chunks = static_cast<int64_t>(n) / kChunk;
    cpu::parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (size_t i = static_cast<size_t>(begin * kChunk); i < static_cast<size_t>(end * kChunk); i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(&data[i]));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(&data[i + 8]));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(&data[i + 16]));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(&data[i + 24]));
      }
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
      float part = 0;
      for (float l : lanes) part += l;
      total.fetch_add(part);
    });
    sink = total;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(static_cast<size_t>(chunks * kChunk) * sizeof(float)) / s);
  }
  (void)sink;
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace specpipe::bench
