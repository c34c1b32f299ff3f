// eval::ThroughputMetrics: the offline throughput run's numbers and the report inference teams
// already read, SGLang's bench_offline_throughput block (python/sglang/bench_offline_throughput.py
// and bench_serving.py's latency sections):
//
//   ====== Offline Throughput Benchmark Result =======
//   Backend:                                 k3eval
//   Successful requests:                     8
//   Benchmark duration (s):                  1.23          wall time, all requests in flight
//   Total input tokens:                      256
//   Total generated tokens:                  48
//   Request throughput (req/s):              6.50          requests / duration
//   Input token throughput (tok/s):          208.13        input tokens / duration
//   Output token throughput (tok/s):         39.02         generated tokens / duration
//   Total token throughput (tok/s):          247.15        (input + generated) / duration
//   Speculative decoding:                    dspark, block size 4: 8 verify rounds, ...
//   Accept length:                           2.75          only when speculation ran
//   Accept rate:                             0.44          (eval/speculative.h)
//   DP group 0:                              4 requests, 128 input + 24 generated tokens in 1.20 s
//   ---------------Time to First Token----------------
//   Mean TTFT (ms) / Median TTFT (ms) / P99 TTFT (ms)
//   -----Time per Output Token (excl. 1st token)------
//   Mean TPOT (ms) / Median TPOT (ms) / P99 TPOT (ms)
//   ----------------End-to-End Latency----------------
//   Mean E2E Latency (ms) / Median E2E Latency (ms) / P99 E2E Latency (ms)
//   ==================================================
//
// Offline, every request is submitted at the start, so TTFT and E2E latency count from there
// (queueing included, as SGLang measures them); TPOT = (E2E - TTFT) / (generated - 1) over the
// requests that generated more than one token. Percentiles interpolate linearly (numpy's
// default), as bench_serving.py computes them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "eval/baseline.h"
#include "eval/speculative.h"

namespace k3::eval {

// One request of the measurement.
struct ThroughputRequest {
  std::size_t id = 0;  // index of the prompt
  int dp_group = 0;
  std::uint64_t input_tokens = 0;
  std::uint64_t output_tokens = 0;
  double ttft_s = 0;     // from the start of the measurement to the first generated token
  double latency_s = 0;  // from the start of the measurement to the last generated token

  bool operator==(const ThroughputRequest&) const = default;
};

// What a throughput run measured (eval/runner.h run_throughput).
struct ThroughputOutcome {
  std::vector<ThroughputRequest> requests;  // rank 0: every request, by id
  double seconds = 0;                       // wall time of the whole measurement
  std::uint64_t steps = 0;                  // engine steps (every rank takes each step)
  int dp_groups = 0;
  SpeculativeMetrics speculative;  // rank 0: every DP group's counts summed (0: no speculation)
};

struct LatencyStats {
  double mean_s = 0, median_s = 0, p99_s = 0;  // 0 over no values
};

struct ThroughputGroupStats {
  int dp_group = 0;
  std::uint64_t requests = 0, input_tokens = 0, output_tokens = 0;
  double seconds = 0;  // until the group's last request finished
};

struct ThroughputMetrics {
  std::uint64_t requests = 0, input_tokens = 0, output_tokens = 0;
  double duration_s = 0;
  std::vector<ThroughputGroupStats> groups;  // every DP group, in order, idle ones too
  LatencyStats ttft, tpot, e2e;
  // Set by the caller when the run decoded speculatively: the block's accept lines and
  // summary.json's "speculative" object.
  std::optional<SpeculativeRun> speculative;

  // Per second of duration_s; 0 when duration_s <= 0.
  double request_throughput() const;
  double input_throughput() const;
  double output_throughput() const;
  double total_throughput() const;
};

// `dp_groups`: how many DP groups the layout has (groups without requests are listed with 0).
ThroughputMetrics compute_throughput_metrics(std::span<const ThroughputRequest> requests,
                                             double duration_s, int dp_groups);

// numpy.percentile's default (linear interpolation between closest ranks); 0 for no values.
double percentile(std::vector<double> values, double q);

// The block above, each line ending in '\n'.
std::string format_throughput_block(const ThroughputMetrics& metrics);

// The machine class a throughput baseline records: "<CPU model> (<n> logical CPUs)" from
// /proc/cpuinfo and the online CPU count.
std::string machine_class();

// requests.jsonl lines, in the order of the struct.
nlohmann::ordered_json to_json(const ThroughputRequest& request);
// summary.json of a throughput run: {"status", "kind": "throughput", "metrics": {...},
// "verdict": {...} or null, "speculative": {...} (only when the run decoded speculatively,
// eval/speculative.h speculative_json), "config"}.
nlohmann::ordered_json throughput_summary_json(const ThroughputMetrics& metrics,
                                               const ThroughputVerdict* verdict,
                                               const nlohmann::json& config);

}  // namespace k3::eval
