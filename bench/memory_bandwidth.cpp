#include "bench/memory_bandwidth.h"

#include "core/cpu_timer.h"
#include "core/huge_pages.h"
#include "kernels/cpu/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <span>
#include <vector>

namespace specpipe::bench {

ReadBandwidth measure_read_bandwidth(size_t bytes, int repeats) {
  const size_t n = bytes / sizeof(float);
  // On huge pages like the weights (core/huge_pages.h): a floor read through 4 KiB pages
  // would pay TLB misses the GEMMs no longer pay.
  const std::unique_ptr<float[], void (*)(void*)> buffer(static_cast<float*>(allocate_huge_page_backed(n * sizeof(float))),
                                                         std::free);
  if (!buffer) throw std::bad_alloc();
  const std::span<float> data(buffer.get(), n);
  std::fill(data.begin(), data.end(), 1.0f);  // touched once so every page is mapped
  std::vector<double> rates, cpu_rates;
  volatile float sink = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const CpuStopwatch cpu_clock;
    std::atomic<float> total{0};
    constexpr int64_t kChunk = 1 << 18;  // floats: 1 MiB per claim
    const int64_t chunks = static_cast<int64_t>(n) / kChunk;
    // Each 1 MiB chunk is read as 8 streams of 128 KiB side by side: more misses in
    // flight than one stream, as the GEMV's 8 panels have. One stream measured ~25%
    // below what the BF16 GEMV itself reads on this machine, so it was no floor.
    constexpr size_t kStreams = 8;
    constexpr size_t kStreamFloats = kChunk / kStreams;
    cpu::parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
      __m256 acc[kStreams];
      for (__m256& a : acc) a = _mm256_setzero_ps();
      for (int64_t c = begin; c < end; ++c) {
        const float* base = data.data() + static_cast<size_t>(c * kChunk);
        for (size_t i = 0; i < kStreamFloats; i += 16)
          for (size_t st = 0; st < kStreams; ++st) {
            const float* f = base + st * kStreamFloats + i;
            acc[st] = _mm256_add_ps(acc[st], _mm256_add_ps(_mm256_loadu_ps(f), _mm256_loadu_ps(f + 8)));
          }
      }
      __m256 sum = acc[0];
      for (size_t st = 1; st < kStreams; ++st) sum = _mm256_add_ps(sum, acc[st]);
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, sum);
      float part = 0;
      for (float l : lanes) part += l;
      total.fetch_add(part);
    });
    sink = total;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double read = static_cast<double>(static_cast<size_t>(chunks * kChunk) * sizeof(float));
    rates.push_back(read / s);
    cpu_rates.push_back(read / (cpu_clock.elapsed_ms() / 1e3 / cpu::num_threads()));
  }
  (void)sink;
  std::sort(rates.begin(), rates.end());
  std::sort(cpu_rates.begin(), cpu_rates.end());
  return {rates[rates.size() / 2], cpu_rates[cpu_rates.size() / 2]};
}

}  // namespace specpipe::bench
