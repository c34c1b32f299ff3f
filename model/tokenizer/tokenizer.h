// Tokenizer: Kimi-K3's tiktoken tokenizer (encode, decode, incremental decode).
//
// encode() reproduces tokenization_kimi.py's TikTokenTokenizer.encode:
//   1. the text is cut into chunks of at most 400,000 characters, and each chunk wherever a run
//      of whitespace or of non-whitespace characters (Python's str.isspace) exceeds 25,000;
//   2. in each of those, special tokens the caller allows are found (leftmost, longest) and the
//      text between them is encoded as ordinary text; disallowed special names are plain text;
//   3. ordinary text is split by the pre-tokenizer; a piece that is itself a token is that token
//      (tiktoken's shortcut, which can differ from merging), otherwise it is merged by rank.
// Invalid UTF-8 input is encoded losslessly: each invalid byte becomes its single-byte token.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/vocabulary.h"

namespace k3::model {

// Which special tokens encode() recognises in the text.
class AllowedSpecial {
 public:
  enum class Kind { kNone, kAll, kSome };

  static AllowedSpecial none() { return AllowedSpecial(Kind::kNone, {}); }
  static AllowedSpecial all() { return AllowedSpecial(Kind::kAll, {}); }
  // Only these names (each must be a special token of the vocabulary, or encode() throws).
  static AllowedSpecial only(std::vector<std::string> names) {
    return AllowedSpecial(Kind::kSome, std::move(names));
  }

  Kind kind() const noexcept { return kind_; }
  const std::vector<std::string>& names() const noexcept { return names_; }

 private:
  AllowedSpecial(Kind kind, std::vector<std::string> names)
      : kind_(kind), names_(std::move(names)) {}
  Kind kind_;
  std::vector<std::string> names_;
};

class Tokenizer {
 public:
  explicit Tokenizer(Vocabulary vocabulary);
  static Tokenizer load_tiktoken(const std::filesystem::path& path);

  const Vocabulary& vocabulary() const noexcept { return vocab_; }
  // Number of valid ids: base vocabulary plus the 256 specials.
  std::int32_t size() const noexcept { return vocab_.size(); }

  std::vector<std::int32_t> encode(std::string_view text,
                                   const AllowedSpecial& allowed = AllowedSpecial::none()) const;
  // Appends to `out` (no allocation beyond its growth once warmed up).
  void encode_into(std::string_view text, const AllowedSpecial& allowed,
                   std::vector<std::int32_t>& out) const;

  // The exact bytes of the ids (special tokens give their names). Unknown ids: InputError.
  std::string decode_bytes(std::span<const std::int32_t> ids) const;
  // As the reference decodes (tiktoken's errors="replace"): invalid UTF-8 becomes U+FFFD.
  std::string decode(std::span<const std::int32_t> ids) const;
  // Bytes of one id. Unknown ids: InputError.
  std::string_view token_bytes(std::int32_t id) const;

  bool is_special(std::int32_t id) const noexcept { return vocab_.is_special(id); }
  std::optional<std::int32_t> special_id(std::string_view name) const {
    return vocab_.special_id(name);
  }
  std::int32_t bos_id() const noexcept { return vocab_.base_size() + kBosOffset; }
  std::int32_t eos_id() const noexcept { return vocab_.base_size() + kEosOffset; }
  // <|end_of_msg|>: the config's eos_token_id and the token generation stops at.
  std::int32_t stop_id() const noexcept { return vocab_.base_size() + kEndOfMsgOffset; }
  std::int32_t unk_id() const noexcept { return vocab_.base_size() + kUnkOffset; }
  std::int32_t pad_id() const noexcept { return vocab_.base_size() + kPadOffset; }

  // The chunks Kimi's encode wrapper hands to tiktoken (step 1 above), in order.
  static std::vector<std::string_view> kimi_chunks(std::string_view text);

 private:
  struct Scratch;
  void encode_ordinary(std::string_view text, Scratch& scratch,
                       std::vector<std::int32_t>& out) const;
  void encode_chunk(std::string_view chunk, const std::vector<bool>* allowed, Scratch& scratch,
                    std::vector<std::int32_t>& out) const;

  Vocabulary vocab_;
  Pretokenizer pretokenizer_;
  std::vector<std::size_t> special_lengths_;  // distinct name lengths, longest first
  // Bytes special names start and end with: cheap filters before a name lookup.
  std::array<bool, 256> special_first_byte_{};
  std::array<bool, 256> special_last_byte_{};
};

// Turns ids into text as they are generated: push() returns the UTF-8 text completed by each
// token and holds back a trailing character that is still incomplete (a token may end in the
// middle of one). Bytes that can never become valid are returned as U+FFFD, so the pushes
// followed by finish() concatenate to exactly Tokenizer::decode() of the same ids.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}

  // Unknown ids throw InputError and leave the decoder unchanged.
  std::string push(std::int32_t id);
  // Flushes a held-back incomplete character as U+FFFD; the decoder is then empty.
  std::string finish();
  // The bytes held back (0..3 bytes of an incomplete character).
  std::string_view pending() const noexcept { return pending_; }
  void reset() noexcept { pending_.clear(); }

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;
};

}  // namespace k3::model
