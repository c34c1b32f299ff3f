// The HDF5 run history: one group per run, appended run after run by k3eval, read by k3report.
//
// The history is written by one process (rank 0), from one thread, with serial HDF5 calls:
//   /                    attributes format = "k3eval-history", format_version = 1
//   /runs/<n>            n = 0, 1, ...; run metadata as attributes (RunRecord's scalars)
//                        a run that decoded speculatively also carries speculative_algorithm,
//                        speculative_block_size, verify_rounds, drafted_tokens,
//                        accepted_drafts, accept_length and accept_rate (every one or none)
//   /runs/<n>/questions  compound dataset, one row per question (QuestionResult's fields;
//                        text as variable-length UTF-8 strings, token_ids as a variable-length
//                        int32 sequence; a NUL byte inside a text ends it there)
// Appending works on a copy that replaces the file only once complete (common/text_file.h's
// commit_file), so a crash mid-append leaves the previous history intact.
//
// format_version changes only when a reader of the previous version would misread a file. A run
// attribute added later is optional instead: older readers ignore it, and this reader takes its
// absence for what runs before it were (an evaluation, not resumed, no throughput figures, no
// speculative decoding recorded).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "eval/results.h"
#include "eval/speculative.h"

namespace k3::eval {

// One run of the history: a GSM8K evaluation ("eval") or an offline throughput run
// ("throughput", --mode throughput: no questions; num_questions counts its requests,
// completion_tokens its generated tokens, latency_s is the benchmark duration, accuracy and
// invalid are NaN).
struct RunRecord {
  std::string kind = "eval";  // "eval" or "throughput"; histories before the field: "eval"
  std::string timestamp;      // ISO 8601 UTC (utc_timestamp())
  std::string version;        // k3eval's version
  std::string checkpoint;     // the model path
  std::string config_name;    // the job configuration's name ("" if none)
  std::string layout;         // e.g. "tp64 dp4 ep64 dp-attention dp-lm-head"
  std::string extractor;      // extractor_name()
  std::string verdict;        // status_word()
  std::uint64_t num_shots = 0;
  std::uint64_t num_questions = 0;
  std::uint64_t completion_tokens = 0;
  std::uint64_t log_errors = 0;  // count_log_errors()
  // A --resume: the questions finished before this part (latency_s, completion_tokens and
  // output_throughput are then this part's; accuracy covers every question). 0: not resumed.
  std::uint64_t resumed_after = 0;
  double accuracy = 0;
  double invalid = 0;  // rate
  double latency_s = 0;
  double output_throughput = 0;
  double baseline_accuracy = std::numeric_limits<double>::quiet_NaN();  // NaN: no baseline
  double threshold = std::numeric_limits<double>::quiet_NaN();
  // Throughput runs: prompt tokens, and the throughput baseline's token/s and threshold (NaN:
  // no baseline).
  std::uint64_t input_tokens = 0;
  double baseline_output_throughput = std::numeric_limits<double>::quiet_NaN();
  double throughput_threshold = std::numeric_limits<double>::quiet_NaN();
  // A run that decoded speculatively: algorithm, block size and counts (accept length and rate
  // derive from them). Absent: speculation was off, or the history predates these fields.
  std::optional<SpeculativeRun> speculative;
  std::vector<QuestionResult> results;
};

std::string utc_timestamp(std::chrono::system_clock::time_point when);  // "2026-11-30T06:17:16Z"

// Appends `run` as /runs/<n> (creating the file if missing) and returns n. InputError naming
// the file when it exists but is not a k3eval history, or cannot be written.
std::size_t append_history(const std::filesystem::path& path, const RunRecord& run);

// Every run, in order. InputError naming the file when it is missing, not HDF5, or not a
// k3eval history (a missing attribute or field is named).
std::vector<RunRecord> read_history(const std::filesystem::path& path);

}  // namespace k3::eval
