// k3::Regex: the one wrapper around PCRE2 (8-bit code units). A compiled pattern is immutable
// and may be shared by every thread; a Regex::Matcher owns the match data of one thread and is
// reused call after call (the pre-tokenizer's hot loop). The one-shot helpers allocate their
// own match data per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;

namespace k3 {

class Regex {
 public:
  enum Flags : std::uint32_t {
    kBytes = 0,             // bytes, ASCII classes
    kUnicode = 1u << 0,     // UTF-8 subjects with Unicode properties (\d is category Nd, ...)
    kInvalidUtf = 1u << 1,  // with kUnicode: invalid UTF-8 never matches instead of failing
    kJit = 1u << 2,         // JIT-compile (falls back to the interpreter where JIT is missing)
  };

  // InternalError naming the pattern, the offset and PCRE2's message when it does not compile
  // (patterns are the program's own, never user input).
  explicit Regex(std::string_view pattern, std::uint32_t flags = kBytes);
  ~Regex();
  Regex(Regex&& other) noexcept;
  Regex& operator=(Regex&& other) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  struct Span {
    std::size_t begin = 0;
    std::size_t end = 0;  // one past
  };

  // The first match at or after `from` (exactly at `from` when `anchored`).
  std::optional<Span> find(std::string_view subject, std::size_t from = 0,
                           bool anchored = false) const;
  // The last of the non-overlapping matches, scanning left to right (Python's re.findall()[-1]).
  std::optional<Span> find_last(std::string_view subject) const;
  // The capture groups 1..n of a match of the whole subject (unset groups are empty views).
  std::optional<std::vector<std::string_view>> full_match(std::string_view subject) const;

  const std::string& pattern() const noexcept { return pattern_; }
  bool jit_enabled() const noexcept { return jit_; }

  class Matcher {
   public:
    explicit Matcher(const Regex& regex);
    ~Matcher();
    Matcher(const Matcher&) = delete;
    Matcher& operator=(const Matcher&) = delete;

    // As Regex::find; `valid_utf` promises the subject is valid UTF-8 (the caller checked), so
    // PCRE2 skips its own check and may take the JIT fast path.
    std::optional<Span> find(std::string_view subject, std::size_t from = 0, bool anchored = false,
                             bool valid_utf = false);
    // Group `index` of the last successful find (0 is the whole match); empty if unset.
    Span group(std::size_t index) const;

   private:
    friend class Regex;
    std::optional<Span> run(std::string_view subject, std::size_t from, std::uint32_t options,
                            bool valid_utf);
    const Regex* regex_;
    pcre2_real_match_data_8* data_;
  };

 private:
  pcre2_real_code_8* code_ = nullptr;
  std::string pattern_;
  bool jit_ = false;
};

}  // namespace k3
