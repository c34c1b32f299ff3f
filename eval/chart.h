// eval chart: one series of the run history as an SVG document (k3report plot).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "eval/history.h"

namespace k3::eval {

// An SVG document: accuracy (top panel, 0 to 1) and output throughput (bottom panel, token/s)
// over the runs of `series`, with axes, ticks, labels, points (runs whose verdict is not "ok"
// ringed in red), lines, a title and a legend. Text is XML-escaped and made valid UTF-8.
std::string plot_svg(const History& history, const Series& series);

// plot_svg() written atomically to `out`; InputError naming `out` when it cannot be written.
void write_plot(const std::filesystem::path& out, const History& history, const Series& series);

// `text` escaped for XML character data and attribute values: & < > " ' as entities; each
// invalid UTF-8 maximal subpart (as CPython's errors="replace") and each character XML 1.0
// forbids as U+FFFD.
std::string xml_escape(std::string_view text);

}  // namespace k3::eval
