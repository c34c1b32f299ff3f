#include "eval/log_scan.h"

#include <optional>

#include "common/text_file.h"

namespace k3::eval {

namespace {

constexpr std::size_t kMaxLineBytes = 300;

// ESC [ ... final byte (CSI sequences: what colour sinks write).
std::string strip_colour(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\x1b' && i + 1 < text.size() && text[i + 1] == '[') {
      i += 2;
      while (i < text.size() && !(text[i] >= '@' && text[i] <= '~')) ++i;
      continue;
    }
    out.push_back(text[i]);
  }
  return out;
}

bool looks_like_time(std::string_view field) {
  // "HH:MM:SS" somewhere in it.
  auto digit = [&](std::size_t k) { return field[k] >= '0' && field[k] <= '9'; };
  for (std::size_t i = 0; i + 8 <= field.size(); ++i) {
    if (digit(i) && digit(i + 1) && field[i + 2] == ':' && digit(i + 3) && digit(i + 4) &&
        field[i + 5] == ':' && digit(i + 6) && digit(i + 7)) {
      return true;
    }
  }
  return false;
}

// The level of an spdlog line ("" for another level), or nullopt if it is not an spdlog line.
std::optional<std::string_view> spdlog_level(std::string_view line) {
  std::size_t at = 0;
  bool first = true;
  std::string_view level;
  while (at < line.size() && line[at] == '[') {
    const std::size_t close = line.find(']', at);
    if (close == std::string_view::npos) break;
    const std::string_view field = line.substr(at + 1, close - at - 1);
    if (first && !looks_like_time(field)) return std::nullopt;
    first = false;
    if (field == "error" || field == "critical") level = field;
    at = close + 1;
    while (at < line.size() && line[at] == ' ') ++at;
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
