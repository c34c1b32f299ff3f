// eval::score_completions: re-scoring completions produced elsewhere (another k3eval run,
// SGLang, any server) against the GSM8K data, e.g. to compare extractors or to check a peer's
// numbers with exactly the same labels.
//
// Two inputs are accepted, told apart by their first bytes:
//
// (a) JSONL, one completion per line: {"index": i, "output": text}. The index may be spelled
//     "id" (k3eval's results files, whose text is "output_text") or "prompt_id" (the rows
//     SGLang's dump_bench_raw_result writes for --raw-result-file:
//     {"prompt_id", "prompt", "output", "correct"}). When a row carries "prompt", it must end
//     with question i's "Question: ...\nAnswer:", which catches completions made from other data.
//
// (b) The text file few_shot_gsm8k.py / bench_sglang.py write with dump_state_text
//     (tmp_output_gsm8k.txt). For each state i in order it holds
//        40 '=' + " i " + 40 '=' + "\n" + state.text() + "\n" + 80 '=' + "\n\n"
//     where state.text() is the whole program text: few-shot prefix, "Question: ...\nAnswer:"
//     and the completion. The completion is what follows the last occurrence of question i's
//     "Question: ...\nAnswer:" in block i, and state i is question i (SGLang evaluates lines
//     0..N-1 in order). Limits of that format: it carries no token counts or prompt ids, and a
//     completion containing the next block's exact separator and header would split there.
//
// No stop strings are applied: the completions are taken as already finished. Labels are
// extract_sglang of the reference answers; predictions use `extractor`.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "eval/dataset.h"
#include "eval/extract.h"
#include "eval/metrics.h"
#include "eval/results.h"

namespace k3::eval {

// Fills prediction, invalid and correct of `result` from its output_text and label.
void grade(QuestionResult& result, Extractor extractor);

struct ScoreReport {
  std::string format;                   // "jsonl" or "sglang-dump"
  std::vector<QuestionResult> results;  // in input order; id, output_text, label, prediction,
                                        // correct, invalid set; counts and timings are 0
  Metrics metrics;                      // no timing: print with format_accuracy_lines
};

// `questions` is the data file the completions were made from (its index is the completion
// index). InputError naming file:line for malformed input, an index out of range or repeated,
// or a completion that does not belong to its question.
ScoreReport score_completions(std::span<const Question> questions,
                              const std::filesystem::path& completions, Extractor extractor);

}  // namespace k3::eval
