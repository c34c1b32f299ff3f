#include "eval/throughput.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>

namespace k3::eval {

namespace {

double per_second(double amount, double seconds) { return seconds > 0 ? amount / seconds : 0.0; }

LatencyStats stats_of(std::vector<double> values) {
  LatencyStats s;
  if (values.empty()) return s;
  s.mean_s = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  s.median_s = percentile(values, 50);
  s.p99_s = percentile(std::move(values), 99);
  return s;
}

// SGLang's "{:<40} {:<10}" rows.
std::string row(std::string_view label, const std::string& value) {
  return fmt::format("{:<40} {}\n", label, value);
}
std::string row(std::string_view label, double value) {
  return row(label, fmt::format("{:.2f}", value));
}
// A heading centred in 50 columns of `fill`, as SGLang's "{:=^50}" makes it (the odd column
// goes right).
std::string title(std::string_view text, char fill) {
  const std::size_t width = 50, pad = width > text.size() ? width - text.size() : 0;
  const std::size_t left = pad / 2;
  return std::string(left, fill) + std::string(text) + std::string(pad - left, fill) + "\n";
}

}  // namespace

double ThroughputMetrics::request_throughput() const {
  return per_second(static_cast<double>(requests), duration_s);
}
double ThroughputMetrics::input_throughput() const {
  return per_second(static_cast<double>(input_tokens), duration_s);
}
double ThroughputMetrics::output_throughput() const {
  return per_second(static_cast<double>(output_tokens), duration_s);
}
double ThroughputMetrics::total_throughput() const {
  return per_second(static_cast<double>(input_tokens + output_tokens), duration_s);
}

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double at = q / 100.0 * static_cast<double>(values.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(at));
  const std::size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (values[above] - values[below]) * (at - static_cast<double>(below));
}

ThroughputMetrics compute_throughput_metrics(std::span<const ThroughputRequest> requests,
                                             double duration_s, int dp_groups) {
  ThroughputMetrics m;
  m.duration_s = duration_s;
  int groups = std::max(dp_groups, 0);  // every group listed, a request's own group too
  for (const ThroughputRequest& r : requests) groups = std::max(groups, r.dp_group + 1);
  m.groups.resize(static_cast<std::size_t>(groups));
  for (std::size_t g = 0; g < m.groups.size(); ++g) m.groups[g].dp_group = static_cast<int>(g);
  std::vector<double> ttft, tpot, e2e;
  for (const ThroughputRequest& r : requests) {
    ++m.requests;
    m.input_tokens += r.input_tokens;
    m.output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_s);
    e2e.push_back(r.latency_s);
    if (r.output_tokens > 1)
      tpot.push_back((r.latency_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1));
    if (r.dp_group >= 0) {
      ThroughputGroupStats& g = m.groups[static_cast<std::size_t>(r.dp_group)];
      ++g.requests;
      g.input_tokens += r.input_tokens;
      g.output_tokens += r.output_tokens;
      g.seconds = std::max(g.seconds, r.latency_s);
    }
  }
  m.ttft = stats_of(std::move(ttft));
  m.tpot = stats_of(std::move(tpot));
  m.e2e = stats_of(std::move(e2e));
  return m;
}

std::string format_throughput_block(const ThroughputMetrics& m) {
  std::string out = title(" Offline Throughput Benchmark Result ", '=');
  out += row("Backend:", std::string("k3eval"));
  out += row("Successful requests:", std::to_string(m.requests));
  out += row("Benchmark duration (s):", m.duration_s);
  out += row("Total input tokens:", std::to_string(m.input_tokens));
  out += row("Total generated tokens:", std::to_string(m.output_tokens));
  out += row("Request throughput (req/s):", m.request_throughput());
  out += row("Input token throughput (tok/s):", m.input_throughput());
  out += row("Output token throughput (tok/s):", m.output_throughput());
  out += row("Total token throughput (tok/s):", m.total_throughput());
  if (m.speculative) {
    const SpeculativeRun& s = *m.speculative;
    const SpeculativeMetrics& c = s.counts;
    out += row("Speculative decoding:",
               fmt::format("{}, block size {}: {} verify rounds, {} drafted tokens, {} accepted",
                           s.algorithm, s.block_size, c.verify_rounds, c.drafted_tokens,
                           c.accepted_drafts));
    const auto ratio = [](const std::optional<double>& v) {
      return v ? fmt::format("{:.2f}", *v) : std::string("-");
    };
    out += row("Accept length:", ratio(c.accept_length()));
    out += row("Accept rate:", ratio(c.accept_rate()));
    if (!c.draft_lengths.empty()) {
      out += row(fmt::format("Draft lengths ({}):", s.policy.empty() ? "-" : s.policy),
                 format_draft_lengths(c));
    }
    if (c.saved_s()) out += row("Decode time:", format_decode_time(c));
  }
  for (const ThroughputGroupStats& g : m.groups) {
    out += row(fmt::format("DP group {}:", g.dp_group),
               fmt::format("{} requests, {} input + {} generated tokens in {:.2f} s", g.requests,
                           g.input_tokens, g.output_tokens, g.seconds));
  }
  auto latency = [&](std::string_view heading, std::string_view name, const LatencyStats& s) {
    out += title(heading, '-');
    out += row(fmt::format("Mean {} (ms):", name), s.mean_s * 1e3);
    out += row(fmt::format("Median {} (ms):", name), s.median_s * 1e3);
    out += row(fmt::format("P99 {} (ms):", name), s.p99_s * 1e3);
  };
  latency("Time to First Token", "TTFT", m.ttft);
  latency("Time per Output Token (excl. 1st token)", "TPOT", m.tpot);
  latency("End-to-End Latency", "E2E Latency", m.e2e);
  out += std::string(50, '=') + "\n";
  return out;
}

std::string machine_class() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos) model = line.substr(line.find_first_not_of(' ', colon + 1));
    break;
  }
  return fmt::format("{} ({} logical CPUs)", model, ::sysconf(_SC_NPROCESSORS_ONLN));
}

nlohmann::ordered_json to_json(const ThroughputRequest& r) {
  nlohmann::ordered_json j;
  j["id"] = r.id;
  j["dp_group"] = r.dp_group;
  j["input_tokens"] = r.input_tokens;
  j["output_tokens"] = r.output_tokens;
  j["ttft_s"] = r.ttft_s;
  j["latency_s"] = r.latency_s;
  return j;
}

nlohmann::ordered_json throughput_summary_json(const ThroughputMetrics& m,
                                               const ThroughputVerdict* verdict,
                                               const nlohmann::json& config) {
  auto latency = [](const LatencyStats& s) {
    return nlohmann::ordered_json{{"mean", s.mean_s}, {"median", s.median_s}, {"p99", s.p99_s}};
  };
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  for (const ThroughputGroupStats& g : m.groups) {
    groups.push_back({{"dp_group", g.dp_group},
                      {"requests", g.requests},
                      {"input_tokens", g.input_tokens},
                      {"output_tokens", g.output_tokens},
                      {"seconds", g.seconds}});
  }
  nlohmann::ordered_json j;
  j["status"] = verdict && !verdict->pass ? "regression" : "ok";
  j["kind"] = "throughput";
  j["metrics"] = {{"requests", m.requests},
                  {"input_tokens", m.input_tokens},
                  {"output_tokens", m.output_tokens},
                  {"duration_s", m.duration_s},
                  {"request_throughput", m.request_throughput()},
                  {"input_throughput", m.input_throughput()},
                  {"output_throughput", m.output_throughput()},
                  {"total_throughput", m.total_throughput()},
                  {"ttft_s", latency(m.ttft)},
                  {"tpot_s", latency(m.tpot)},
                  {"e2e_latency_s", latency(m.e2e)},
                  {"dp_groups", groups}};
  if (verdict) {
    j["verdict"] = {{"pass", verdict->pass},
                    {"output_throughput", verdict->measured},
                    {"baseline_output_throughput", verdict->baseline},
                    {"threshold", verdict->threshold},
                    {"reason", verdict->reason}};
  } else {
    j["verdict"] = nullptr;
  }
  if (m.speculative) j["speculative"] = speculative_json(*m.speculative);
  j["config"] = config;
  return j;
}

}  // namespace k3::eval
