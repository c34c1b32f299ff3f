#include "eval/baseline.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/json.h"
#include "common/text_file.h"

namespace k3::eval {

using nlohmann::json;

namespace {

constexpr const char* kBaselineShape =
    "expected {\"accuracy\": x, \"tolerance\": {\"mode\": \"relative\"|\"absolute\", \"value\": "
    "v}, "
    "\"golden\": [{\"id\": i, \"token_ids\": [...]}] (optional)}";

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw InputError(file_ + ": \"" + key + "\" " + what);
  }

  const json& get(const json& object, const std::string& prefix, const char* key) const {
    const auto it = object.find(key);
    if (it == object.end()) throw InputError(file_ + ": missing \"" + prefix + key + "\"");
    return *it;
  }

  void only_keys(const json& object, const std::string& prefix,
                 std::initializer_list<const char*> keys) const {
    for (const auto& item : object.items()) {
      const std::string& key = item.key();  // a named variable: lambdas capture it (C++17 rules)
      if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return key == k; })) {
        std::string list;
        for (const char* k : keys) list += (list.empty() ? "" : ", ") + std::string(k);
        throw InputError(file_ + ": unknown key \"" + prefix + key + "\" (expected " + list + ")");
      }
    }
  }

  double number_in(const json& value, const std::string& key, double lo, bool lo_open,
                   double hi) const {
    if (!value.is_number()) fail(key, "is " + value.dump() + ", expected a number");
    const double v = value.get<double>();
    if (!(lo_open ? v > lo : v >= lo) || !(v <= hi)) {
      char range[64];
      std::snprintf(range, sizeof range, "%s%g, %g]", lo_open ? "(" : "[", lo, hi);
      fail(key, "is " + value.dump() + ", expected a number in " + range);
    }
    return v;
  }

 private:
  std::string file_;
};

std::string join_ids(const std::vector<std::size_t>& ids) {
  std::string out;
  for (std::size_t id : ids) out += (out.empty() ? "" : ", ") + std::to_string(id);
  return out;
}

}  // namespace

double Baseline::threshold() const {
  return tolerance.mode == Tolerance::Mode::kRelative ? accuracy * tolerance.value
                                                      : accuracy - tolerance.value;
}

namespace {

// "tolerance": relative in (0, 1], absolute in [0, absolute_max].
Tolerance tolerance_from_json(const Reader& r, const json& root, double absolute_max) {
  Tolerance t;
  const json& tol = r.get(root, "", "tolerance");
  if (!tol.is_object()) {
    r.fail("tolerance", "is " + tol.dump() + ", expected {\"mode\": ..., \"value\": ...}");
  }
  r.only_keys(tol, "tolerance.", {"mode", "value"});
  const json& mode = r.get(tol, "tolerance.", "mode");
  if (mode == "relative") {
    t.mode = Tolerance::Mode::kRelative;
    t.value = r.number_in(r.get(tol, "tolerance.", "value"), "tolerance.value", 0, true, 1);
  } else if (mode == "absolute") {
    t.mode = Tolerance::Mode::kAbsolute;
    t.value =
        r.number_in(r.get(tol, "tolerance.", "value"), "tolerance.value", 0, false, absolute_max);
  } else {
    r.fail("tolerance.mode", "is " + mode.dump() + ", expected \"relative\" or \"absolute\"");
  }
  return t;
}

std::string optional_string(const Reader& r, const json& root, const char* key) {
  const auto it = root.find(key);
  if (it == root.end()) return "";
  if (!it->is_string()) r.fail(key, "is " + it->dump() + ", expected a string");
  return it->get<std::string>();
}

Baseline baseline_from_json(const json& root, const std::string& file) {
  const Reader r(file);
  if (!root.is_object()) {
    throw InputError(file + ": found " + a_json_type(root) + "; " + kBaselineShape);
  }
  r.only_keys(root, "",
              {"accuracy", "tolerance", "golden", "num_questions", "benchmark", "description"});

  Baseline b;
  b.source = file;
  const json& accuracy = r.get(root, "", "accuracy");
  if (accuracy.is_null()) {
    r.fail("accuracy",
           "is null, expected a number in [0, 1] (a placeholder: set it from the "
           "first accepted run)");
  }
  b.accuracy = r.number_in(accuracy, "accuracy", 0, false, 1);

  b.tolerance = tolerance_from_json(r, root, 1);

  b.description = optional_string(r, root, "description");
  if (const auto it = root.find("benchmark"); it != root.end() && *it != "gsm8k") {
    r.fail("benchmark",
           "is " + it->dump() + ", expected \"gsm8k\"" +
               (*it == "throughput" ? " (a throughput baseline: use it with --mode throughput)"
                                    : ""));
  }
  if (const auto it = root.find("num_questions"); it != root.end()) {
    if (!it->is_number_unsigned() || it->get<std::uint64_t>() == 0) {
      r.fail("num_questions", "is " + it->dump() + ", expected a question count (>= 1)");
    }
    b.num_questions = it->get<std::size_t>();
  }

  if (const auto it = root.find("golden"); it != root.end()) {
    if (!it->is_array()) {
      r.fail("golden", "is " + a_json_type(*it) + ", expected an array of {\"id\", \"token_ids\"}");
    }
    std::map<std::size_t, std::size_t> seen;  // id -> index in "golden"
    for (std::size_t g = 0; g < it->size(); ++g) {
      const json& entry = (*it)[g];
      const std::string key = "golden[" + std::to_string(g) + "]";
      if (!entry.is_object()) {
        r.fail(key, "is " + entry.dump() + ", expected {\"id\": i, \"token_ids\": [...]}");
      }
      r.only_keys(entry, key + ".", {"id", "token_ids"});
      GoldenCompletion c;
      const json& id = r.get(entry, key + ".", "id");
      if (!id.is_number_unsigned()) {
        r.fail(key + ".id", "is " + id.dump() + ", expected a question id (an unsigned integer)");
      }
      c.id = id.get<std::size_t>();
      if (const auto [prev, inserted] = seen.emplace(c.id, g); !inserted) {
        r.fail(key + ".id", "repeats id " + std::to_string(c.id) + " of golden[" +
                                std::to_string(prev->second) + "]");
      }
      const json& ids = r.get(entry, key + ".", "token_ids");
      if (!ids.is_array()) r.fail(key + ".token_ids", "is " + ids.dump() + ", expected an array");
      for (std::size_t t = 0; t < ids.size(); ++t) {
        const json& v = ids[t];
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
            v.get<std::int64_t>() > std::numeric_limits<std::int32_t>::max()) {
          r.fail(key + ".token_ids[" + std::to_string(t) + "]",
                 "is " + v.dump() + ", expected a token id (0 .. 2^31-1)");
        }
        c.token_ids.push_back(v.get<std::int32_t>());
      }
      b.golden.push_back(std::move(c));
    }
  }
  return b;
}

}  // namespace

Baseline read_baseline(const std::filesystem::path& path) {
  const std::string file = path.string();
  return read_json(read_text_file(path, "baseline"), {file, kBaselineShape},
                   [&](const json& root) { return baseline_from_json(root, file); });
}

void check_baseline_fits(const Baseline& baseline, std::span<const std::size_t> evaluated_ids) {
  if (baseline.num_questions && *baseline.num_questions != evaluated_ids.size()) {
    throw UsageError(baseline.source + " was measured on " +
                     std::to_string(*baseline.num_questions) + " questions, this run evaluates " +
                     std::to_string(evaluated_ids.size()) +
                     " (accuracies over different question sets are not comparable)");
  }
  const std::set<std::size_t> evaluated(evaluated_ids.begin(), evaluated_ids.end());
  std::vector<std::size_t> missing;
  for (const GoldenCompletion& g : baseline.golden) {
    if (!evaluated.contains(g.id)) missing.push_back(g.id);
  }
  if (!missing.empty()) {
    throw UsageError(baseline.source + ": golden completions for question ids " +
                     join_ids(missing) + " that this run does not evaluate");
  }
}

Verdict judge(const Baseline& baseline, const Metrics& metrics,
              std::span<const QuestionResult> results) {
  Verdict v;
  v.accuracy = metrics.accuracy();
  v.baseline_accuracy = baseline.accuracy;
  v.threshold = baseline.threshold();
  // NaN (no questions) fails this test, as it should.
  if (!(v.accuracy >= v.threshold)) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "accuracy %.4f is below the threshold %.4f (baseline %.4f, %s tolerance %g)",
                  v.accuracy, v.threshold, baseline.accuracy,
                  baseline.tolerance.mode == Tolerance::Mode::kRelative ? "relative" : "absolute",
                  baseline.tolerance.value);
    v.reasons.push_back(buf);
  }

  std::map<std::size_t, const QuestionResult*> by_id;
  for (const QuestionResult& r : results) by_id[r.id] = &r;
  std::vector<std::size_t> missing;
  for (const GoldenCompletion& g : baseline.golden) {
    const auto it = by_id.find(g.id);
    if (it == by_id.end()) {
      missing.push_back(g.id);
      continue;
    }
    const std::vector<std::int32_t>& actual = it->second->token_ids;
    const auto diff =
        std::mismatch(g.token_ids.begin(), g.token_ids.end(), actual.begin(), actual.end());
    if (diff.first != g.token_ids.end() || diff.second != actual.end()) {
      v.golden_mismatches.push_back(
          GoldenMismatch{g.id, static_cast<std::size_t>(diff.first - g.token_ids.begin()),
                         g.token_ids.size(), actual.size()});
    }
  }
  if (!missing.empty()) {
    throw InputError(baseline.source + ": golden completions for question ids " +
                     join_ids(missing) + " that this run did not evaluate");
  }
  if (!v.golden_mismatches.empty()) {
    std::string text = std::to_string(v.golden_mismatches.size()) + " of " +
                       std::to_string(baseline.golden.size()) + " golden completions differ: ";
    for (std::size_t i = 0; i < v.golden_mismatches.size(); ++i) {
      const GoldenMismatch& m = v.golden_mismatches[i];
      text += (i ? "; " : "") + std::string("id ") + std::to_string(m.id) + " from token " +
              std::to_string(m.position) + " (" + std::to_string(m.actual_tokens) + " tokens, " +
              std::to_string(m.expected_tokens) + " expected)";
    }
    v.reasons.push_back(text);
  }
  v.pass = v.reasons.empty();
  return v;
}

// ---------------------------------------------------------------- throughput

namespace {

constexpr const char* kThroughputExpected =
    "expected {\"benchmark\": \"throughput\", \"output_throughput\": token/s, \"tolerance\": "
    "{\"mode\": \"relative\"|\"absolute\", \"value\": v}, \"machine\": \"...\"}";

ThroughputBaseline throughput_baseline_from_json(const json& root, const std::string& file) {
  const Reader r(file);
  if (!root.is_object()) {
    throw InputError(file + ": found " + a_json_type(root) + "; " + kThroughputExpected);
  }
  if (root.contains("accuracy")) {
    throw InputError(file + ": an accuracy baseline (\"accuracy\"); --mode throughput needs " +
                     kThroughputExpected);
  }
  r.only_keys(root, "",
              {"benchmark", "output_throughput", "tolerance", "machine", "layout", "description"});
  if (const json& benchmark = r.get(root, "", "benchmark"); benchmark != "throughput")
    r.fail("benchmark", "is " + benchmark.dump() + ", expected \"throughput\"");
  ThroughputBaseline b;
  b.source = file;
  b.output_throughput =
      r.number_in(r.get(root, "", "output_throughput"), "output_throughput", 0, true,
                  std::numeric_limits<double>::max());
  b.tolerance = tolerance_from_json(r, root, b.output_throughput);
  const json& machine = r.get(root, "", "machine");
  if (!machine.is_string() || machine.get<std::string>().empty())
    r.fail("machine", "is " + machine.dump() + ", expected the machine class it was measured on");
  b.machine = machine.get<std::string>();
  b.layout = optional_string(r, root, "layout");
  b.description = optional_string(r, root, "description");
  return b;
}

}  // namespace

double ThroughputBaseline::threshold() const {
  return tolerance.mode == Tolerance::Mode::kRelative ? output_throughput * tolerance.value
                                                      : output_throughput - tolerance.value;
}

ThroughputBaseline read_throughput_baseline(const std::filesystem::path& path) {
  const std::string file = path.string();
  return read_json(read_text_file(path, "baseline"), {file, kThroughputExpected},
                   [&](const json& root) { return throughput_baseline_from_json(root, file); });
}

void check_throughput_baseline_fits(const ThroughputBaseline& baseline, const std::string& machine,
                                    const std::string& layout) {
  if (baseline.machine != machine) {
    throw UsageError(baseline.source + " was measured on \"" + baseline.machine +
                     "\", this machine is \"" + machine +
                     "\" (throughput verdicts compare one machine class: measure a baseline here)");
  }
  if (!baseline.layout.empty() && baseline.layout != layout) {
    throw UsageError(baseline.source + " was measured with layout \"" + baseline.layout +
                     "\", this run has \"" + layout + "\"");
  }
}

ThroughputVerdict judge_throughput(const ThroughputBaseline& baseline, double output_throughput) {
  ThroughputVerdict v;
  v.measured = output_throughput;
  v.baseline = baseline.output_throughput;
  v.threshold = baseline.threshold();
  v.pass = v.measured >= v.threshold;  // NaN fails
  if (!v.pass) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "output throughput %.3f token/s is %.1f %% below the baseline %.3f token/s, "
                  "under the threshold %.3f (%s tolerance %g)",
                  v.measured, 100.0 * (1.0 - v.measured / v.baseline), v.baseline, v.threshold,
                  baseline.tolerance.mode == Tolerance::Mode::kRelative ? "relative" : "absolute",
                  baseline.tolerance.value);
    v.reason = buf;
  }
  return v;
}

}  // namespace k3::eval
