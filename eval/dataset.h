// eval::read_gsm8k: the GSM8K JSONL file (openai/grade-school-math's test.jsonl, or any file of
// the same shape given with --data-path), read strictly.
//
// SGLang reads it with json.loads per line and uses only "question" and "answer"; a bad line
// there is a Python traceback. Here every bad line is a k3::InputError naming file:line and what
// was expected, before any rank loads a weight.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace k3::eval {

struct Question {
  std::size_t line = 0;  // 1-based line in the file, for messages
  std::string question;
  std::string answer;  // the worked solution, ending in "#### <number>"
};

// One object per line with string fields "question" and "answer" (other fields are ignored, as
// SGLang does). Blank lines are allowed only at the end of the file. SGLang's read_jsonl also
// skips lines starting with '#'; GSM8K has none, and here they are an error like any non-JSON.
// The index of a Question in the returned vector is its id everywhere else (SGLang's `i`).
std::vector<Question> read_gsm8k(const std::filesystem::path& path);

}  // namespace k3::eval
