// What the streaming chunk kernel's access pattern can read (kernels/cuda/README.md
// "Seventeenth session, bulk", next step): the 8B shape's decode K/V at a context (FP32,
// 8 kv heads x 128 dims, a pool slot = 4 KB holding all kv heads), read with 1263's grid
// and ring (kv head x Y blocks, block y taking chunks y, y + Y, ...; a chunk = K rows 0..63,
// 64..127, then V rows 0..63, 64..127; 64-row tiles by 16-byte cp.async into a ring of
// SLOTS slots, wait, barrier, refill) but no arithmetic, in two layouts of the same bytes:
//   pool:   row (slot, kv head) at slot * 1024 + kvh * 128 floats (512-byte rows, 4 KB stride)
//   heads:  row (slot, kv head) at kvh * slots * 128 + slot * 128 (a tile 32 KB contiguous)
// and a grid-stride float4 read of the same bytes (the card's rate for them). Prints GB/s
// (the bytes once, mean of 20 launches after 3). If `pool` stops near 2.3 TB/s and `heads`
// reaches ~3.0, the layout is the lever; if both stop there, the ring is.
// Build: nvcc -O3 -arch=sm_90 -o pattern_read tools/gpu/pattern_read.cu
// Usage: pattern_read [context (131072)] [Y blocks a kv head (33)]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace {

constexpr int kHeads = 8, kDim = 128, kChunk = 128, kTile = 64, kThreads = 512;

__device__ inline void copy16(void* to, const void* from) {
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(to));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(from) : "memory");
}

template <int kSlots>
__global__ void __launch_bounds__(kThreads, 2)
    ring_read(const float* k, const float* v, long slots, bool heads_layout, int per_row, float* sink) {
  extern __shared__ __align__(16) float ring[];
  const int kvh = blockIdx.x, y = blockIdx.y, tid = threadIdx.x;
  const long chunks = slots / kChunk;
  const long mine = (chunks - y + per_row - 1) / per_row;
  const auto row = [&](const float* base, long slot) {
    return heads_layout ? base + (long{kvh} * slots + slot) * kDim : base + slot * kHeads * kDim + kvh * kDim;
  };
  const auto issue = [&](long t) {
    if (t / 4 < mine) {
      const long chunk = y + (t / 4) * per_row;
      const int part = static_cast<int>(t % 4);
      const float* base = part < 2 ? k : v;
      const long slot0 = chunk * kChunk + (part & 1) * kTile;
      float* to = ring + (t % kSlots) * kTile * kDim;
      for (int e = tid; e < kTile * kDim / 4; e += kThreads) copy16(to + e * 4, row(base, slot0 + e / 32) + (e % 32) * 4);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  for (int t = 0; t + 1 < kSlots; ++t) issue(t);
  float acc = 0.0f;
  for (long t = 0; t < 4 * mine; ++t) {
    asm volatile("cp.async.wait_group %0;" ::"n"(kSlots - 2) : "memory");
    __syncthreads();
    issue(t + kSlots - 1);
    acc += ring[(t % kSlots) * kTile * kDim + tid];  // one float a thread: the tile is used
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  if (acc == 12345.0f) sink[0] = acc;
}

__global__ void flat_read(const float4* p, long n, float* sink) {
  float acc = 0.0f;
  for (long i = blockIdx.x * long{blockDim.x} + threadIdx.x; i < n; i += long{gridDim.x} * blockDim.x) {
    const float4 x = p[i];
    acc += x.x + x.y + x.z + x.w;
  }
  if (acc == 12345.0f) sink[0] = acc;
}

#define OK(x)                                                                       \
  do {                                                                              \
    const cudaError_t e_ = (x);                                                     \
    if (e_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                 \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

template <class F>
double gbps(double bytes, F launch) {
  cudaEvent_t a, b;
  OK(cudaEventCreate(&a));
  OK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch();
  OK(cudaEventRecord(a));
  for (int i = 0; i < 20; ++i) launch();
  OK(cudaEventRecord(b));
  OK(cudaEventSynchronize(b));
  float ms = 0.0f;
  OK(cudaEventElapsedTime(&ms, a, b));
  OK(cudaGetLastError());
  return bytes * 20 / (ms * 1e-3) * 1e-9;
}

template <int kSlots>
void ring_case(const float* k, const float* v, long slots, int per_row, float* sink, double bytes) {
  const size_t shared = size_t{kSlots} * kTile * kDim * sizeof(float);
  OK(cudaFuncSetAttribute(ring_read<kSlots>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
  int per_sm = 0;
  OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ring_read<kSlots>, kThreads, shared));
  for (const bool heads : {false, true}) {
    const double r = gbps(bytes, [&] {
      ring_read<kSlots><<<dim3(kHeads, per_row), kThreads, shared>>>(k, v, slots, heads, per_row, sink);
    });
    std::printf("ring %d slots (%d blocks an SM), %-5s layout: %7.0f GB/s\n", kSlots, per_sm, heads ? "heads" : "pool", r);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const long context = argc > 1 ? std::atol(argv[1]) : 131072;
  const int per_row = argc > 2 ? std::atoi(argv[2]) : 33;
  const long slots = context / kChunk * kChunk;
  const size_t half = size_t(slots) * kHeads * kDim * sizeof(float);
  float *k = nullptr, *v = nullptr, *sink = nullptr;
  OK(cudaMalloc(&k, 2 * half));
  v = k + half / sizeof(float);
  OK(cudaMalloc(&sink, sizeof(float)));
  OK(cudaMemset(k, 0, 2 * half));
  const double bytes = 2.0 * half;
  std::printf("context %ld, %.0f MB of K/V, Y = %d\n", slots, bytes * 1e-6, per_row);
  std::printf("flat float4 read: %7.0f GB/s\n",
              gbps(bytes, [&] { flat_read<<<132 * 8, 256>>>(reinterpret_cast<const float4*>(k), long(2 * half / 16), sink); }));
  ring_case<2>(k, v, slots, per_row, sink, bytes);
  ring_case<3>(k, v, slots, per_row, sink, bytes);
  ring_case<4>(k, v, slots, per_row, sink, bytes);
  return 0;
}
