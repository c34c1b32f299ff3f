#include "eval/report.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/text_file.h"
#include "common/error.h"

namespace k3::eval {

using nlohmann::json;

// ---------------------------------------------------------------- status and summary

std::string_view status_word(RunStatus status) {
  switch (status) {
    case RunStatus::kOk:
      return "ok";
    case RunStatus::kRegression:
      return "regression";
    case RunStatus::kError:
      return "error";
    case RunStatus::kRunning:
      return "running";
    case RunStatus::kFailed:
      return "failed";
  }
  return "error";
}

RunStatus status_of(const std::optional<Verdict>& verdict) {
  return verdict && !verdict->pass ? RunStatus::kRegression : RunStatus::kOk;
}

int exit_code_of(RunStatus status) {
  return static_cast<int>(status == RunStatus::kOk           ? ExitCode::kOk
                          : status == RunStatus::kRegression ? ExitCode::kRegression
                                                             : ExitCode::kInput);
}

void write_status(const std::filesystem::path& path, RunStatus status, const std::string& detail) {
  std::string text = std::string(status_word(status)) + "\n";
  if (!detail.empty()) text += detail + "\n";
  write_file_atomically(path, text);
}

std::string read_status_word(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string word;
  in >> word;
  return word;
}

void write_failure(const std::filesystem::path& artifacts_dir, int exit_code,
                   const std::string& reason, const json& config) {
  std::size_t finished = 0;
  const auto questions = artifacts_dir / "questions.jsonl";
  if (std::filesystem::exists(questions)) {
    try {
      finished = read_results(questions).results.size();
    } catch (const Error&) {  // a damaged file: the failure record must still be written
    }
  }
  json summary = {{"status", "failed"},
                  {"reason", reason},
                  {"exit_code", exit_code},
                  {"finished_questions", finished},
                  {"config", config}};
  write_summary(artifacts_dir / "summary.json", summary);
  // The status last: another rank's abort may end this process at any moment, and a status
  // still "running" lets the launcher wrapper record the failure instead.
  // The first line of a long message is the status file's detail; summary.json keeps it all.
  write_status(artifacts_dir / "status", RunStatus::kFailed, reason.substr(0, reason.find('\n')));
}

ArtifactsLock::ArtifactsLock(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const auto path = dir / ".lock";
  fd_.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd_) {
    throw InputError("cannot open " + path.string() + " to lock the artifacts directory: " +
                     std::strerror(errno));
  }
  if (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    char holder[32] = {};
    const ssize_t n = ::pread(fd_.get(), holder, sizeof holder - 1, 0);
    std::string pid = n > 0 ? std::string(holder, static_cast<std::size_t>(n)) : "";
    pid = pid.substr(0, pid.find('\n'));
    fd_.reset();
    throw InputError("artifacts directory " + dir.string() + " is in use by another job" +
                     (pid.empty() ? "" : " (pid " + pid + ")") +
                     "; wait for it to end or choose another --artifacts-dir");
  }
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_.get(), 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd_.get(), me.data(), me.size(), 0);
  }
}


namespace {

json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

}  // namespace

json summary_json(const Metrics& metrics, const std::optional<Verdict>& verdict,
                  std::size_t log_errors, const json& config) {
  json out;
  out["status"] = status_word(status_of(verdict));
  out["metrics"] = {{"accuracy", number_or_null(metrics.accuracy())},
                    {"invalid", number_or_null(metrics.invalid_rate())},
                    {"latency_s", metrics.latency_s},
                    {"output_throughput", metrics.output_throughput()},
                    {"questions", metrics.questions},
                    {"correct", metrics.correct},
                    {"invalid_count", metrics.invalid},
                    {"completion_tokens", metrics.completion_tokens}};
  if (verdict) {
    json mismatches = json::array();
    for (const GoldenMismatch& m : verdict->golden_mismatches) {
      mismatches.push_back({{"id", m.id},
                            {"first_difference", m.position},
                            {"expected_tokens", m.expected_tokens},
                            {"actual_tokens", m.actual_tokens}});
    }
    out["verdict"] = {{"pass", verdict->pass},
                      {"accuracy", number_or_null(verdict->accuracy)},
                      {"baseline_accuracy", verdict->baseline_accuracy},
                      {"threshold", verdict->threshold},
                      {"reasons", verdict->reasons},
                      {"golden_mismatches", mismatches}};
  } else {
    out["verdict"] = nullptr;
  }
  out["log_errors"] = log_errors;
  out["config"] = config;
  return out;
}

void write_summary(const std::filesystem::path& path, const json& summary) {
  write_file_atomically(path, summary.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
}

}  // namespace k3::eval
