// eval finish: the end of a run on rank 0, one call per mode. It prints SGLang's metric lines,
// judges the run against its baseline, scans the rank logs, writes summary.json and the status
// file, appends the run to the history, and returns the process exit code. The job's half
// (apps/k3eval) only gathers what it measured and says where things go.
#pragma once

#include <cstdio>
#include <filesystem>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/baseline.h"
#include "eval/history_file.h"
#include "eval/results.h"
#include "eval/speculative.h"
#include "eval/throughput.h"
#include "eval/traffic.h"

namespace k3::eval {

// Where a run's records go and what the job knows of it.
struct RunContext {
  std::filesystem::path artifacts_dir;  // summary.json, status, requests.jsonl, logs/; "": none
  std::filesystem::path history;        // the HDF5 history to append to; "": none
  // The history record's common fields (timestamp, version, checkpoint, config name, layout,
  // extractor, shots); the finish fills in kind, counts, metrics, verdict and results.
  RunRecord record;
  nlohmann::json config;  // the run's configuration, echoed as summary.json's "config"
  // Set only when the run decoded speculatively (a verify round ran on some DP group): the
  // accept lines, summary.json's "speculative" object and the history record's fields. Absent,
  // every output is what it is without speculation.
  std::optional<SpeculativeRun> speculative;
  // The generation stage's time in collectives per kind of traffic: the "Collectives" block and
  // summary.json's "collectives" object. Absent, neither appears.
  std::optional<TrafficRun> traffic;
  std::FILE* out = stdout;
};

// A GSM8K evaluation: `resumed` are the rows a --resume found finished (their tokens were
// generated in another job's time, so Latency, Output throughput and the speculative counts
// cover `this_part` only; Accuracy and Invalid cover every row). Exit code 0 ok, 1 regression,
// 2 error (log errors).
int finish_evaluation(const RunContext& context, const std::vector<QuestionResult>& resumed,
                      const std::vector<QuestionResult>& this_part, double latency_s,
                      const std::optional<Baseline>& baseline);

// An offline throughput run (--mode throughput): SGLang's Offline Throughput block,
// requests.jsonl, the throughput verdict. Exit code 0 ok, 1 regression.
int finish_throughput(const RunContext& context, const ThroughputOutcome& outcome,
                      const std::optional<ThroughputBaseline>& baseline);

}  // namespace k3::eval
