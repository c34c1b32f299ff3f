#include "eval/history.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <string_view>
#include <utility>

#include "eval/text_file.h"
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
  out += fmt::format(
      "{:>5}  {:<20}  {:>9}  {:>8}  {:>7}  {:>7}  {:>7}  {:>10}  {:>7}  {:>9}  {:>7}  {}\n", "run",
      "timestamp", series.kind == "throughput" ? "requests" : "questions", "accuracy", "change",
      "invalid", "change", "out tok/s", "change",
      series.kind == "throughput" ? "duration" : "latency s", "change", "verdict");
  for (const TrendRow& row : rows) {
    const RunRecord& r = *row.record;
    out += fmt::format(
        "{:>5}  {:<20}  {:>9}  {:>8}  {:>7}  {:>7}  {:>7}  {:>10}  {:>7}  {:>9}  {:>7}  {}\n",
        row.run, r.timestamp, r.num_questions, number(r.accuracy, "{:.3f}"),
        number(row.accuracy_change, "{:+.3f}"), number(r.invalid, "{:.3f}"),
        number(row.invalid_change, "{:+.3f}"), number(r.output_throughput, "{:.3f}"),
        number(row.throughput_change * 100, "{:+.1f}%"), number(r.latency_s, "{:.3f}"),
        number(row.latency_change * 100, "{:+.1f}%"), r.verdict);
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

// ---------------------------------------------------------------- plot

std::string xml_escape(std::string_view text) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&quot;";
          break;
        case '\'':
          out += "&apos;";
          break;
        default:
          if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
            out += kReplacement;
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    std::size_t len = 0;
    std::uint32_t cp = 0, lowest = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, lowest = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, lowest = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, lowest = 0x10000;
    }
    bool valid = len > 0 && i + len <= text.size();
    for (std::size_t k = 1; valid && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      valid = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3F);
    }
    valid = valid && cp >= lowest && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF) &&
            cp != 0xFFFE && cp != 0xFFFF;
    if (valid) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      out += kReplacement;
      ++i;
    }
  }
  return out;
}

namespace {

constexpr double kWidth = 880, kHeight = 600;
constexpr double kLeft = 80, kRight = 40;  // the plot area's margins
constexpr double kPlotWidth = kWidth - kLeft - kRight;
constexpr double kPanelHeight = 190;
constexpr const char* kAccuracyColour = "#1f77b4";
constexpr const char* kThroughputColour = "#ff7f0e";
constexpr const char* kAlarmColour = "#d62728";
constexpr const char* kInkColour = "#333333";

struct Panel {
  std::string id;      // of the panel's group
  std::string metric;  // in point tooltips
  double top = 0;
  double low = 0, high = 1;  // the y range
  double step = 0.2;         // between ticks
  int decimals = 1;          // of tick labels
  std::string label;         // y axis title
  std::string unit;          // in point tooltips
  const char* colour = kAccuracyColour;
  bool dates = false;  // date line under the run numbers
};

// 1, 2 or 5 times a power of ten, at least x.
double nice_step(double x) {
  const double p = std::pow(10.0, std::floor(std::log10(x)));
  const double f = x / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

std::string px(double v) { return fmt::format("{:.1f}", v); }

double x_of(std::size_t i, std::size_t n) {
  return kLeft + kPlotWidth * (static_cast<double>(i) + 0.5) / static_cast<double>(n);
}

void draw_panel(std::string& svg, const Panel& p, const std::vector<const RunRecord*>& runs,
                const std::vector<std::size_t>& numbers, const std::vector<double>& values) {
  const double bottom = p.top + kPanelHeight;
  const auto y_of = [&](double v) {
    const double t = std::clamp((v - p.low) / (p.high - p.low), 0.0, 1.0);
    return bottom - t * kPanelHeight;
  };
  svg += fmt::format("<g id=\"{}\">\n", p.id);
  // Grid and y ticks.
  const int ticks = static_cast<int>(std::lround((p.high - p.low) / p.step));
  for (int k = 0; k <= ticks; ++k) {
    const double v = p.low + k * p.step;
    const std::string y = px(y_of(v));
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{2}\" x2=\"{1}\" y2=\"{2}\" stroke=\"#e5e5e5\"/>\n"
        "<line x1=\"{3}\" y1=\"{2}\" x2=\"{0}\" y2=\"{2}\" stroke=\"{5}\"/>\n"
        "<text x=\"{4}\" y=\"{2}\" dy=\"4\" text-anchor=\"end\">{6:.{7}f}</text>\n",
        px(kLeft), px(kLeft + kPlotWidth), y, px(kLeft - 5), px(kLeft - 8), kInkColour, v,
        p.decimals);
  }
  // Axes.
  svg += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"{4}\"/>\n"
      "<line x1=\"{0}\" y1=\"{2}\" x2=\"{3}\" y2=\"{2}\" stroke=\"{4}\"/>\n",
      px(kLeft), px(p.top), px(bottom), px(kLeft + kPlotWidth), kInkColour);
  svg += fmt::format(
      "<text transform=\"translate({},{}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
      px(kLeft - 52), px(p.top + kPanelHeight / 2), xml_escape(p.label));
  // X ticks: every run when they fit, else every k-th counted back from the latest.
  const std::size_t n = runs.size();
  const std::size_t every = (n + 11) / 12;
  for (std::size_t i = 0; i < n; ++i) {
    if ((n - 1 - i) % every != 0) continue;
    const std::string x = px(x_of(i, n));
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"{3}\"/>\n"
        "<text x=\"{0}\" y=\"{4}\" text-anchor=\"middle\">{5}</text>\n",
        x, px(bottom), px(bottom + 5), kInkColour, px(bottom + 18), numbers[i]);
    if (p.dates) {
      svg +=
          fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#666666\">{}</text>\n",
                      x, px(bottom + 32), xml_escape(runs[i]->timestamp.substr(0, 10)));
    }
  }
  // Lines through consecutive finite values, then the points on top.
  std::string points;
  const auto flush = [&] {
    if (points.find(' ') != std::string::npos) {
      svg +=
          fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n",
                      p.colour, points);
    }
    points.clear();
  };
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(values[i])) {
      flush();
      continue;
    }
    points +=
        fmt::format("{}{},{}", points.empty() ? "" : " ", px(x_of(i, n)), px(y_of(values[i])));
  }
  flush();
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(values[i])) continue;
    const std::string tip =
        xml_escape(fmt::format("run {} ({}): {} {:.3f}{}, verdict {}", numbers[i],
                               runs[i]->timestamp, p.metric, values[i], p.unit, runs[i]->verdict));
    const std::string x = px(x_of(i, n)), y = px(y_of(values[i]));
    svg += fmt::format(
        "<circle cx=\"{}\" cy=\"{}\" r=\"3.5\" fill=\"{}\"><title>{}</title></circle>\n", x, y,
        p.colour, tip);
    if (runs[i]->verdict != "ok") {
      svg += fmt::format(
          "<circle class=\"alarm\" cx=\"{}\" cy=\"{}\" r=\"7\" fill=\"none\" stroke=\"{}\" "
          "stroke-width=\"2\"><title>{}</title></circle>\n",
          x, y, kAlarmColour, tip);
    }
  }
  svg += "</g>\n";
}

}  // namespace

std::string plot_svg(const History& history, const Series& series) {
  std::vector<const RunRecord*> runs;
  std::vector<double> accuracy, throughput;
  double top = 0;
  for (std::size_t n : series.runs) {
    const RunRecord& r = history.run(n);
    runs.push_back(&r);
    accuracy.push_back(r.accuracy);
    throughput.push_back(r.output_throughput);
    if (std::isfinite(r.output_throughput)) top = std::max(top, r.output_throughput);
  }
  Panel acc{"accuracy", "accuracy", 95, 0, 1, 0.2, 1, "accuracy", "", kAccuracyColour, false};
  Panel tput{"throughput", "output throughput", 345, 0, 1, 0.2, 1, "output throughput (token/s)",
             " token/s",   kThroughputColour,   true};
  if (top > 0) {
    tput.step = nice_step(top / 5);
    tput.high = std::ceil(top / tput.step - 1e-9) * tput.step;
    tput.decimals = tput.step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(tput.step) - 1e-9));
  }

  const std::string title = series.kind == "throughput" ? "Offline output throughput"
                                                        : "GSM8K accuracy and output throughput";
  const std::string first = runs.front()->timestamp.substr(0, 10);
  const std::string last = runs.back()->timestamp.substr(0, 10);
  const std::string subtitle =
      fmt::format("{}; {} run{}{}", series.name(), runs.size(), runs.size() == 1 ? "" : "s",
                  first == last ? ", " + first : ", " + first + " to " + last);

  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"sans-serif\" font-size=\"12\" fill=\"{2}\">\n",
      kWidth, kHeight, kInkColour);
  svg += fmt::format("<title>{}: {}</title>\n", title, xml_escape(subtitle));
  svg += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n", kWidth, kHeight);
  svg += fmt::format(
      "<text x=\"{}\" y=\"26\" font-size=\"17\" font-weight=\"bold\">{}</text>\n"
      "<text x=\"{}\" y=\"46\" fill=\"#666666\">{}</text>\n",
      px(kLeft), title, px(kLeft), xml_escape(subtitle));
  // Legend: a line with a point for each metric, a red ring for runs that did not pass.
  svg += "<g id=\"legend\">\n";
  double lx = kLeft;
  const std::pair<const char*, const char*> entries[] = {
      {kAccuracyColour, "accuracy"}, {kThroughputColour, "output throughput (token/s)"}};
  for (const auto& [colour, label] : entries) {
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"68\" x2=\"{1}\" y2=\"68\" stroke=\"{2}\" stroke-width=\"2\"/>\n"
        "<circle cx=\"{3}\" cy=\"68\" r=\"3.5\" fill=\"{2}\"/>\n"
        "<text x=\"{4}\" y=\"72\">{5}</text>\n",
        px(lx), px(lx + 24), colour, px(lx + 12), px(lx + 30), label);
    lx += 30 + 7.0 * std::string_view(label).size() + 24;
  }
  svg += fmt::format(
      "<circle cx=\"{0}\" cy=\"68\" r=\"7\" fill=\"none\" stroke=\"{1}\" stroke-width=\"2\"/>\n"
      "<text x=\"{2}\" y=\"72\">verdict regression or error</text>\n",
      px(lx + 12), kAlarmColour, px(lx + 26));
  svg += "</g>\n";

  draw_panel(svg, acc, runs, series.runs, accuracy);
  draw_panel(svg, tput, runs, series.runs, throughput);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">run (in time order)</text>\n",
                     px(kLeft + kPlotWidth / 2), px(kHeight - 10));
  svg += "</svg>\n";
  return svg;
}

void write_plot(const fs::path& out, const History& history, const Series& series) {
  write_file_atomically(out, plot_svg(history, series));
}

}  // namespace k3::eval
