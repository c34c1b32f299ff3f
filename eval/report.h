// eval reports: what a finished run leaves besides its console lines and its history record.
//
//   summary JSON   metrics, counts, verdict, log problems and the configuration, for machines
//   status file    one word for schedulers that only read a file: running from the start,
//                  then ok / regression / error (a finished run) or failed (it did not finish;
//                  a second line says why: the rank and its error, or the rank and signal the
//                  launcher saw)
//   lock           <artifacts>/.lock, held by the one job that writes the directory
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/fd.h"
#include "eval/baseline.h"
#include "eval/metrics.h"
#include "eval/results.h"

namespace k3::eval {

enum class RunStatus { kOk, kRegression, kError, kRunning, kFailed };

// "ok", "regression", "error", "running", "failed"
std::string_view status_word(RunStatus status);
RunStatus status_of(const std::optional<Verdict>& verdict);  // no baseline: ok
// The process exit code of a finished run: ok 0, regression 1, error 2.
int exit_code_of(RunStatus status);

// The status file: the word and a newline, then `detail` as a second line if given; written
// atomically.
void write_status(const std::filesystem::path& path, RunStatus status,
                  const std::string& detail = "");
// The first word of a status file; "" when there is none.
std::string read_status_word(const std::filesystem::path& path);

// A run that did not finish, as its artifacts directory records it: status "failed" with the
// reason, and summary.json {"status": "failed", "reason", "exit_code", "finished_questions"
// (rows of questions.jsonl that survived), "config"}.
void write_failure(const std::filesystem::path& artifacts_dir, int exit_code,
                   const std::string& reason, const nlohmann::json& config);

// Exclusive use of an artifacts directory while this object lives (flock on <dir>/.lock, which
// the kernel releases when the process ends, however it ends): two jobs can never write one
// directory, nor a --resume start while the killed run's ranks are still alive. InputError
// naming the directory (and the holder's pid) when another process holds it.
class ArtifactsLock {
 public:
  explicit ArtifactsLock(const std::filesystem::path& dir);
  ArtifactsLock(const ArtifactsLock&) = delete;
  ArtifactsLock& operator=(const ArtifactsLock&) = delete;

 private:
  UniqueFd fd_;  // closing it (however the process ends) releases the lock
};

// {"status", "metrics": {accuracy, invalid, latency_s, output_throughput, questions, correct,
//  invalid_count, completion_tokens}, "verdict": {...} or null, "log_errors", "config"}.
// `config` is echoed as given (the resolved options of the run). NaN metrics become null.
nlohmann::json summary_json(const Metrics& metrics, const std::optional<Verdict>& verdict,
                            std::size_t log_errors, const nlohmann::json& config);
// Pretty-printed, written atomically.
void write_summary(const std::filesystem::path& path, const nlohmann::json& summary);

}  // namespace k3::eval
