// Seeded temperature sampling that works on a vocabulary-sharded LM head: Gumbel-max with noise
// that is a pure function of (seed, position, token id), so every rank draws its shard's noise
// independently, the (value, id) reduction picks the sample, and the draw does not depend on
// the layout.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

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

// The best token of one row of a vocabulary shard's logits (plus `bias`, when given, value by
// value), the shard's first token id being `first`: the highest logit at temperature 0, else the
// Gumbel-max draw with the noise of (seed, position, token id). Non-finite values are skipped and
// counted; the lowest token id wins a tie.
struct ShardChoice {
  float value = -std::numeric_limits<float>::infinity();
  std::int32_t token = 0;
  std::size_t nonfinite = 0;
};
inline ShardChoice best_of_shard(std::span<const float> logits, const float* bias,
                                 std::size_t first, double temperature, std::uint64_t seed,
                                 std::uint64_t position) {
  ShardChoice c;
  c.token = static_cast<std::int32_t>(first);
  for (std::size_t i = 0; i < logits.size(); ++i) {
    float value = bias ? logits[i] + bias[i] : logits[i];
    if (!std::isfinite(value)) {
      ++c.nonfinite;
      continue;
    }
    if (temperature > 0) {
      value = static_cast<float>(value / temperature +
                                 gumbel_noise(seed, position, static_cast<std::uint64_t>(first + i)));
    }
    if (value > c.value) {
      c.value = value;
      c.token = static_cast<std::int32_t>(first + i);
    }
  }
  return c;
}

}  // namespace k3::model::engine
