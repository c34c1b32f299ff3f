#include "dist/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <fmt/format.h>

#include "common/error.h"

namespace k3::dist {

namespace {

struct LogState {
  int rank = 0;
  std::string pattern;
  std::shared_ptr<spdlog::sinks::sink> console;
};

LogState& state() {
  static LogState s;
  return s;
}

}  // namespace

void init_logging(int rank, int world) {
  auto& s = state();
  s.rank = rank;
  // Unbuffered stderr: lines from different ranks interleave whole, and nothing is lost on abort.
  s.console = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  s.console->set_level(rank == 0 ? spdlog::level::info : spdlog::level::warn);
  auto logger = std::make_shared<spdlog::logger>("k3", s.console);
  const int width = static_cast<int>(std::to_string(std::max(world - 1, 0)).size());
  s.pattern = fmt::format("[%H:%M:%S.%e] [rank {:>{}}/{}] [%l] %v", rank, width, world);
  logger->set_pattern(s.pattern);
  logger->set_level(spdlog::level::debug);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

void set_console_level(spdlog::level::level_enum level) {
  auto& s = state();
  if (!s.console) return;
  s.console->set_level(s.rank == 0 ? level : std::max(level, spdlog::level::warn));
  if (level < spdlog::level::debug) spdlog::default_logger()->set_level(level);
}

spdlog::level::level_enum parse_log_level(const std::string& name) {
  for (auto level :
       {spdlog::level::trace, spdlog::level::debug, spdlog::level::info, spdlog::level::warn,
        spdlog::level::err, spdlog::level::critical, spdlog::level::off}) {
    const auto text = spdlog::level::to_string_view(level);
    if (name == std::string(text.data(), text.size())) return level;
  }
  if (name == "warn") return spdlog::level::warn;
  if (name == "error") return spdlog::level::err;
  throw UsageError("--log-level '" + name +
                   "' is not one of trace, debug, info, warn, error, critical, off");
}

std::filesystem::path add_rank_log_file(const std::filesystem::path& dir, int rank) {
  const auto path = dir / "logs" / fmt::format("rank-{:05d}.log", rank);
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) {
    throw InputError("cannot create log directory " + path.parent_path().string() + ": " +
                     ec.message());
  }
  std::shared_ptr<spdlog::sinks::sink> file;
  try {
    file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path.string(), /*truncate=*/true);
  } catch (const spdlog::spdlog_ex& e) {
    throw InputError("cannot open log file " + path.string() + ": " + e.what());
  }
  file->set_level(spdlog::level::trace);
  auto logger = spdlog::default_logger();
  file->set_pattern(state().pattern);
  logger->sinks().push_back(file);
  // Line by line: a rank killed by a signal (out of memory, the launcher) leaves every line it
  // logged. The job logs a few lines a second at most, so the flushes cost nothing measurable.
  logger->flush_on(spdlog::level::trace);
  return path;
}

void silence_console() {
  if (state().console) state().console->set_level(spdlog::level::off);
}

void flush_logs() {
  if (auto logger = spdlog::default_logger()) logger->flush();
}

}  // namespace k3::dist
