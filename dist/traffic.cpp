#include "dist/traffic.h"

#include <algorithm>

#include "dist/collectives.h"
#include "dist/comm.h"

namespace k3::dist {

namespace {

// Main thread only, as every collective: plain globals.
Traffic g_current = Traffic::kOther;
TrafficCounts g_counts{};

}  // namespace

const char* traffic_name(Traffic kind) {
  switch (kind) {
    case Traffic::kOther: return "other";
    case Traffic::kEmbedding: return "embedding";
    case Traffic::kAttentionTp: return "attention TP";
    case Traffic::kDenseMlpTp: return "dense MLP TP";
    case Traffic::kExpertAllToAll: return "EP all-to-all";
    case Traffic::kLmHead: return "LM head";
    case Traffic::kDpSync: return "DP sync";
    case Traffic::kDraft: return "draft";
  }
  return "?";
}

TrafficScope::TrafficScope(Traffic kind) : previous_(g_current) { g_current = kind; }

TrafficScope::~TrafficScope() { g_current = previous_; }

TrafficCounts traffic_counts() { return g_counts; }

void count_traffic_wait(double seconds) {
  TrafficCount& c = g_counts[static_cast<std::size_t>(g_current)];
  c.seconds += seconds;
  ++c.calls;
}

void count_traffic_bytes(std::uint64_t bytes) {
  g_counts[static_cast<std::size_t>(g_current)].bytes += bytes;
}

TrafficReport gather_traffic(const Comm& world, const TrafficCounts& since, int hosts) {
  // Three numbers per kind per rank; the exchange itself counts as "other" after `since`'s
  // difference is taken.
  const TrafficCounts now = g_counts;
  std::vector<double> mine;
  for (std::size_t k = 0; k < kTrafficKinds; ++k) {
    mine.push_back(now[k].seconds - since[k].seconds);
    mine.push_back(static_cast<double>(now[k].bytes - since[k].bytes));
    mine.push_back(static_cast<double>(now[k].calls - since[k].calls));
  }
  const auto all = gatherv(world, std::span<const double>(mine), 0);
  TrafficReport report;
  if (world.rank() != 0) return report;
  report.ranks = world.size();
  report.hosts = hosts;
  const std::size_t per_rank = 3 * kTrafficKinds;
  for (std::size_t k = 0; k < kTrafficKinds; ++k) {
    TrafficRow row;
    row.kind = traffic_name(static_cast<Traffic>(k));
    double calls = 0;
    for (int r = 0; r < world.size(); ++r) {
      const double* v = all.data.data() + static_cast<std::size_t>(r) * per_rank + 3 * k;
      row.mean_s += v[0];
      row.max_s = std::max(row.max_s, v[0]);
      row.bytes += static_cast<std::uint64_t>(v[1]);
      calls += v[2];
    }
    if (calls == 0) continue;
    row.mean_s /= world.size();
    row.calls_per_rank = calls / world.size();
    report.rows.push_back(std::move(row));
  }
  return report;
}

}  // namespace k3::dist
