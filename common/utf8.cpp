#include "common/utf8.h"

#include <cstring>

namespace k3::utf8 {
namespace {

inline bool in_range(unsigned char b, unsigned char lo, unsigned char hi) noexcept {
  return b >= lo && b <= hi;
}

}  // namespace

Step step(std::string_view bytes) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return {StepKind::kValid, 1, b0};
  if (b0 < 0xC2) return {StepKind::kInvalid, 1, 0};  // stray continuation, or overlong C0/C1
  if (b0 < 0xE0) {
    if (n < 2) return {StepKind::kIncomplete, 1, 0};
    if (!in_range(p[1], 0x80, 0xBF)) return {StepKind::kInvalid, 1, 0};
    return {StepKind::kValid, 2, static_cast<char32_t>(((b0 & 0x1Fu) << 6) | (p[1] & 0x3Fu))};
  }
  if (b0 < 0xF0) {
    // E0 needs A0..BF (no overlongs), ED needs 80..9F (no surrogates).
    const unsigned char lo = b0 == 0xE0 ? 0xA0 : 0x80;
    const unsigned char hi = b0 == 0xED ? 0x9F : 0xBF;
    if (n < 2) return {StepKind::kIncomplete, 1, 0};
    if (!in_range(p[1], lo, hi)) return {StepKind::kInvalid, 1, 0};
    if (n < 3) return {StepKind::kIncomplete, 2, 0};
    if (!in_range(p[2], 0x80, 0xBF)) return {StepKind::kInvalid, 2, 0};
    return {StepKind::kValid, 3,
            static_cast<char32_t>(((b0 & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu))};
  }
  if (b0 < 0xF5) {
    // F0 needs 90..BF (no overlongs), F4 needs 80..8F (nothing above U+10FFFF).
    const unsigned char lo = b0 == 0xF0 ? 0x90 : 0x80;
    const unsigned char hi = b0 == 0xF4 ? 0x8F : 0xBF;
    if (n < 2) return {StepKind::kIncomplete, 1, 0};
    if (!in_range(p[1], lo, hi)) return {StepKind::kInvalid, 1, 0};
    if (n < 3) return {StepKind::kIncomplete, 2, 0};
    if (!in_range(p[2], 0x80, 0xBF)) return {StepKind::kInvalid, 2, 0};
    if (n < 4) return {StepKind::kIncomplete, 3, 0};
    if (!in_range(p[3], 0x80, 0xBF)) return {StepKind::kInvalid, 3, 0};
    return {StepKind::kValid, 4,
            static_cast<char32_t>(((b0 & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) |
                                  ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu))};
  }
  return {StepKind::kInvalid, 1, 0};  // F5..FF never occur in UTF-8
}

std::size_t valid_prefix_length(std::string_view bytes) noexcept {
  std::size_t i = 0;
  const std::size_t n = bytes.size();
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      std::uint64_t word;
      std::memcpy(&word, bytes.data() + i, 8);
      if (word & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const Step s = step(bytes.substr(i));
    if (s.kind != StepKind::kValid) return i;
    i += s.length;
  }
  return n;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string replace_invalid(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t i = 0;
  while (i < bytes.size()) {
    const std::size_t valid = valid_prefix_length(bytes.substr(i));
    out.append(bytes.substr(i, valid));
    i += valid;
    if (i >= bytes.size()) break;
    const Step s = step(bytes.substr(i));
    append(out, kReplacementCharacter);
    i += s.length;
  }
  return out;
}

bool python_isspace(char32_t cp) noexcept {
  if (cp <= 0x20) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
  if (cp < 0x85) return false;
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace k3::utf8
