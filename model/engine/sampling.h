// Seeded temperature sampling that works on a vocabulary-sharded LM head: Gumbel-max with noise
// that is a pure function of (seed, position, token id), so every rank draws its shard's noise
// independently, the (value, id) reduction picks the sample, and the draw does not depend on
// the layout.
#pragma once

#include <cmath>
#include <cstdint>

namespace k3::model::engine {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// -log(-log(u)) for u uniform in (0, 1), from 53 hash bits.
inline double gumbel_noise(std::uint64_t seed, std::uint64_t position, std::uint64_t token) {
  const std::uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ position) ^ token);
  const double u = (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;
  return -std::log(-std::log(u));
}

}  // namespace k3::model::engine
