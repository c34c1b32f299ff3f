#include "eval/extract.h"

#include <algorithm>
#include <array>
#include <optional>

#include "common/error.h"
#include "common/regex.h"

namespace k3::eval {

namespace {

// Python's `\d` on str is Unicode category Nd; PCRE2 gives the same with UCP. Invalid UTF-8 in
// a completion never matches (Python would see U+FFFD there, not a digit either).
const Regex& digit_runs() {
  static const Regex re("\\d+", Regex::kUnicode | Regex::kInvalidUtf);
  return re;
}

// A '-' right after a digit is an operator ("10-2"), so it is not taken as a sign.
const Regex& flexible_number() {
  static const Regex re("(?:(?<![0-9])-)?[0-9]+(?:\\.[0-9]+)?");
  return re;
}

bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }

// Python >= 3.11 refuses to parse decimal int literals longer than this (sys.int_info).
constexpr std::size_t kPythonMaxIntDigits = 4300;

std::string canonical_decimal(std::string_view number) {
  bool negative = false;
  if (!number.empty() && number.front() == '-') {
    negative = true;
    number.remove_prefix(1);
  }
  std::string_view integer = number, fraction;
  if (const std::size_t dot = number.find('.'); dot != std::string_view::npos) {
    integer = number.substr(0, dot);
    fraction = number.substr(dot + 1);
  }
  while (integer.size() > 1 && integer.front() == '0') integer.remove_prefix(1);
  while (!fraction.empty() && fraction.back() == '0') fraction.remove_suffix(1);
  std::string out(integer);
  if (!fraction.empty()) out += "." + std::string(fraction);
  if (negative && out != "0") out.insert(out.begin(), '-');
  return out;
}

}  // namespace

std::string extract_sglang(std::string_view text) {
  std::string s;
  s.reserve(text.size());
  std::copy_if(text.begin(), text.end(), std::back_inserter(s), [](char c) { return c != ','; });
  const auto last = digit_runs().find_last(s);
  if (!last) return std::string(kInvalidAnswer);
  const std::string_view run = std::string_view(s).substr(last->begin, last->end - last->begin);
  // ast.literal_eval: a non-ASCII digit is an "invalid character" SyntaxError.
  if (!std::all_of(run.begin(), run.end(), is_ascii_digit)) return std::string(kInvalidAnswer);
  if (run.front() == '0') {
    // "0", "00", ... are valid Python literals; "007" is "leading zeros ... not permitted".
    if (run.find_first_not_of('0') == std::string_view::npos) return "0";
    return std::string(kInvalidAnswer);
  }
  if (run.size() > kPythonMaxIntDigits) return std::string(kInvalidAnswer);
  return std::string(run);
}

std::string extract_flexible(std::string_view text) {
  std::string s;
  s.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const bool separator = text[i] == ',' && i > 0 && i + 1 < text.size() &&
                           is_ascii_digit(text[i - 1]) && is_ascii_digit(text[i + 1]);
    if (!separator) s.push_back(text[i]);
  }
  const Regex& number = flexible_number();
  if (const std::size_t hashes = s.find("####"); hashes != std::string::npos) {
    std::size_t at = hashes + 4;
    while (at < s.size() && (s[at] == ' ' || s[at] == '\t')) ++at;
    if (at < s.size() && s[at] == '$') ++at;
    while (at < s.size() && (s[at] == ' ' || s[at] == '\t')) ++at;
    if (const auto m = number.find(s, at, /*anchored=*/true)) {
      return canonical_decimal(std::string_view(s).substr(m->begin, m->end - m->begin));
    }
  }
  if (const auto m = number.find_last(s)) {
    return canonical_decimal(std::string_view(s).substr(m->begin, m->end - m->begin));
  }
  return std::string(kInvalidAnswer);
}

std::string extract_answer(std::string_view text, Extractor extractor) {
  return extractor == Extractor::kFlexible ? extract_flexible(text) : extract_sglang(text);
}

std::string_view extractor_name(Extractor extractor) {
  return extractor == Extractor::kFlexible ? "flexible" : "sglang";
}

Extractor parse_extractor(std::string_view name) {
  if (name == "sglang") return Extractor::kSglang;
  if (name == "flexible") return Extractor::kFlexible;
  throw UsageError("answer extractor '" + std::string(name) + "' is not one of sglang, flexible");
}

}  // namespace k3::eval
