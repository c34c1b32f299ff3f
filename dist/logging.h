// Logging through spdlog: every line carries the rank; rank 0 talks on the console at the chosen
// level, other ranks only warn there; every rank can keep its full log in its own file.
#pragma once

#include <filesystem>
#include <string>

#include <spdlog/common.h>

namespace k3::dist {

// Installs the default spdlog logger for this rank with a console (stderr) sink.
void init_logging(int rank, int world);

// Console level of rank 0 (other ranks stay at warn unless `level` is stricter).
void set_console_level(spdlog::level::level_enum level);
spdlog::level::level_enum parse_log_level(const std::string& name);  // throws UsageError

// Adds `<dir>/logs/rank-NNNNN.log` at debug level, so a rank's full story survives the job.
// Returns the file's path.
std::filesystem::path add_rank_log_file(const std::filesystem::path& dir, int rank);

// Stops console output of this process (its file log continues); used so that a fatal error
// that hits many ranks at once is printed once per host rather than once per rank.
void silence_console();

void flush_logs();

}  // namespace k3::dist
