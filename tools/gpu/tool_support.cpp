#include "tools/gpu/tool_support.h"

#include <cstdio>
#include <cstdlib>

namespace specpipe::gpu_tool {

double stream_ms(const std::function<void()>& enqueue) {
  cudaEvent_t e0, e1;
  cuda_check(cudaEventCreate(&e0), "event");
  cuda_check(cudaEventCreate(&e1), "event");
  cuda_check(cudaEventRecord(e0), "record");
  enqueue();
  cuda_check(cudaEventRecord(e1), "record");
  cuda_check(cudaEventSynchronize(e1), "sync");
  float ms = 0;
  cuda_check(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return static_cast<double>(ms);
}

void gpu_prefill(CudaTransformer& m, KvStore& kv, SeqId seq, std::span<const int32_t> tokens, LogitsMode last_mode,
                 CudaLogits& logits) {
  for (size_t at = 0; at < tokens.size(); at += kPrefillChunk) {
    const auto chunk = tokens.subspan(at, std::min<size_t>(kPrefillChunk, tokens.size() - at));
    const bool last = at + chunk.size() == tokens.size();
    kv.reserve(seq, kv.length(seq) + static_cast<int32_t>(chunk.size()));
    const ForwardWindow w{seq, chunk, last ? last_mode : LogitsMode::none};
    m.forward({&w, 1}, kv, logits);
    kv.commit(seq, chunk);
  }
}

SeqId book_random_context(KvStore& kv, int32_t vocab, int32_t context, int32_t window, std::mt19937& rng,
                          std::vector<int32_t>& prompt) {
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  prompt.resize(static_cast<size_t>(context));
  for (auto& t : prompt) t = tok(rng);
  const SeqId s = kv.add_sequence(prompt);
  kv.reserve(s, context);
  kv.commit(s, std::span<const int32_t>(prompt).subspan(static_cast<size_t>(kv.length(s))));
  kv.reserve(s, context + window);
  return s;
}

double median_forward_us(CudaTransformer& m, const ForwardWindow& w, const KvStore& kv, int iters) {
  CudaLogits lg;
  for (int i = 0; i < 3; ++i) m.forward({&w, 1}, kv, lg);
  std::vector<double> v;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    m.forward({&w, 1}, kv, lg);
    v.push_back(ms_since(t0) * 1e3);
  }
  return median(v);
}

std::string device_name() {
  cudaDeviceProp prop{};
  int dev = 0;
  cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
  cuda_check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
  return prop.name;
}

HostTierCopier host_tier_copier(CudaTransformer& m) {
  HostTierCopier copier;
  copier.to_host = [&m](int32_t pool, int32_t host) { m.queue_host_copy(true, pool, host); };
  copier.to_pool = [&m](int32_t host, int32_t pool) { m.queue_host_copy(false, pool, host); };
  return copier;
}

size_t first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  return static_cast<size_t>(std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin()).first -
                             a.begin());
}

bool ArgReader::next() {
  if (++at_ >= argc_) return false;
  arg_ = argv_[at_];
  return true;
}

std::string ArgReader::value() {
  if (at_ + 1 >= argc_) {
    std::fprintf(stderr, "%s needs a value\n", arg_.c_str());
    std::exit(2);
  }
  return argv_[++at_];
}

bool read_kv_dtype(ArgReader& args, DType& out, bool accept_f32) {
  const std::string d = args.value();
  if (d == "fp32" || (accept_f32 && d == "f32")) out = DType::f32;
  else if (d == "bf16") out = DType::bf16;
  else {
    std::fprintf(stderr, "--kv-dtype: %s is not fp32 or bf16\n", d.c_str());
    return false;
  }
  return true;
}

std::vector<int32_t> parse_int_list(const std::string& list) {
  std::vector<int32_t> out;
  for (size_t at = 0; at < list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    out.push_back(std::stoi(list.substr(at, comma - at)));
    at = comma + 1;
  }
  return out;
}

}  // namespace specpipe::gpu_tool
