// eval::TrafficRun: where a run's time in collectives went, per kind of traffic (attention TP,
// EP all-to-all, LM head, DP sync, ...), as the summary, summary.json and the throughput report
// show it. The figures come from dist/traffic.h (every rank's waits and sent bytes, gathered at
// the end of the generation stage); this is their plain form, so that k3_eval needs no MPI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace k3::eval {

struct TrafficKind {
  std::string kind;         // "attention TP"
  double mean_s = 0;        // mean over ranks of the time waited in its collectives
  double max_s = 0;         // the most any rank waited
  std::uint64_t bytes = 0;  // sent to other ranks, by all ranks together
  double calls_per_rank = 0;
};

struct TrafficRun {
  int ranks = 0;
  int hosts = 0;
  double wall_s = 0;          // the generation stage's wall time
  std::uint64_t steps = 0;    // engine steps in it (the most any DP group took)
  std::vector<TrafficKind> kinds;
};

// The console block, e.g.
//   Collectives: 8 ranks on 2 hosts, 68 steps in 7.10 s (mean per rank; bytes sent by all ranks)
//     kind             time s  share   max s   calls/step   bytes/step
//     attention TP      0.412   5.8%   0.530        12.0     184.0 KiB
//     ...
//     all               1.234  17.4%
std::string format_traffic_lines(const TrafficRun& run);

// summary.json's "collectives": {"ranks", "hosts", "wall_s", "steps", "kinds": [{"kind",
// "mean_s", "max_s", "share", "bytes", "bytes_per_step", "calls_per_step"}], "total_mean_s",
// "total_share"}.
nlohmann::ordered_json traffic_json(const TrafficRun& run);

}  // namespace k3::eval
