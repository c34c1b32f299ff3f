// Vocabulary: a tiktoken byte-level BPE vocabulary (token bytes by rank) plus Kimi-K3's 256
// reserved special tokens directly above it.
//
// In tiktoken a token's id *is* its merge rank, so the one table serves both encoding (the BPE
// merges by lowest rank) and decoding. For the real model the base has 163,584 tokens and the
// specials are 163584..163839; a synthetic vocabulary of 4,096 has them at 4096..4351, named by
// the same offsets (kimi-k3.md section 4): [BOS] +0, [EOS] +1, <|end_of_msg|> +2, ..., [UNK]
// +254, [PAD] +255; unnamed ids are "<|reserved_token_N|>" with N the absolute id, as Kimi's
// tokenization_kimi.py names them.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace k3::model {

inline constexpr std::int32_t kReservedSpecialCount = 256;

// Offsets of the named Kimi-K3 specials from the base size.
inline constexpr std::int32_t kBosOffset = 0;       // [BOS]
inline constexpr std::int32_t kEosOffset = 1;       // [EOS] (document end)
inline constexpr std::int32_t kEndOfMsgOffset = 2;  // <|end_of_msg|>: config eos, the stop token
inline constexpr std::int32_t kUnkOffset = 254;     // [UNK]
inline constexpr std::int32_t kPadOffset = 255;     // [PAD]

// The 256 special-token names of a base vocabulary of `base_size` tokens, in id order.
std::vector<std::string> kimi_k3_special_names(std::int32_t base_size);

// Standard base64 (RFC 4648 alphabet, '=' padding). decode is strict: the length must be a
// multiple of 4, padding only at the end, unused bits zero. nullopt when malformed.
std::string base64_encode(std::string_view bytes);
std::optional<std::string> base64_decode(std::string_view text);

namespace detail {
// A fast, non-cryptographic hash for short byte strings (token lookups in the BPE loop).
inline std::uint64_t hash_bytes(const char* p, std::size_t n) noexcept {
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ (static_cast<std::uint64_t>(n) * 0xFF51AFD7ED558CCDull);
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  if (n >= 4) {
    std::uint32_t a, b;
    std::memcpy(&a, p, 4);
    std::memcpy(&b, p + n - 4, 4);
    h = (h ^ (static_cast<std::uint64_t>(a) | (static_cast<std::uint64_t>(b) << 32))) *
        0x94D049BB133111EBull;
  } else if (n > 0) {
    const auto* u = reinterpret_cast<const unsigned char*>(p);
    const std::uint64_t w = static_cast<std::uint64_t>(u[0]) |
                            (static_cast<std::uint64_t>(u[n / 2]) << 8) |
                            (static_cast<std::uint64_t>(u[n - 1]) << 16);
    h = (h ^ w) * 0x94D049BB133111EBull;
  }
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return h;
}
}  // namespace detail

class Vocabulary {
 public:
  // Parses tiktoken.model text: one "<base64> <rank>" per line, ranks 0, 1, 2, ... in file
  // order, every token distinct, all 256 single bytes present. `source` names the file in
  // errors ("tiktoken.model line 17: ..."). Empty lines are skipped, as tiktoken does.
  static Vocabulary parse_tiktoken(std::string_view text,
                                   std::string_view source = "tiktoken.model");
  static Vocabulary load_tiktoken(const std::filesystem::path& path);

  // From token bytes in rank order (tokens[r] has rank r), with the same checks.
  static Vocabulary from_ranked_tokens(const std::vector<std::string>& tokens,
                                       std::string_view source);

  // The tiktoken.model text of this vocabulary (base tokens only; specials are implied).
  std::string to_tiktoken() const;

  std::int32_t base_size() const noexcept { return static_cast<std::int32_t>(offsets_.size()) - 1; }
  // Base plus the 256 reserved specials: the number of valid ids.
  std::int32_t size() const noexcept { return base_size() + kReservedSpecialCount; }

  // Bytes of base token `rank` (0 <= rank < base_size()).
  std::string_view token_bytes(std::int32_t rank) const noexcept {
    return std::string_view(arena_).substr(offsets_[rank], offsets_[rank + 1] - offsets_[rank]);
  }

  // Rank of the base token with exactly these bytes, or -1.
  std::int32_t rank_of(std::string_view bytes) const noexcept {
    const std::uint64_t h = detail::hash_bytes(bytes.data(), bytes.size());
    const auto tag = static_cast<std::uint32_t>(h >> 32);
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.rank < 0) return -1;
      if (s.tag == tag) {
        const std::uint32_t begin = offsets_[s.rank];
        const std::uint32_t len = offsets_[s.rank + 1] - begin;
        if (len == bytes.size() && std::memcmp(arena_.data() + begin, bytes.data(), len) == 0) {
          return s.rank;
        }
      }
    }
  }

  std::int32_t byte_rank(unsigned char b) const noexcept { return byte_rank_[b]; }

  bool is_special(std::int32_t id) const noexcept { return id >= base_size() && id < size(); }
  // Name of special `id` (is_special(id) must hold).
  const std::string& special_name(std::int32_t id) const {
    return special_names_[id - base_size()];
  }
  const std::vector<std::string>& special_names() const noexcept { return special_names_; }
  std::optional<std::int32_t> special_id(std::string_view name) const;

  // Bytes an id decodes to: the token bytes, or a special token's name. Empty for invalid ids.
  std::string_view id_bytes(std::int32_t id) const noexcept {
    if (id >= 0 && id < base_size()) return token_bytes(id);
    if (is_special(id)) return special_names_[id - base_size()];
    return {};
  }

  bool operator==(const Vocabulary& other) const noexcept {
    return arena_ == other.arena_ && offsets_ == other.offsets_;
  }

 private:
  Vocabulary() = default;  // only build() makes one, always indexed

  struct Slot {
    std::uint32_t tag;
    std::int32_t rank;  // -1: empty
  };

  // Takes the concatenated token bytes and their offsets (size n + 1), checks and indexes them.
  // `lines` (optional) maps each rank to its source line for error messages.
  static Vocabulary build(std::string arena, std::vector<std::uint32_t> offsets,
                          std::string_view source, const std::vector<std::uint32_t>* lines);

  std::string arena_;
  std::vector<std::uint32_t> offsets_;
  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::array<std::int32_t, 256> byte_rank_{};
  std::vector<std::string> special_names_;
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return static_cast<std::size_t>(detail::hash_bytes(s.data(), s.size()));
    }
  };
  std::unordered_map<std::string, std::int32_t, NameHash, std::equal_to<>> special_ids_;
};

}  // namespace k3::model
