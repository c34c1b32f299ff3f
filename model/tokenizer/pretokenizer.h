// Pretokenizer: splits text into the pieces BPE runs on, with Kimi's pat_str through PCRE2.
//
// Kimi's tokenization_kimi.py pattern is written for Rust's regex crate (tiktoken): it uses
// class intersection (`[...&&[^\p{Han}]]`), which PCRE2 10.42 does not have, and Rust's meaning
// of `\p{Han}` (the Script property) and `\s` (the White_Space property), which differ from
// PCRE2's defaults (Script_Extensions; PCRE2's \s also matches U+180E). pattern() is the same
// language written for PCRE2; see pretokenizer.cpp for the rewrite and the tests for the proof.
//
// Invalid UTF-8 is defined, not undefined: each byte that is not part of a valid character is a
// piece of its own (it encodes as its single-byte token), and the pattern runs on the valid runs
// between such bytes as if each run were the whole text.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/regex.h"

namespace k3::model {

class Pretokenizer {
 public:
  // Compiles the pattern once (with JIT when available).
  Pretokenizer();

  // Kimi's pat_str as tokenization_kimi.py has it (Rust regex syntax), for reference.
  static std::string_view kimi_pat_str() noexcept;
  // The PCRE2 pattern this class compiles (UTF | UCP), equivalent to kimi_pat_str().
  static const std::string& pattern();

  // Iterates over the pieces of one text with a reusable match block. Not thread-safe; use one
  // cursor per thread (the Pretokenizer itself is shared read-only).
  class Cursor {
   public:
    explicit Cursor(const Pretokenizer& pretokenizer);

    // Starts over on `text`, which must outlive the iteration.
    void reset(std::string_view text) noexcept;
    // The next piece, or false at the end. Pieces are non-empty and tile the text exactly.
    bool next(std::string_view& piece);

   private:
    Regex::Matcher matcher_;
    std::string_view text_;
    std::size_t pos_ = 0;
    std::size_t run_begin_ = 0;  // [run_begin_, run_end_): the valid UTF-8 run pos_ is in
    std::size_t run_end_ = 0;
  };

  std::vector<std::string_view> split(std::string_view text) const;

  bool jit_enabled() const noexcept { return regex_.jit_enabled(); }

 private:
  Regex regex_;
};

}  // namespace k3::model
