// Small helpers that render untrusted bytes inside error messages.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace k3::model {

// `text` with non-printable bytes as \xNN, cut to `limit` bytes ("..." appended when cut).
inline std::string printable(std::string_view text, std::size_t limit = 60) {
  std::string out;
  const std::size_t n = text.size() < limit ? text.size() : limit;
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  if (n < text.size()) out += "...";
  return out;
}

// "[68 65 6C 6C 6F]": the bytes of a token, unambiguous whatever they are.
inline std::string hex_bytes(std::string_view bytes, std::size_t limit = 32) {
  std::string out = "[";
  const std::size_t n = bytes.size() < limit ? bytes.size() : limit;
  for (std::size_t i = 0; i < n; ++i) {
    char buf[4];
    std::snprintf(buf, sizeof buf, "%02X", static_cast<unsigned char>(bytes[i]));
    if (i > 0) out.push_back(' ');
    out += buf;
  }
  if (n < bytes.size()) out += " ...";
  out.push_back(']');
  return out;
}

}  // namespace k3::model
