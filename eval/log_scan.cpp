#include "eval/log_scan.h"

#include <optional>

#include "common/regex.h"
#include "common/text_file.h"

namespace k3::eval {

namespace {

constexpr std::size_t kMaxLineBytes = 300;

// ESC [ parameters final-byte (CSI sequences: what colour sinks write); one cut short at the
// end of the line is dropped too.
const Regex& colour_code() {
  static const Regex re(R"(\x1b\[[^@-~]*[@-~]?)");
  return re;
}

// One leading bracketed field of a log line and the spaces after it.
const Regex& leading_field() {
  static const Regex re(R"(\[([^\]]*)\] *)");
  return re;
}

const Regex& time_of_day() {
  static const Regex re(R"([0-9]{2}:[0-9]{2}:[0-9]{2})");
  return re;
}

std::string strip_colour(std::string_view text) {
  if (text.find('\x1b') == std::string_view::npos) return std::string(text);
  std::string out;
  out.reserve(text.size());
  std::size_t at = 0;
  while (const auto code = colour_code().find(text, at)) {
    out.append(text.substr(at, code->begin - at));
    at = code->end;
  }
  out.append(text.substr(at));
  return out;
}

// The level of an spdlog line ("" for another level), or nullopt if it is not an spdlog line:
// one whose leading bracketed fields start with a time.
std::optional<std::string_view> spdlog_level(std::string_view line) {
  if (!line.starts_with('[')) return std::nullopt;
  Regex::Matcher field(leading_field());
  std::size_t at = 0;
  bool first = true;
  std::string_view level;
  while (const auto whole = field.find(line, at, /*anchored=*/true)) {
    const Regex::Span inner = field.group(1);
    const std::string_view text = line.substr(inner.begin, inner.end - inner.begin);
    if (first && !time_of_day().find(text)) return std::nullopt;
    first = false;
    if (text == "error" || text == "critical") level = text;
    at = whole->end;
  }
  if (first) return std::nullopt;
  return level;
}

std::optional<LogFinding::Kind> classify(std::string_view line) {
  if (const auto level = spdlog_level(line)) {
    if (*level == "critical") return LogFinding::Kind::kCritical;
    if (*level == "error") return LogFinding::Kind::kError;
    return std::nullopt;
  }
  if (line.starts_with("srun: error:")) return LogFinding::Kind::kError;
  if (line.find("MPI_ABORT") != std::string_view::npos ||
      line.find("Abort") != std::string_view::npos) {
    return LogFinding::Kind::kAbort;
  }
  return std::nullopt;
}

}  // namespace

std::string_view kind_name(LogFinding::Kind kind) {
  switch (kind) {
    case LogFinding::Kind::kError:
      return "error";
    case LogFinding::Kind::kCritical:
      return "critical";
    case LogFinding::Kind::kAbort:
      return "abort";
  }
  return "?";
}

LogScan scan_log(const std::filesystem::path& path, std::size_t max_examples) {
  LogScan scan;
  scan.path = path;
  const std::string text = read_text_file(path, "log");
  for (const TextLine& raw : split_lines(text)) {
    ++scan.lines;
    std::string line = strip_colour(raw.text);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto kind = classify(line);
    if (!kind) continue;
    switch (*kind) {
      case LogFinding::Kind::kError:
        ++scan.errors;
        break;
      case LogFinding::Kind::kCritical:
        ++scan.criticals;
        break;
      case LogFinding::Kind::kAbort:
        ++scan.aborts;
        break;
    }
    if (scan.first.size() < max_examples) {
      if (line.size() > kMaxLineBytes) line = line.substr(0, kMaxLineBytes) + "...";
      scan.first.push_back(LogFinding{*kind, raw.number, std::move(line)});
    }
  }
  return scan;
}

std::vector<LogScan> scan_logs(std::span<const std::filesystem::path> paths,
                               std::size_t max_examples) {
  std::vector<LogScan> out;
  out.reserve(paths.size());
  for (const auto& p : paths) out.push_back(scan_log(p, max_examples));
  return out;
}

std::size_t count_log_errors(std::span<const LogScan> scans) {
  std::size_t n = 0;
  for (const LogScan& s : scans) n += s.total();
  return n;
}

}  // namespace k3::eval
