#include "common/regex.h"

#include <pcre2.h>

#include <algorithm>
#include <array>
#include <utility>

#include "common/error.h"

namespace k3 {

namespace {

std::string pcre2_message(int code) {
  std::array<PCRE2_UCHAR, 256> text{};
  pcre2_get_error_message(code, text.data(), text.size());
  return reinterpret_cast<const char*>(text.data());
}

}  // namespace

Regex::Regex(std::string_view pattern, std::uint32_t flags) : pattern_(pattern) {
  std::uint32_t options = 0;
  if (flags & kUnicode) options |= PCRE2_UTF | PCRE2_UCP;
  if (flags & kInvalidUtf) options |= PCRE2_MATCH_INVALID_UTF;
  int error = 0;
  PCRE2_SIZE at = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                        &error, &at, nullptr);
  if (code_ == nullptr) {
    throw InternalError("the pattern " + pattern_ + " does not compile at offset " +
                        std::to_string(at) + ": " + pcre2_message(error));
  }
  // Without JIT (an unsupported CPU) pcre2_match interprets the same pattern, only slower.
  if (flags & kJit) jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(code_); }

Regex::Regex(Regex&& other) noexcept
    : code_(std::exchange(other.code_, nullptr)),
      pattern_(std::move(other.pattern_)),
      jit_(other.jit_) {}

Regex& Regex::operator=(Regex&& other) noexcept {
  if (this != &other) {
    pcre2_code_free(code_);
    code_ = std::exchange(other.code_, nullptr);
    pattern_ = std::move(other.pattern_);
    jit_ = other.jit_;
  }
  return *this;
}

Regex::Matcher::Matcher(const Regex& regex)
    : regex_(&regex), data_(pcre2_match_data_create_from_pattern(regex.code_, nullptr)) {
  if (data_ == nullptr)
    throw InternalError("out of memory for the match data of " + regex.pattern_);
}

Regex::Matcher::~Matcher() { pcre2_match_data_free(data_); }

std::optional<Regex::Span> Regex::Matcher::find(std::string_view subject, std::size_t from,
                                                bool anchored, bool valid_utf) {
  return run(subject, from, anchored ? PCRE2_ANCHORED : 0, valid_utf);
}

std::optional<Regex::Span> Regex::Matcher::run(std::string_view subject, std::size_t from,
                                               std::uint32_t options, bool valid_utf) {
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc = PCRE2_ERROR_JIT_STACKLIMIT;
  if (regex_->jit_ && valid_utf && options == 0) {  // JIT matching takes no anchoring options
    // The fast path skips PCRE2's checks, which the caller's validation made redundant.
    rc = pcre2_jit_match(regex_->code_, text, subject.size(), from, options, data_, nullptr);
  }
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    rc = pcre2_match(regex_->code_, text, subject.size(), from,
                     options | (valid_utf ? PCRE2_NO_UTF_CHECK : 0), data_, nullptr);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return std::nullopt;
  if (rc < 0) {
    throw InternalError("matching " + regex_->pattern_ + " failed at byte " + std::to_string(from) +
                        ": " + pcre2_message(rc));
  }
  return group(0);
}

Regex::Span Regex::Matcher::group(std::size_t index) const {
  if (index >= pcre2_get_ovector_count(data_)) return {};
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data_);
  if (ov[2 * index] == PCRE2_UNSET) return {};
  return {ov[2 * index], ov[2 * index + 1]};
}

std::optional<Regex::Span> Regex::find(std::string_view subject, std::size_t from,
                                       bool anchored) const {
  Matcher m(*this);
  return m.find(subject, from, anchored);
}

std::optional<Regex::Span> Regex::find_last(std::string_view subject) const {
  Matcher m(*this);
  std::optional<Span> last;
  std::size_t from = 0;
  while (from <= subject.size()) {
    const auto found = m.find(subject, from);
    if (!found) break;
    last = found;
    from = std::max(found->end, found->begin + 1);
  }
  return last;
}

std::optional<std::vector<std::string_view>> Regex::full_match(std::string_view subject) const {
  Matcher m(*this);
  if (!m.run(subject, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, false)) return std::nullopt;
  std::uint32_t groups = 0;
  pcre2_pattern_info(code_, PCRE2_INFO_CAPTURECOUNT, &groups);
  std::vector<std::string_view> out;
  out.reserve(groups);
  for (std::size_t i = 1; i <= groups; ++i) {
    const Span g = m.group(i);
    out.push_back(subject.substr(g.begin, g.end - g.begin));
  }
  return out;
}

}  // namespace k3
