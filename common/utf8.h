// Strict UTF-8 scanning shared by the pre-tokenizer, the decoders and the encode wrapper.
//
// "Strict" is Unicode's definition (Table 3-7): no overlong forms, no surrogates, nothing above
// U+10FFFF. Invalid input is split into "maximal subparts" exactly as CPython's
// bytes.decode("utf-8", errors="replace") does, which is what tiktoken's and Kimi's decode
// return, so a replacement-decoded string here equals the reference's byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace k3::utf8 {

enum class StepKind : std::uint8_t {
  kValid,       // a complete character of `length` bytes
  kInvalid,     // `length` bytes that can never start a valid character (a maximal subpart)
  kIncomplete,  // all remaining bytes are a valid but truncated prefix of a character
};

struct Step {
  StepKind kind;
  std::uint32_t length;  // >= 1
  char32_t code_point;   // kValid only
};

// Classifies the sequence at the start of `bytes` (which must not be empty).
Step step(std::string_view bytes) noexcept;

// Length of the longest prefix of `bytes` that is valid UTF-8.
std::size_t valid_prefix_length(std::string_view bytes) noexcept;

inline bool is_valid(std::string_view bytes) noexcept {
  return valid_prefix_length(bytes) == bytes.size();
}

// Decodes `bytes`, replacing each invalid maximal subpart (and a truncated tail) with U+FFFD.
std::string replace_invalid(std::string_view bytes);

// Appends the UTF-8 encoding of `cp` (which must be a Unicode scalar value).
void append(std::string& out, char32_t cp);

// Python's str.isspace() (Unicode general category Zs, or bidirectional class WS, B or S).
// Kimi's encode wrapper splits runs of whitespace / non-whitespace with it.
bool python_isspace(char32_t cp) noexcept;

inline constexpr char32_t kReplacementCharacter = 0xFFFD;

}  // namespace k3::utf8
