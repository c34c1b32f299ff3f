#include "eval/lm_eval.h"

#include <chrono>
#include <cmath>

#include "common/regex.h"
#include "eval/stop.h"

namespace k3::eval {

namespace {

constexpr std::string_view kStrictPrefix = "#### ";

// lm-eval's mean_stderr: the sample standard deviation (n - 1) over sqrt(n).
nlohmann::ordered_json stderr_of(const std::vector<bool>& hits) {
  const std::size_t n = hits.size();
  if (n < 2) return "N/A";
  double mean = 0;
  for (bool h : hits) mean += h ? 1.0 : 0.0;
  mean /= static_cast<double>(n);
  double squares = 0;
  for (bool h : hits) squares += ((h ? 1.0 : 0.0) - mean) * ((h ? 1.0 : 0.0) - mean);
  return std::sqrt(squares / static_cast<double>(n - 1)) / std::sqrt(static_cast<double>(n));
}

double mean_of(const std::vector<bool>& hits) {
  if (hits.empty()) return 0;
  std::size_t k = 0;
  for (bool h : hits) k += h ? 1 : 0;
  return static_cast<double>(k) / static_cast<double>(hits.size());
}

nlohmann::ordered_json value_or_null(const nlohmann::json& config, const char* key) {
  return config.is_object() && config.contains(key) ? nlohmann::ordered_json(config[key])
                                                    : nlohmann::ordered_json();
}

}  // namespace

std::string lm_eval_strict_match(std::string_view completion) {
  static const Regex kStrict(R"(#### (\-?[0-9\.\,]+))");
  const auto m = kStrict.find(completion);
  if (!m) return std::string(kLmEvalInvalid);
  return std::string(completion.substr(m->begin + kStrictPrefix.size(), m->end - m->begin - kStrictPrefix.size()));
}

std::string lm_eval_flexible_extract(std::string_view completion) {
  static const Regex kFlexible(R"((-?[$0-9.,]{2,})|(-?[0-9]+))");
  const auto m = kFlexible.find_last(completion);
  if (!m) return std::string(kLmEvalInvalid);
  return std::string(completion.substr(m->begin, m->end - m->begin));
}

std::string lm_eval_normalize(std::string_view answer) {
  const auto hashes = answer.rfind(kStrictPrefix);
  if (hashes != std::string_view::npos) answer.remove_prefix(hashes + kStrictPrefix.size());
  std::string out;
  for (char c : answer) {
    if (c != ',' && c != '$') out += c;
  }
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

nlohmann::ordered_json lm_eval_results(const std::vector<QuestionResult>& results,
                                       const nlohmann::json& config) {
  std::vector<bool> strict, flexible;
  for (const QuestionResult& r : results) {
    const std::string target = lm_eval_normalize(r.label);
    strict.push_back(lm_eval_normalize(lm_eval_strict_match(r.output_text)) == target);
    flexible.push_back(lm_eval_normalize(lm_eval_flexible_extract(r.output_text)) == target);
  }
  using J = nlohmann::ordered_json;
  const J shots = value_or_null(config, "num_shots");
  const J model_path = value_or_null(config, "model_path");
  const double temperature = config.is_object() && config.contains("temperature") &&
                                     config["temperature"].is_number()
                                 ? config["temperature"].get<double>()
                                 : 0.0;
  J metric = J::object();
  metric["metric"] = "exact_match";
  metric["aggregation"] = "mean";
  metric["higher_is_better"] = true;
  metric["ignore_case"] = true;
  metric["ignore_punctuation"] = false;
  metric["regexes_to_ignore"] = {",", "\\$", "(?s).*#### ", "\\.$"};
  J task = J::object();
  task["task"] = "gsm8k";
  task["dataset_path"] = "gsm8k";
  task["dataset_name"] = "main";
  task["test_split"] = "test";
  task["num_fewshot"] = shots;
  task["output_type"] = "generate_until";
  task["generation_kwargs"] = {{"until", sglang_stop_strings()},
                               {"do_sample", temperature > 0},
                               {"temperature", temperature},
                               {"max_gen_toks", value_or_null(config, "max_new_tokens")}};
  task["metric_list"] = J::array({metric});
  task["filter_list"] = J::array(
      {{{"name", "strict-match"},
        {"filter", J::array({{{"function", "regex"}, {"regex_pattern", "#### (\\-?[0-9\\.\\,]+)"}},
                             {{"function", "take_first"}}})}},
       {{"name", "flexible-extract"},
        {"filter", J::array({{{"function", "regex"},
                              {"group_select", -1},
                              {"regex_pattern", "(-?[$0-9.,]{2,})|(-?[0-9]+)"}},
                             {{"function", "take_first"}}})}}});
  J out = J::object();
  out["results"]["gsm8k"] = {{"alias", "gsm8k"},
                             {"exact_match,strict-match", mean_of(strict)},
                             {"exact_match_stderr,strict-match", stderr_of(strict)},
                             {"exact_match,flexible-extract", mean_of(flexible)},
                             {"exact_match_stderr,flexible-extract", stderr_of(flexible)}};
  out["group_subtasks"] = {{"gsm8k", J::array()}};
  out["configs"]["gsm8k"] = task;
  out["versions"] = {{"gsm8k", 3.0}};
  out["n-shot"] = {{"gsm8k", shots}};
  out["higher_is_better"] = {{"gsm8k", {{"exact_match", true}}}};
  out["n-samples"] = {{"gsm8k", {{"original", results.size()}, {"effective", results.size()}}}};
  out["config"] = {{"model", "k3eval"},
                   {"model_args", model_path.is_string()
                                      ? J("pretrained=" + model_path.get<std::string>())
                                      : J()},
                   {"batch_size", value_or_null(config, "parallel")},
                   {"batch_sizes", J::array()},
                   {"device", "cpu"},
                   {"use_cache", nullptr},
                   {"limit", value_or_null(config, "num_questions")},
                   {"bootstrap_iters", 100000},
                   {"gen_kwargs", nullptr},
                   {"random_seed", value_or_null(config, "seed")}};
  out["model_name"] = model_path;
  out["date"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return out;
}

}  // namespace k3::eval
