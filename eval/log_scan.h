// eval::scan_log: the post-run look through the job's logs, so that a run whose accuracy looks
// fine but whose ranks logged errors, or whose launcher reported an abort, is noticed.
//
// What counts, one category per line:
//   critical  an spdlog line whose level field is [critical]
//   error     an spdlog line whose level field is [error], or Slurm's "srun: error: ..."
//   abort     any other line that is not an spdlog line and contains "MPI_ABORT" (Open MPI's
//             "MPI_ABORT was invoked on rank 3 ...") or "Abort" ("Signal: Aborted (6)",
//             "exited on signal 6 (Aborted)")
// An spdlog line starts with bracketed fields, the first a time ("[2026-11-30 06:17:16.123]" or
// k3eval's "[06:17:16.123]"), e.g. "[06:17:16.123] [rank 3/64] [error] ..."; the level is one
// of those leading fields, so a message that merely mentions "[error]" is not counted, and an
// [info] line saying "aborting" is not an abort. Terminal colour codes are ignored.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace k3::eval {

struct LogFinding {
  enum class Kind { kError, kCritical, kAbort };
  Kind kind;
  std::size_t line = 0;  // 1-based
  std::string text;      // the line, colour codes removed, cut to 300 bytes
};

struct LogScan {
  std::filesystem::path path;
  std::size_t lines = 0;
  std::size_t errors = 0;
  std::size_t criticals = 0;
  std::size_t aborts = 0;
  std::vector<LogFinding> first;  // the first few offending lines, in file order

  std::size_t total() const { return errors + criticals + aborts; }
};

std::string_view kind_name(LogFinding::Kind kind);  // "error", "critical", "abort"

// InputError if the file cannot be read. `max_examples` bounds LogScan::first.
LogScan scan_log(const std::filesystem::path& path, std::size_t max_examples = 5);
std::vector<LogScan> scan_logs(std::span<const std::filesystem::path> paths,
                               std::size_t max_examples = 5);

// Sum of total() over the scans (errors, criticals and aborts): the summary's "log_errors".
std::size_t count_log_errors(std::span<const LogScan> scans);

}  // namespace k3::eval
