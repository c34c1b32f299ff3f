// results.json as lm-evaluation-harness (EleutherAI, v0.4) writes it for its gsm8k task, so that
// dashboards built on lm-eval read k3eval's runs: exact_match under lm-eval's two gsm8k filters
// with their standard errors, the sample counts, the task's and the run's configuration.
//
// The filters are lm-eval's (lm_eval/tasks/gsm8k/gsm8k.yaml): "strict-match" takes the first
// "#### N" (regex `#### (\-?[0-9\.\,]+)`), "flexible-extract" the last number-like run (regex
// `(-?[$0-9.,]{2,})|(-?[0-9]+)`); "[invalid]" when none. Before comparing, both sides lose every
// ',' and '$', everything up to the last "#### " and one final '.' (the task's
// regexes_to_ignore). The target is the question's label (eval/extract.h), the number after the
// reference's "####". The scores are of k3eval's own completions (its prompts, SGLang's by
// default), so they compare across k3eval runs; they are not lm-eval's run of the model.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/results.h"

namespace k3::eval {

inline constexpr std::string_view kLmEvalInvalid = "[invalid]";

std::string lm_eval_strict_match(std::string_view completion);
std::string lm_eval_flexible_extract(std::string_view completion);
// The task's regexes_to_ignore applied to a filtered answer or a target.
std::string lm_eval_normalize(std::string_view answer);

// The whole results.json. `config` is the run's configuration (summary.json's "config":
// model_path, num_shots, max_new_tokens, temperature, seed, parallel; absent keys are null).
// A standard error needs two questions: with fewer it is "N/A", as lm-eval writes it.
nlohmann::ordered_json lm_eval_results(const std::vector<QuestionResult>& results,
                                       const nlohmann::json& config);

}  // namespace k3::eval
