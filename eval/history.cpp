#include "eval/history.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <string_view>
#include <utility>

#include "common/text_file.h"
#include "common/error.h"

namespace k3::eval {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- history and series

const RunRecord& History::run(std::size_t n) const {
  if (n >= runs.size()) {
    throw InputError(fmt::format("{}: no run {}; the history holds runs 0 to {}", path.string(), n,
                                 runs.size() - 1));
  }
  return runs[n];
}

History load_history(const fs::path& path) {
  History h{path, read_history(path)};
  if (h.runs.empty()) throw InputError(path.string() + ": the history holds no runs");
  return h;
}

namespace {

// "dir/", "./dir" and "dir" are one checkpoint.
std::string normal_checkpoint(const std::string& path) {
  std::string s = fs::path(path).lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

std::string config_text(const std::string& name) { return name.empty() ? "(none)" : name; }

bool matches(const RunRecord& run, const SeriesFilter& filter) {
  if (filter.checkpoint &&
      normal_checkpoint(run.checkpoint) != normal_checkpoint(*filter.checkpoint))
    return false;
  return !filter.config_name || run.config_name == *filter.config_name;
}

// Every series of the history (or of the matching runs), in the order of their first runs.
std::vector<Series> group_series(const History& history, const SeriesFilter& filter) {
  std::vector<Series> out;
  std::map<std::tuple<std::string, std::string, std::string>, std::size_t> index;
  for (std::size_t n = 0; n < history.runs.size(); ++n) {
    const RunRecord& r = history.runs[n];
    if (!matches(r, filter)) continue;
    const auto key = std::make_tuple(normal_checkpoint(r.checkpoint), r.config_name, r.kind);
    auto [it, added] = index.try_emplace(key, out.size());
    if (added) out.push_back(Series{r.checkpoint, r.config_name, {}, r.kind});
    out[it->second].runs.push_back(n);
  }
  return out;
}

[[noreturn]] void no_match(const History& history, const SeriesFilter& filter) {
  std::string what;
  if (filter.checkpoint) what += "checkpoint " + *filter.checkpoint;
  if (filter.config_name) {
    what +=
        std::string(what.empty() ? "" : ", ") + "configuration " + config_text(*filter.config_name);
  }
  if (what.empty()) what = "any checkpoint";
  std::string held;
  const std::vector<Series> all = group_series(history, {});
  constexpr std::size_t kListed = 10;
  for (std::size_t i = 0; i < all.size() && i < kListed; ++i) {
    held += fmt::format("\n  {} ({} run{})", all[i].name(), all[i].runs.size(),
                        all[i].runs.size() == 1 ? "" : "s");
  }
  if (all.size() > kListed) held += fmt::format("\n  ... and {} more", all.size() - kListed);
  throw InputError(
      fmt::format("{}: no run of {}; the history holds:{}", history.path.string(), what, held));
}

}  // namespace

std::string Series::name() const {
  return "checkpoint " + checkpoint + ", configuration " + config_text(config_name) +
         (kind == "throughput" ? ", offline throughput runs" : "");
}

std::vector<Series> select_series(const History& history, const SeriesFilter& filter) {
  std::vector<Series> out = group_series(history, filter);
  if (out.empty()) no_match(history, filter);
  return out;
}

Series latest_series(const History& history, const SeriesFilter& filter) {
  std::vector<Series> all = select_series(history, filter);
  auto latest = std::max_element(all.begin(), all.end(), [](const Series& a, const Series& b) {
    return a.runs.back() < b.runs.back();
  });
  return std::move(*latest);
}

// ---------------------------------------------------------------- trend

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double difference(double now, double before) {
  return std::isfinite(now) && std::isfinite(before) ? now - before : kNaN;
}
double relative_change(double now, double before) {
  return std::isfinite(now) && std::isfinite(before) && before > 0 ? (now - before) / before : kNaN;
}

// `spec` applied to v, or "-" when v is NaN or infinite.
std::string number(double v, fmt::format_string<double> spec) {
  return std::isfinite(v) ? fmt::format(spec, double{v}) : std::string("-");
}

}  // namespace

std::vector<TrendRow> trend(const History& history, const Series& series, std::size_t last) {
  std::vector<TrendRow> rows;
  const RunRecord* previous = nullptr;
  for (std::size_t n : series.runs) {
    const RunRecord& r = history.run(n);
    TrendRow row;
    row.run = n;
    row.record = &r;
    if (previous == nullptr) {
      row.accuracy_change = row.invalid_change = row.throughput_change = row.latency_change = kNaN;
    } else {
      row.accuracy_change = difference(r.accuracy, previous->accuracy);
      row.invalid_change = difference(r.invalid, previous->invalid);
      row.throughput_change = relative_change(r.output_throughput, previous->output_throughput);
      row.latency_change = relative_change(r.latency_s, previous->latency_s);
    }
    rows.push_back(row);
    previous = &r;
  }
  if (last > 0 && rows.size() > last) rows.erase(rows.begin(), rows.end() - last);
  return rows;
}

std::string format_trend(const Series& series, const std::vector<TrendRow>& rows) {
  std::string out =
      rows.size() == series.runs.size()
          ? fmt::format("{}: {} run{}\n", series.name(), rows.size(), rows.size() == 1 ? "" : "s")
          : fmt::format("{}: last {} of {} runs\n", series.name(), rows.size(), series.runs.size());
  // Speculative decoding's columns only in a table with a run that recorded it.
  const bool speculative = std::any_of(rows.begin(), rows.end(), [](const TrendRow& row) {
    return row.record->speculative.has_value();
  });
  const auto accept_columns = [&](const std::string& length, const std::string& rate) {
    return speculative ? fmt::format("{:>10}  {:>11}  ", length, rate) : std::string();
  };
  out += fmt::format(
      "{:>5}  {:<20}  {:>9}  {:>8}  {:>7}  {:>7}  {:>7}  {:>10}  {:>7}  {:>9}  {:>7}  {}{}\n",
      "run", "timestamp", series.kind == "throughput" ? "requests" : "questions", "accuracy",
      "change", "invalid", "change", "out tok/s", "change",
      series.kind == "throughput" ? "duration" : "latency s", "change",
      accept_columns("accept len", "accept rate"), "verdict");
  for (const TrendRow& row : rows) {
    const RunRecord& r = *row.record;
    const std::optional<double> length =
        r.speculative ? r.speculative->counts.accept_length() : std::nullopt;
    const std::optional<double> rate =
        r.speculative ? r.speculative->counts.accept_rate() : std::nullopt;
    out += fmt::format(
        "{:>5}  {:<20}  {:>9}  {:>8}  {:>7}  {:>7}  {:>7}  {:>10}  {:>7}  {:>9}  {:>7}  {}{}\n",
        row.run, r.timestamp, r.num_questions, number(r.accuracy, "{:.3f}"),
        number(row.accuracy_change, "{:+.3f}"), number(r.invalid, "{:.3f}"),
        number(row.invalid_change, "{:+.3f}"), number(r.output_throughput, "{:.3f}"),
        number(row.throughput_change * 100, "{:+.1f}%"), number(r.latency_s, "{:.3f}"),
        number(row.latency_change * 100, "{:+.1f}%"),
        accept_columns(number(length.value_or(kNaN), "{:.2f}"),
                       number(rate.value_or(kNaN), "{:.2f}")),
        r.verdict);
  }
  return out;
}

// ---------------------------------------------------------------- compare

namespace {

std::map<std::size_t, const QuestionResult*> by_id(const History& history, std::size_t n) {
  std::map<std::size_t, const QuestionResult*> out;
  for (const QuestionResult& q : history.run(n).results) {
    if (!out.emplace(q.id, &q).second) {
      throw InputError(
          fmt::format("{}: run {} holds question id {} twice", history.path.string(), n, q.id));
    }
  }
  return out;
}

std::string shown_prediction(const QuestionResult& q) {
  return q.invalid ? std::string("invalid") : q.prediction;
}

std::string id_list(const std::vector<std::size_t>& ids) {
  constexpr std::size_t kListed = 20;
  std::string out;
  for (std::size_t i = 0; i < ids.size() && i < kListed; ++i) {
    out += fmt::format("{}{}", i ? ", " : "", ids[i]);
  }
  if (ids.size() > kListed) out += fmt::format(", ... ({} more)", ids.size() - kListed);
  return out;
}

}  // namespace

Comparison compare_runs(const History& history, std::size_t a, std::size_t b) {
  for (std::size_t n : {a, b}) {
    if (history.run(n).kind == "throughput") {
      throw InputError(fmt::format(
          "{}: run {} is an offline throughput run: compare looks at evaluations question by "
          "question (k3report trend shows throughput runs)",
          history.path.string(), n));
    }
  }
  Comparison c;
  c.run_a = a;
  c.run_b = b;
  c.accuracy_a = history.run(a).accuracy;
  c.accuracy_b = history.run(b).accuracy;
  const auto old_results = by_id(history, a);
  const auto new_results = by_id(history, b);
  for (const auto& [id, q] : old_results) {
    if (!new_results.contains(id)) c.only_a.push_back(id);
  }
  for (const auto& [id, q] : new_results) {
    const auto old_it = old_results.find(id);
    if (old_it == old_results.end()) {
      c.only_b.push_back(id);
      continue;
    }
    const QuestionResult& before = *old_it->second;
    ++c.compared;
    AnswerChange change;
    change.id = id;
    change.old_prediction = shown_prediction(before);
    change.new_prediction = shown_prediction(*q);
    change.old_correct = before.correct;
    change.new_correct = q->correct;
    change.same_tokens = before.token_ids == q->token_ids;
    change.old_tokens = before.token_ids.size();
    change.new_tokens = q->token_ids.size();
    if (change.same_tokens) {
      ++c.same_tokens;
    } else {
      change.first_token_difference =
          static_cast<std::size_t>(std::mismatch(before.token_ids.begin(), before.token_ids.end(),
                                                 q->token_ids.begin(), q->token_ids.end())
                                       .first -
                                   before.token_ids.begin());
    }
    const bool answer_changed = before.prediction != q->prediction;
    if (answer_changed) ++c.answers_changed;
    if (!before.correct && q->correct) ++c.became_correct;
    if (before.correct && !q->correct) ++c.became_incorrect;
    if (answer_changed || before.correct != q->correct || !change.same_tokens) {
      c.changes.push_back(std::move(change));
    }
  }
  return c;
}

std::string format_comparison(const History& history, const Comparison& c) {
  const RunRecord& a = history.run(c.run_a);
  const RunRecord& b = history.run(c.run_b);
  const Series sa{a.checkpoint, a.config_name, {}};
  const Series sb{b.checkpoint, b.config_name, {}};
  std::string out = fmt::format("run {} ({}) -> run {} ({}): {}\n", c.run_a, a.timestamp, c.run_b,
                                b.timestamp, sa.name());
  if (normal_checkpoint(a.checkpoint) != normal_checkpoint(b.checkpoint) ||
      a.config_name != b.config_name) {
    out +=
        fmt::format("note: the runs are of different series; run {} is {}\n", c.run_b, sb.name());
  }
  for (const AnswerChange& ch : c.changes) {
    const std::string correctness =
        ch.old_correct == ch.new_correct
            ? (ch.new_correct ? "still correct" : "still incorrect")
            : (ch.new_correct ? "incorrect -> correct" : "correct -> incorrect");
    const std::string tokens =
        ch.same_tokens ? "tokens identical"
                       : fmt::format("tokens differ from position {} ({} -> {} tokens)",
                                     ch.first_token_difference, ch.old_tokens, ch.new_tokens);
    out += fmt::format("  id {}: {} -> {}, {}, {}\n", ch.id, ch.old_prediction, ch.new_prediction,
                       correctness, tokens);
  }
  if (c.changes.empty() && c.compared > 0) out += "  no answer and no token changed\n";
  out += fmt::format("accuracy: {} -> {} ({})\n", number(c.accuracy_a, "{:.3f}"),
                     number(c.accuracy_b, "{:.3f}"),
                     number(difference(c.accuracy_b, c.accuracy_a), "{:+.3f}"));
  out += fmt::format(
      "totals: {} question{} compared, {} answer{} changed ({} correct -> incorrect, {} incorrect "
      "-> correct), tokens identical for {} of {}\n",
      c.compared, c.compared == 1 ? "" : "s", c.answers_changed, c.answers_changed == 1 ? "" : "s",
      c.became_incorrect, c.became_correct, c.same_tokens, c.compared);
  if (!c.only_a.empty()) {
    out += fmt::format("only in run {}: {} question{} (ids {})\n", c.run_a, c.only_a.size(),
                       c.only_a.size() == 1 ? "" : "s", id_list(c.only_a));
  }
  if (!c.only_b.empty()) {
    out += fmt::format("only in run {}: {} question{} (ids {})\n", c.run_b, c.only_b.size(),
                       c.only_b.size() == 1 ? "" : "s", id_list(c.only_b));
  }
  return out;
}

// ---------------------------------------------------------------- check

CheckResult check_latest(const History& history, const SeriesFilter& filter,
                         const Tolerance& tolerance) {
  const Series series = latest_series(history, filter);
  CheckResult result;
  result.run = series.runs.back();
  const RunRecord& r = history.run(result.run);
  const std::string head = fmt::format("check: run {} ({})", result.run, series.name());
  const auto regression = [&](const std::string& why) {
    result.regressed = true;
    result.line = head + " REGRESSION: " + why;
    return result;
  };
  const auto ok = [&](const std::string& why) {
    result.line = head + " ok: " + why;
    return result;
  };
  if (r.kind == "throughput") {
    const double now = r.output_throughput;
    if (r.verdict != "ok") {
      return regression(fmt::format("verdict \"{}\" (output throughput {} token/s, baseline {}, "
                                    "threshold {})",
                                    r.verdict, number(now, "{:.3f}"),
                                    number(r.baseline_output_throughput, "{:.3f}"),
                                    number(r.throughput_threshold, "{:.3f}")));
    }
    if (std::isfinite(r.baseline_output_throughput)) {
      return ok(fmt::format("verdict ok against the throughput baseline ({} token/s, threshold {})",
                            number(now, "{:.3f}"), number(r.throughput_threshold, "{:.3f}")));
    }
    if (series.runs.size() < 2) {
      return ok(fmt::format("output throughput {} token/s, no baseline and no previous run to "
                            "compare with",
                            number(now, "{:.3f}")));
    }
    const std::size_t prev_n = series.runs[series.runs.size() - 2];
    const double prev = history.run(prev_n).output_throughput;
    const bool relative = tolerance.mode == Tolerance::Mode::kRelative;
    const double bound = relative ? prev * tolerance.value : prev - tolerance.value;
    const std::string rule =
        fmt::format("previous run {}: {:.3f} {} {} ({} tolerance)", prev_n, prev,
                    relative ? "x" : "-", tolerance.value, relative ? "relative" : "absolute");
    if (!(now >= bound)) {
      return regression(
          fmt::format("output throughput {} token/s is below {:.3f} ({})", number(now, "{:.3f}"), bound, rule));
    }
    return ok(fmt::format("output throughput {:.3f} token/s >= {:.3f} ({})", now, bound, rule));
  }
  const bool has_baseline = std::isfinite(r.baseline_accuracy);
  if (r.verdict != "ok") {
    std::string details = "accuracy " + number(r.accuracy, "{:.4f}");
    if (has_baseline) {
      details += ", baseline " + number(r.baseline_accuracy, "{:.4f}") + ", threshold " +
                 number(r.threshold, "{:.4f}");
    }
    if (r.log_errors > 0) details += fmt::format(", {} error(s) in the rank logs", r.log_errors);
    return regression(fmt::format("verdict \"{}\" ({})", r.verdict, details));
  }
  if (has_baseline) {
    return ok(fmt::format("verdict ok against the baseline (accuracy {}, threshold {})",
                          number(r.accuracy, "{:.4f}"), number(r.threshold, "{:.4f}")));
  }
  if (!std::isfinite(r.accuracy)) {
    return regression(fmt::format(
        "accuracy is not a number ({} questions) and there is no baseline", r.num_questions));
  }
  if (series.runs.size() < 2) {
    return ok(fmt::format("accuracy {}, no baseline and no previous run to compare with",
                          number(r.accuracy, "{:.4f}")));
  }
  const std::size_t prev_n = series.runs[series.runs.size() - 2];
  const double prev = history.run(prev_n).accuracy;
  if (!std::isfinite(prev)) {
    return ok(fmt::format("accuracy {}; previous run {} has no accuracy to compare with",
                          number(r.accuracy, "{:.4f}"), prev_n));
  }
  const bool relative = tolerance.mode == Tolerance::Mode::kRelative;
  const double bound = relative ? prev * tolerance.value : prev - tolerance.value;
  const std::string rule = relative
                               ? fmt::format("previous run {}: {:.4f} x {} (relative tolerance)",
                                             prev_n, prev, tolerance.value)
                               : fmt::format("previous run {}: {:.4f} - {} (absolute tolerance)",
                                             prev_n, prev, tolerance.value);
  if (r.accuracy < bound) {
    return regression(fmt::format("accuracy {:.4f} is below {:.4f} ({})", r.accuracy, bound, rule));
  }
  return ok(fmt::format("accuracy {:.4f} >= {:.4f} ({})", r.accuracy, bound, rule));
}

}  // namespace k3::eval
