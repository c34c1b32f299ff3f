// eval answer extraction: turning a completion (or a reference solution) into the number that is
// compared with the label.
//
// An answer is the canonical decimal text of a number ("18", "-3.5", "123456789012345678901234")
// or kInvalidAnswer. Text rather than int64 keeps SGLang's semantics exact: Python integers are
// unbounded, so a 30-digit prediction is a valid (wrong) answer there, not an overflow. Two
// answers are equal exactly when their texts are equal.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace k3::eval {

// SGLang's INVALID (few_shot_gsm8k.py), and the answer text that stands for it. SGLang counts
// invalid predictions as `preds == INVALID`, so the sentinel is a value like any other.
inline constexpr std::int64_t kInvalid = -9999999;
inline constexpr std::string_view kInvalidAnswer = "-9999999";

inline bool is_invalid(std::string_view answer) { return answer == kInvalidAnswer; }

// SGLang's get_answer_value, exactly:
//   1. every ',' is removed;
//   2. the last run of decimal digits is taken (Python's re `\d+` on str: any Unicode digit of
//      category Nd, so "١٢" is a run too); none gives INVALID;
//   3. ast.literal_eval of that run: ASCII digits only ("١٢" raises SyntaxError), no leading
//      zero unless every digit is 0 ("0", "00" are 0; "007" raises), and at most 4300 digits
//      (Python >= 3.11's int_max_str_digits, raised as SyntaxError by the parser); a
//      SyntaxError gives INVALID.
// So "$1,234.50" gives "50" and "-7" gives "7", as in SGLang.
std::string extract_sglang(std::string_view text);

// A more forgiving extractor for models that do not copy the few-shot format exactly. It
// accepts ASCII numbers with an optional '-' sign (a '-' right after a digit is a minus
// operator, not a sign) and an optional decimal part, with ',' between digits ignored:
//   1. the first number after the first "####" (spaces and one '$' may come between), as the
//      few-shot solutions end in "#### N";
//   2. otherwise the last number in the text;
//   3. otherwise INVALID.
// The number is canonicalised: leading zeros, trailing fractional zeros and "-0" dropped
// ("007" -> "7", "18.00" -> "18", "-0.50" -> "-0.5"). Labels are always extract_sglang's.
std::string extract_flexible(std::string_view text);

enum class Extractor { kSglang, kFlexible };

std::string extract_answer(std::string_view text, Extractor extractor);
std::string_view extractor_name(Extractor extractor);  // "sglang", "flexible"
Extractor parse_extractor(std::string_view name);      // UsageError for anything else

}  // namespace k3::eval
