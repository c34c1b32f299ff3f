// eval::ThroughputMetrics: SGLang's offline throughput block, its arithmetic and percentiles.
#include "eval/throughput.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace k3::eval {
namespace {

TEST(Throughput, PercentilesInterpolateLinearlyAsNumpy) {
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({4, 3, 2, 1}, 99), 3.97);  // index 0.99 x 3 = 2.97
  EXPECT_DOUBLE_EQ(percentile({3, 1, 2}, 50), 2);
  EXPECT_DOUBLE_EQ(percentile({10}, 99), 10);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
  EXPECT_DOUBLE_EQ(percentile({1, 2}, 100), 2);
  EXPECT_DOUBLE_EQ(percentile({1, 2}, 0), 1);
}

// Three requests over three DP groups, one idle; request 1 generated one token, so it has no
// time per output token.
std::vector<ThroughputRequest> three() {
  return {{0, 0, 10, 5, 0.1, 0.5}, {1, 1, 20, 1, 0.2, 0.2}, {2, 0, 30, 3, 0.3, 0.7}};
}

TEST(Throughput, TotalsRatesAndLatenciesAddUp) {
  const auto m = compute_throughput_metrics(three(), 1.5, 3);
  EXPECT_EQ(m.requests, 3u);
  EXPECT_EQ(m.input_tokens, 60u);
  EXPECT_EQ(m.output_tokens, 9u);
  EXPECT_DOUBLE_EQ(m.request_throughput(), 2.0);
  EXPECT_DOUBLE_EQ(m.input_throughput(), 40.0);
  EXPECT_DOUBLE_EQ(m.output_throughput(), 6.0);
  EXPECT_DOUBLE_EQ(m.total_throughput(), 46.0);
  // TTFT over [0.1, 0.2, 0.3]; TPOT over (0.5 - 0.1) / 4 and (0.7 - 0.3) / 2; E2E over
  // [0.2, 0.5, 0.7].
  EXPECT_NEAR(m.ttft.mean_s, 0.2, 1e-12);
  EXPECT_NEAR(m.ttft.median_s, 0.2, 1e-12);
  EXPECT_NEAR(m.ttft.p99_s, 0.298, 1e-12);
  EXPECT_NEAR(m.tpot.mean_s, 0.15, 1e-12);
  EXPECT_NEAR(m.tpot.median_s, 0.15, 1e-12);
  EXPECT_NEAR(m.tpot.p99_s, 0.199, 1e-12);
  EXPECT_NEAR(m.e2e.mean_s, 1.4 / 3, 1e-12);
  EXPECT_NEAR(m.e2e.median_s, 0.5, 1e-12);
  EXPECT_NEAR(m.e2e.p99_s, 0.696, 1e-12);
  ASSERT_EQ(m.groups.size(), 3u);
  EXPECT_EQ(m.groups[0].requests, 2u);
  EXPECT_EQ(m.groups[0].input_tokens, 40u);
  EXPECT_EQ(m.groups[0].output_tokens, 8u);
  EXPECT_DOUBLE_EQ(m.groups[0].seconds, 0.7);
  EXPECT_EQ(m.groups[1].requests, 1u);
  EXPECT_EQ(m.groups[2].requests, 0u);  // idle, still listed
}

TEST(Throughput, NoDurationGivesZeroRatesNotInfinity) {
  const auto m = compute_throughput_metrics(three(), 0, 1);
  EXPECT_EQ(m.request_throughput(), 0);
  EXPECT_EQ(m.total_throughput(), 0);
  const auto none = compute_throughput_metrics({}, 1, 2);
  EXPECT_EQ(none.requests, 0u);
  EXPECT_EQ(none.ttft.p99_s, 0);
  EXPECT_EQ(none.groups.size(), 2u);
}

TEST(Throughput, BlockHasSglangsLinesInOrder) {
  const std::string block = format_throughput_block(compute_throughput_metrics(three(), 1.5, 3));
  const std::vector<std::string> lines = {
      "====== Offline Throughput Benchmark Result =======\n",
      "Backend:                                 k3eval\n",
      "Successful requests:                     3\n",
      "Benchmark duration (s):                  1.50\n",
      "Total input tokens:                      60\n",
      "Total generated tokens:                  9\n",
      "Request throughput (req/s):              2.00\n",
      "Input token throughput (tok/s):          40.00\n",
      "Output token throughput (tok/s):         6.00\n",
      "Total token throughput (tok/s):          46.00\n",
      "DP group 0:                              2 requests, 40 input + 8 generated tokens in 0.70 s\n",
      "DP group 2:                              0 requests, 0 input + 0 generated tokens in 0.00 s\n",
      "---------------Time to First Token----------------\n",
      "Mean TTFT (ms):                          200.00\n",
      "P99 TTFT (ms):                           298.00\n",
      "-----Time per Output Token (excl. 1st token)------\n",
      "Median TPOT (ms):                        150.00\n",
      "----------------End-to-End Latency----------------\n",
      "P99 E2E Latency (ms):                    696.00\n",
      "==================================================\n"};
  std::size_t at = 0;
  for (const auto& line : lines) {
    const auto found = block.find(line, at);
    ASSERT_NE(found, std::string::npos) << "missing or out of order: " << line << "in:\n" << block;
    at = found + line.size();
  }
  EXPECT_EQ(at, block.size());  // the closing rule ends the block
  EXPECT_EQ(block.find("ccept"), std::string::npos) << block;  // no speculation, no such line
}

TEST(Throughput, SpeculativeRunAddsItsAcceptLinesAfterTheTotals) {
  ThroughputMetrics m = compute_throughput_metrics(three(), 1.5, 3);
  m.speculative = SpeculativeRun{"dspark", 4, SpeculativeMetrics::of(8, 32, 14), ""};
  const std::string block = format_throughput_block(m);
  EXPECT_NE(block.find("Total token throughput (tok/s):          46.00\n"
                       "Speculative decoding:                    dspark, block size 4: 8 verify "
                       "rounds, 32 drafted tokens, 14 accepted\n"
                       "Accept length:                           2.75\n"
                       "Accept rate:                             0.44\n"
                       "DP group 0:"),
            std::string::npos)
      << block;
  const auto summary = throughput_summary_json(m, nullptr, {{"seed", 7}});
  EXPECT_EQ(summary["speculative"]["algorithm"], "dspark");
  EXPECT_EQ(summary["speculative"]["accepted_drafts"], 14);
  EXPECT_EQ(summary["speculative"]["accept_rate"], 0.4375);
  EXPECT_FALSE(throughput_summary_json(compute_throughput_metrics(three(), 1.5, 3), nullptr, {})
                   .contains("speculative"));
}

TEST(Throughput, RequestLinesAndSummaryCarryTheFigures) {
  EXPECT_EQ(to_json(three()[0]).dump(),
            R"({"id":0,"dp_group":0,"input_tokens":10,"output_tokens":5,"ttft_s":0.1,"latency_s":0.5})");
  const auto summary =
      throughput_summary_json(compute_throughput_metrics(three(), 1.5, 3), nullptr, {{"seed", 7}});
  EXPECT_EQ(summary["kind"], "throughput");
  EXPECT_EQ(summary["status"], "ok");
  EXPECT_EQ(summary["metrics"]["output_tokens"], 9);
  EXPECT_DOUBLE_EQ(summary["metrics"]["output_throughput"].get<double>(), 6.0);
  EXPECT_DOUBLE_EQ(summary["metrics"]["tpot_s"]["median"].get<double>(), 0.15);
  EXPECT_EQ(summary["metrics"]["dp_groups"].size(), 3u);
  EXPECT_EQ(summary["config"]["seed"], 7);
  EXPECT_TRUE(summary["verdict"].is_null());
}

}  // namespace
}  // namespace k3::eval
