#include "eval/chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include "common/text_file.h"
#include "common/utf8.h"

namespace k3::eval {

namespace fs = std::filesystem;

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const utf8::Step step = utf8::step(text.substr(i));
    const char32_t cp = step.code_point;
    // XML 1.0 allows neither C0 controls other than tab, newline and return nor U+FFFE/U+FFFF.
    const bool allowed = step.kind == utf8::StepKind::kValid &&
                         (cp >= 0x20 || cp == '\t' || cp == '\n' || cp == '\r') && cp != 0xFFFE &&
                         cp != 0xFFFF;
    if (!allowed) {
      utf8::append(out, utf8::kReplacementCharacter);
    } else if (cp == '&') {
      out += "&amp;";
    } else if (cp == '<') {
      out += "&lt;";
    } else if (cp == '>') {
      out += "&gt;";
    } else if (cp == '"') {
      out += "&quot;";
    } else if (cp == '\'') {
      out += "&apos;";
    } else {
      out.append(text.substr(i, step.length));
    }
    i += step.length;
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
