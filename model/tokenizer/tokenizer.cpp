#include "model/tokenizer/tokenizer.h"

#include <algorithm>

#include "common/error.h"
#include "common/utf8.h"
#include "model/tokenizer/bpe.h"
#include "model/tokenizer/text_util.h"

namespace k3::model {
namespace {

// tokenization_kimi.py: TIKTOKEN_MAX_ENCODE_CHARS and MAX_NO_WHITESPACES_CHARS.
constexpr std::size_t kMaxEncodeChars = 400'000;
constexpr std::size_t kMaxRunChars = 25'000;

struct Char {
  bool space;
  std::size_t length;
};

// Python's str.isspace for ASCII: \t \n \v \f \r, 0x1C..0x1F and the space.
constexpr bool ascii_space(unsigned char b) noexcept {
  return (b >= 0x09 && b <= 0x0D) || (b >= 0x1C && b <= 0x20);
}

// One character as Python sees it; an invalid byte counts as one non-space character.
inline Char char_at(std::string_view text, std::size_t pos) noexcept {
  const auto b = static_cast<unsigned char>(text[pos]);
  if (b < 0x80) return {ascii_space(b), 1};
  const utf8::Step s = utf8::step(text.substr(pos));
  if (s.kind != utf8::StepKind::kValid) return {false, 1};
  return {utf8::python_isspace(s.code_point), s.length};
}

// _split_whitespaces_or_nonwhitespaces(chunk, 25000).
void split_runs(std::string_view text, std::size_t begin, std::size_t end,
                std::vector<std::string_view>& out) {
  std::size_t slice_start = begin;
  std::size_t run = 0;
  bool run_is_space = char_at(text, begin).space;
  for (std::size_t pos = begin; pos < end;) {
    const Char c = char_at(text, pos);
    if (c.space != run_is_space) {
      run = 1;
      run_is_space = c.space;
    } else if (++run > kMaxRunChars) {
      out.push_back(text.substr(slice_start, pos - slice_start));
      slice_start = pos;
      run = 1;
    }
    pos += c.length;
  }
  out.push_back(text.substr(slice_start, end - slice_start));
}

}  // namespace

struct Tokenizer::Scratch {
  explicit Scratch(const Pretokenizer& p) : cursor(p) {}
  Pretokenizer::Cursor cursor;
  BpeScratch bpe;
};

Tokenizer::Tokenizer(Vocabulary vocabulary) : vocab_(std::move(vocabulary)) {
  for (const std::string& name : vocab_.special_names()) {
    special_first_byte_[static_cast<unsigned char>(name.front())] = true;
    special_last_byte_[static_cast<unsigned char>(name.back())] = true;
    special_lengths_.push_back(name.size());
  }
  std::sort(special_lengths_.begin(), special_lengths_.end(), std::greater<>());
  special_lengths_.erase(std::unique(special_lengths_.begin(), special_lengths_.end()),
                         special_lengths_.end());
}

Tokenizer Tokenizer::load_tiktoken(const std::filesystem::path& path) {
  return Tokenizer(Vocabulary::load_tiktoken(path));
}

std::vector<std::string_view> Tokenizer::kimi_chunks(std::string_view text) {
  std::vector<std::string_view> out;
  if (text.empty()) return out;
  // Characters never outnumber bytes: short texts are one chunk of one run.
  if (text.size() <= kMaxRunChars) {
    out.push_back(text);
    return out;
  }
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t begin = pos;
    for (std::size_t chars = 0; chars < kMaxEncodeChars && pos < text.size(); ++chars) {
      pos += static_cast<unsigned char>(text[pos]) < 0x80 ? 1 : char_at(text, pos).length;
    }
    split_runs(text, begin, pos, out);
  }
  return out;
}

void Tokenizer::encode_ordinary(std::string_view text, Scratch& scratch,
                                std::vector<std::int32_t>& out) const {
  if (text.empty()) return;
  scratch.cursor.reset(text);
  std::string_view piece;
  while (scratch.cursor.next(piece)) {
    // tiktoken's shortcut: a piece that is a token is that token, merged or not.
    const std::int32_t rank = vocab_.rank_of(piece);
    if (rank >= 0) {
      out.push_back(rank);
    } else {
      bpe_encode(vocab_, piece, scratch.bpe, out);
    }
  }
}

void Tokenizer::encode_chunk(std::string_view chunk, const std::vector<bool>* allowed,
                             Scratch& scratch, std::vector<std::int32_t>& out) const {
  std::size_t start = 0;
  if (allowed != nullptr) {
    const std::int32_t base = vocab_.base_size();
    std::size_t i = 0;
    while (i < chunk.size()) {
      if (!special_first_byte_[static_cast<unsigned char>(chunk[i])]) {
        ++i;
        continue;
      }
      std::int32_t found = -1;
      std::size_t found_length = 0;
      for (const std::size_t len : special_lengths_) {
        if (len > chunk.size() - i) continue;
        if (!special_last_byte_[static_cast<unsigned char>(chunk[i + len - 1])]) continue;
        const std::optional<std::int32_t> id = vocab_.special_id(chunk.substr(i, len));
        if (id && (*allowed)[static_cast<std::size_t>(*id - base)]) {
          found = *id;
          found_length = len;
          break;
        }
      }
      if (found < 0) {
        ++i;
        continue;
      }
      encode_ordinary(chunk.substr(start, i - start), scratch, out);
      out.push_back(found);
      i += found_length;
      start = i;
    }
  }
  encode_ordinary(chunk.substr(start), scratch, out);
}

void Tokenizer::encode_into(std::string_view text, const AllowedSpecial& allowed,
                            std::vector<std::int32_t>& out) const {
  std::vector<bool> allowed_flags;
  const std::vector<bool>* allowed_ptr = nullptr;
  switch (allowed.kind()) {
    case AllowedSpecial::Kind::kNone:
      break;
    case AllowedSpecial::Kind::kAll:
      allowed_flags.assign(kReservedSpecialCount, true);
      allowed_ptr = &allowed_flags;
      break;
    case AllowedSpecial::Kind::kSome:
      allowed_flags.assign(kReservedSpecialCount, false);
      for (const std::string& name : allowed.names()) {
        const std::optional<std::int32_t> id = vocab_.special_id(name);
        if (!id) {
          throw InputError("allowed special token '" + printable(name) +
                           "' is not a special token of this vocabulary");
        }
        allowed_flags[static_cast<std::size_t>(*id - vocab_.base_size())] = true;
      }
      allowed_ptr = &allowed_flags;
      break;
  }

  Scratch scratch(pretokenizer_);
  if (text.size() <= kMaxRunChars) {
    encode_chunk(text, allowed_ptr, scratch, out);
    return;
  }
  for (const std::string_view chunk : kimi_chunks(text)) {
    encode_chunk(chunk, allowed_ptr, scratch, out);
  }
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text,
                                            const AllowedSpecial& allowed) const {
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_into(text, allowed, out);
  return out;
}

std::string_view Tokenizer::token_bytes(std::int32_t id) const {
  if (id < 0 || id >= vocab_.size()) {
    throw InputError("token id " + std::to_string(id) +
                     " is not in the vocabulary (valid ids are 0.." +
                     std::to_string(vocab_.size() - 1) + ")");
  }
  return vocab_.id_bytes(id);
}

std::string Tokenizer::decode_bytes(std::span<const std::int32_t> ids) const {
  std::string out;
  for (const std::int32_t id : ids) out += token_bytes(id);
  return out;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids) const {
  return utf8::replace_invalid(decode_bytes(ids));
}

std::string IncrementalDecoder::push(std::int32_t id) {
  pending_ += tokenizer_->token_bytes(id);  // throws before touching pending_ if unknown
  std::string out;
  std::size_t i = 0;
  while (i < pending_.size()) {
    const std::string_view rest = std::string_view(pending_).substr(i);
    const std::size_t valid = utf8::valid_prefix_length(rest);
    out.append(rest.substr(0, valid));
    i += valid;
    if (i >= pending_.size()) break;
    const utf8::Step s = utf8::step(std::string_view(pending_).substr(i));
    if (s.kind == utf8::StepKind::kIncomplete) break;  // wait for the next token
    utf8::append(out, utf8::kReplacementCharacter);
    i += s.length;
  }
  pending_.erase(0, i);
  return out;
}

std::string IncrementalDecoder::finish() {
  std::string out;
  if (!pending_.empty()) utf8::append(out, utf8::kReplacementCharacter);
  pending_.clear();
  return out;
}

}  // namespace k3::model
