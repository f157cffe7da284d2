#pragma once
/// The random stream of one request: xoshiro256** seeded through splitmix64. The same
/// seed gives the same draws on every platform (unlike std:: distributions).
#include <cstdint>

namespace specpipe {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& s : state_) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      s = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  /// The whole state: an Rng travels in actor messages by value, so the one stream of a
  /// request continues wherever the request's work runs.
  bool operator==(const Rng&) const = default;

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t state_[4];
};

}  // namespace specpipe
