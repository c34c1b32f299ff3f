#include "model/tokenizer/vocabulary.h"

#include <charconv>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "model/tokenizer/text_util.h"
#include "common/error.h"

namespace k3::model {
namespace {

constexpr char kBase64Alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int base64_value(char c) noexcept {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Ids must stay below 2^31 with the 256 specials on top.
constexpr std::int64_t kMaxBaseSize =
    std::numeric_limits<std::int32_t>::max() - kReservedSpecialCount;

std::string where(std::string_view source, const std::vector<std::uint32_t>* lines,
                  std::int32_t rank) {
  std::ostringstream os;
  if (lines != nullptr) {
    os << source << " line " << (*lines)[rank];
  } else {
    os << source << " token " << rank;
  }
  return os.str();
}

}  // namespace

std::vector<std::string> kimi_k3_special_names(std::int32_t base_size) {
  std::vector<std::string> names(kReservedSpecialCount);
  for (std::int32_t i = 0; i < kReservedSpecialCount; ++i) {
    names[i] =
        "<|reserved_token_" + std::to_string(static_cast<std::int64_t>(base_size) + i) + "|>";
  }
  // Kimi-K3's tokenizer_config.json added_tokens_decoder, by offset from the base size.
  names[kBosOffset] = "[BOS]";
  names[kEosOffset] = "[EOS]";
  names[kEndOfMsgOffset] = "<|end_of_msg|>";
  names[3] = "<|open|>";
  names[4] = "<|close|>";
  names[5] = "<|sep|>";
  names[6] = "[start_header_id]";
  names[7] = "[end_header_id]";
  names[9] = "[EOT]";
  names[18] = "<|media_begin|>";
  names[19] = "<|media_content|>";
  names[20] = "<|media_end|>";
  names[21] = "<|media_pad|>";
  names[65] = "<osagent_mode>";
  names[kUnkOffset] = "[UNK]";
  names[kPadOffset] = "[PAD]";
  return names;
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t v = (p[i] << 16) | (p[i + 1] << 8) | p[i + 2];
    out.push_back(kBase64Alphabet[(v >> 18) & 63]);
    out.push_back(kBase64Alphabet[(v >> 12) & 63]);
    out.push_back(kBase64Alphabet[(v >> 6) & 63]);
    out.push_back(kBase64Alphabet[v & 63]);
  }
  const std::size_t rest = bytes.size() - i;
  if (rest == 1) {
    const std::uint32_t v = p[i] << 16;
    out.push_back(kBase64Alphabet[(v >> 18) & 63]);
    out.push_back(kBase64Alphabet[(v >> 12) & 63]);
    out += "==";
  } else if (rest == 2) {
    const std::uint32_t v = (p[i] << 16) | (p[i + 1] << 8);
    out.push_back(kBase64Alphabet[(v >> 18) & 63]);
    out.push_back(kBase64Alphabet[(v >> 12) & 63]);
    out.push_back(kBase64Alphabet[(v >> 6) & 63]);
    out.push_back('=');
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.empty() || text.size() % 4 != 0) return std::nullopt;
  std::size_t pad = 0;
  if (text.back() == '=') pad = text[text.size() - 2] == '=' ? 2 : 1;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int v[4];
    for (int k = 0; k < 4; ++k) {
      const bool is_pad = last && k >= 4 - static_cast<int>(pad);
      v[k] = is_pad ? 0 : base64_value(text[i + k]);
      if (v[k] < 0) return std::nullopt;  // also rejects '=' anywhere but the padding
    }
    const std::uint32_t word = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out.push_back(static_cast<char>((word >> 16) & 0xFF));
    if (!last || pad < 2) out.push_back(static_cast<char>((word >> 8) & 0xFF));
    if (!last || pad < 1) out.push_back(static_cast<char>(word & 0xFF));
    if (last && ((pad == 1 && (word & 0xFF) != 0) || (pad == 2 && (word & 0xFFFF) != 0))) {
      return std::nullopt;  // non-canonical: unused bits set
    }
  }
  return out;
}

Vocabulary Vocabulary::parse_tiktoken(std::string_view text, std::string_view source) {
  std::string arena;
  std::vector<std::uint32_t> offsets{0};
  std::vector<std::uint32_t> lines;
  arena.reserve(text.size() / 2);

  std::size_t pos = 0;
  std::uint32_t line_no = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;

    // tiktoken splits on whitespace and needs exactly two fields.
    std::string_view fields[3];
    int count = 0;
    std::size_t i = 0;
    while (i < line.size() && count < 3) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      if (i >= line.size()) break;
      const std::size_t start = i;
      while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
      fields[count++] = line.substr(start, i - start);
    }
    const auto prefix = [&] { return std::string(source) + " line " + std::to_string(line_no); };
    if (count != 2) {
      throw InputError(prefix() + ": expected '<base64> <rank>', got '" + printable(line) + "'");
    }
    const std::optional<std::string> bytes = base64_decode(fields[0]);
    if (!bytes) {
      throw InputError(prefix() + ": '" + printable(fields[0]) + "' is not valid base64");
    }
    std::int64_t rank = -1;
    {
      const char* first = fields[1].data();
      const char* last = first + fields[1].size();
      const auto [ptr, ec] = std::from_chars(first, last, rank);
      if (ec != std::errc() || ptr != last || rank < 0 || fields[1][0] == '+') {
        throw InputError(prefix() + ": rank '" + printable(fields[1]) +
                         "' is not a non-negative integer");
      }
    }
    const auto expected = static_cast<std::int64_t>(lines.size());
    if (rank != expected) {
      throw InputError(prefix() + ": rank " + std::to_string(rank) + " out of order, expected " +
                       std::to_string(expected) + " (ranks must count 0, 1, 2, ... in file order)");
    }
    if (expected >= kMaxBaseSize) throw InputError(prefix() + ": too many tokens");
    if (arena.size() + bytes->size() > std::numeric_limits<std::uint32_t>::max()) {
      throw InputError(prefix() + ": token bytes exceed 4 GiB in total");
    }
    arena += *bytes;
    offsets.push_back(static_cast<std::uint32_t>(arena.size()));
    lines.push_back(line_no);
  }
  return build(std::move(arena), std::move(offsets), source, &lines);
}

Vocabulary Vocabulary::load_tiktoken(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string() + ": cannot open");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw InputError(path.string() + ": read error");
  return parse_tiktoken(buf.str(), path.string());
}

Vocabulary Vocabulary::from_ranked_tokens(const std::vector<std::string>& tokens,
                                          std::string_view source) {
  if (static_cast<std::int64_t>(tokens.size()) > kMaxBaseSize) {
    throw InputError(std::string(source) + ": too many tokens");
  }
  std::string arena;
  std::vector<std::uint32_t> offsets{0};
  offsets.reserve(tokens.size() + 1);
  for (std::size_t r = 0; r < tokens.size(); ++r) {
    if (tokens[r].empty()) {
      throw InputError(std::string(source) + " token " + std::to_string(r) + ": empty token");
    }
    if (arena.size() + tokens[r].size() > std::numeric_limits<std::uint32_t>::max()) {
      throw InputError(std::string(source) + ": token bytes exceed 4 GiB in total");
    }
    arena += tokens[r];
    offsets.push_back(static_cast<std::uint32_t>(arena.size()));
  }
  return build(std::move(arena), std::move(offsets), source, nullptr);
}

Vocabulary Vocabulary::build(std::string arena, std::vector<std::uint32_t> offsets,
                             std::string_view source, const std::vector<std::uint32_t>* lines) {
  Vocabulary v;
  v.arena_ = std::move(arena);
  v.offsets_ = std::move(offsets);
  const std::int32_t n = v.base_size();
  if (n == 0) throw InputError(std::string(source) + ": contains no tokens");

  std::size_t capacity = 16;
  while (capacity < static_cast<std::size_t>(n) * 2) capacity *= 2;
  v.slots_.assign(capacity, Slot{0, -1});
  v.mask_ = capacity - 1;
  v.byte_rank_.fill(-1);

  for (std::int32_t r = 0; r < n; ++r) {
    const std::string_view bytes = v.token_bytes(r);
    if (bytes.empty()) throw InputError(where(source, lines, r) + ": empty token");
    const std::uint64_t h = detail::hash_bytes(bytes.data(), bytes.size());
    const auto tag = static_cast<std::uint32_t>(h >> 32);
    std::size_t i = h & v.mask_;
    for (;; i = (i + 1) & v.mask_) {
      const Slot& s = v.slots_[i];
      if (s.rank < 0) break;
      if (s.tag == tag && v.token_bytes(s.rank) == bytes) {
        const std::string other = lines != nullptr ? "line " + std::to_string((*lines)[s.rank])
                                                   : "token " + std::to_string(s.rank);
        throw InputError(where(source, lines, r) + ": token " + hex_bytes(bytes) + " duplicates " +
                         other);
      }
    }
    v.slots_[i] = Slot{tag, r};
    if (bytes.size() == 1) v.byte_rank_[static_cast<unsigned char>(bytes[0])] = r;
  }
  for (int b = 0; b < 256; ++b) {
    if (v.byte_rank_[b] < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      throw InputError(std::string(source) + ": no token for byte " + hex +
                       " (a byte-level BPE vocabulary needs all 256 single bytes)");
    }
  }

  v.special_names_ = kimi_k3_special_names(n);
  for (std::int32_t i = 0; i < kReservedSpecialCount; ++i) {
    v.special_ids_.emplace(v.special_names_[i], n + i);
  }
  return v;
}

std::string Vocabulary::to_tiktoken() const {
  std::string out;
  out.reserve(arena_.size() * 2 + static_cast<std::size_t>(base_size()) * 8);
  for (std::int32_t r = 0; r < base_size(); ++r) {
    out += base64_encode(token_bytes(r));
    out += ' ';
    out += std::to_string(r);
    out += '\n';
  }
  return out;
}

std::optional<std::int32_t> Vocabulary::special_id(std::string_view name) const {
  const auto it = special_ids_.find(name);
  if (it == special_ids_.end()) return std::nullopt;
  return it->second;
}

}  // namespace k3::model
