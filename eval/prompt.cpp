#include "eval/prompt.h"

#include "eval/extract.h"
#include "common/error.h"

namespace k3::eval {

std::string format_example(const Question& question, bool include_answer) {
  std::string out = "Question: " + question.question + "\nAnswer:";
  if (include_answer) out += " " + question.answer;
  return out;
}

PromptSet build_prompts(std::span<const Question> data, const PromptOptions& options,
                        std::string_view source) {
  const std::string in = " in " + std::string(source);
  const std::string available = std::to_string(data.size()) + " questions" + in;
  if (options.num_shots > data.size()) {
    throw UsageError("num_shots = " + std::to_string(options.num_shots) + " exceeds the " +
                     available);
  }
  if (options.num_questions == 0) throw UsageError("num_questions must be at least 1");
  const std::size_t first = options.exclude_shot_questions ? options.num_shots : 0;
  if (options.num_questions > data.size() - first) {
    if (options.exclude_shot_questions) {
      throw UsageError("num_questions = " + std::to_string(options.num_questions) +
                       " exceeds the " + std::to_string(data.size() - first) +
                       " questions after the " + std::to_string(options.num_shots) + " shots" + in +
                       " (exclude_shot_questions)");
    }
    throw UsageError("num_questions = " + std::to_string(options.num_questions) + " exceeds the " +
                     available);
  }

  PromptSet set;
  for (std::size_t i = 0; i < options.num_shots; ++i) {
    set.prefix += format_example(data[i], true) + "\n\n";
  }
  set.prompts.reserve(options.num_questions);
  for (std::size_t i = first; i < first + options.num_questions; ++i) {
    Prompt p;
    p.id = i;
    p.suffix = format_example(data[i], false);
    p.label = extract_sglang(data[i].answer);
    if (is_invalid(p.label)) {
      throw InputError(std::string(source) + ":" + std::to_string(data[i].line) +
                       ": the reference answer has no usable final number (SGLang's "
                       "get_answer_value gives INVALID); expected it to end in \"#### <number>\"");
    }
    set.prompts.push_back(std::move(p));
  }
  return set;
}

}  // namespace k3::eval
