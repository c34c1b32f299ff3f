#include "eval/traffic.h"

#include <fmt/format.h>

namespace k3::eval {

namespace {

std::string format_bytes(double bytes) {
  if (bytes >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024 * 1024));
  if (bytes >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024));
  if (bytes >= 1024.0) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  return fmt::format("{:.0f} B", bytes);
}

double per_step(double value, std::uint64_t steps) {
  return steps > 0 ? value / static_cast<double>(steps) : 0.0;
}

double share(double seconds, double wall_s) { return wall_s > 0 ? seconds / wall_s : 0.0; }

}  // namespace

std::string format_traffic_lines(const TrafficRun& run) {
  std::string out = fmt::format(
      "Collectives: {} ranks on {} host(s), {} steps in {:.2f} s (time: mean per rank; bytes: "
      "sent by all ranks)\n",
      run.ranks, run.hosts, run.steps, run.wall_s);
  out += fmt::format("  {:<15} {:>8} {:>7} {:>8} {:>11} {:>12}\n", "kind", "time s", "share",
                     "max s", "calls/step", "bytes/step");
  double total = 0;
  for (const TrafficKind& k : run.kinds) {
    total += k.mean_s;
    out += fmt::format("  {:<15} {:>8.3f} {:>6.1f}% {:>8.3f} {:>11.1f} {:>12}\n", k.kind, k.mean_s,
                       100 * share(k.mean_s, run.wall_s), k.max_s,
                       per_step(k.calls_per_rank, run.steps),
                       format_bytes(per_step(static_cast<double>(k.bytes), run.steps)));
  }
  out += fmt::format("  {:<15} {:>8.3f} {:>6.1f}%\n", "all", total,
                     100 * share(total, run.wall_s));
  return out;
}

nlohmann::ordered_json traffic_json(const TrafficRun& run) {
  nlohmann::ordered_json kinds = nlohmann::ordered_json::array();
  double total = 0;
  for (const TrafficKind& k : run.kinds) {
    total += k.mean_s;
    kinds.push_back({{"kind", k.kind},
                     {"mean_s", k.mean_s},
                     {"max_s", k.max_s},
                     {"share", share(k.mean_s, run.wall_s)},
                     {"bytes", k.bytes},
                     {"bytes_per_step", per_step(static_cast<double>(k.bytes), run.steps)},
                     {"calls_per_step", per_step(k.calls_per_rank, run.steps)}});
  }
  return {{"ranks", run.ranks},
          {"hosts", run.hosts},
          {"wall_s", run.wall_s},
          {"steps", run.steps},
          {"kinds", std::move(kinds)},
          {"total_mean_s", total},
          {"total_share", share(total, run.wall_s)}};
}

}  // namespace k3::eval
