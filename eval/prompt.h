// eval::build_prompts: SGLang-compatible few-shot GSM8K prompts (few_shot_gsm8k.py and
// benchmark/gsm8k/bench_sglang.py, identical in every version checked):
//
//   prompt(i) = shots + "Question: " + question[i] + "\nAnswer:"
//   shots     = concatenation over j < num_shots of
//               "Question: " + question[j] + "\nAnswer: " + answer[j] + "\n\n"
//
// No chat template, no trailing space after the last "Answer:". The shots are the first lines
// of the file, and SGLang evaluates lines 0..N-1, so with its defaults questions 0..4 are asked
// with their own solution in the prompt. `exclude_shot_questions` starts the evaluated questions
// after the shots instead (leak-free, like SGLang's newer simple_eval_gsm8k.py); the ids stay
// file indices either way.
//
// The shared prefix is returned once, apart from the per-question suffixes, so the engine can
// prefill and cache it once.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "eval/dataset.h"

namespace k3::eval {

struct PromptOptions {
  std::size_t num_shots = 5;        // SGLang's --num-shots default
  std::size_t num_questions = 200;  // SGLang's --num-questions default
  bool exclude_shot_questions = false;
};

struct Prompt {
  std::size_t id = 0;  // index of the question in the data file (SGLang's i)
  std::string suffix;  // "Question: ...\nAnswer:"
  std::string label;   // extract_sglang(reference answer), never INVALID
};

struct PromptSet {
  std::string prefix;  // the few-shot examples, shared by every prompt ("" for 0 shots)
  std::vector<Prompt> prompts;

  std::string text(std::size_t i) const { return prefix + prompts.at(i).suffix; }
};

// "Question: " + q + "\nAnswer:", plus " " + answer when `include_answer` (get_one_example).
std::string format_example(const Question& question, bool include_answer);

// UsageError when the shots or the questions do not fit in `data` (or num_questions is 0);
// InputError "<source>:<line>: ..." when an evaluated question's reference answer has no number
// (SGLang asserts that no label is INVALID). `source` names the data file in messages.
PromptSet build_prompts(std::span<const Question> data, const PromptOptions& options,
                        std::string_view source);

}  // namespace k3::eval
