// The "Collectives" block and summary.json's "collectives" object: per-kind time, its share of
// the stage's wall time, and bytes and calls per step.
#include "eval/traffic.h"

#include <gtest/gtest.h>

namespace k3::eval {
namespace {

TrafficRun two_kinds() {
  TrafficRun run;
  run.ranks = 8;
  run.hosts = 2;
  run.wall_s = 4.0;
  run.steps = 100;
  run.kinds = {{"attention TP", 1.0, 1.5, 100 * 1024 * 1024, 600},
               {"DP sync", 0.2, 0.3, 800 * 100, 100}};
  return run;
}

TEST(Traffic, LinesGiveShareBytesAndCallsPerStep) {
  const std::string text = format_traffic_lines(two_kinds());
  EXPECT_NE(text.find("Collectives: 8 ranks on 2 host(s), 100 steps in 4.00 s"), std::string::npos)
      << text;
  // 1.0 of 4.0 s is 25%; 100 MiB over 100 steps is 1.0 MiB a step; 600 calls, 6 a step.
  EXPECT_NE(text.find("  attention TP       1.000   25.0%    1.500         6.0      1.0 MiB\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  DP sync            0.200    5.0%    0.300         1.0        800 B\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  all                1.200   30.0%\n"), std::string::npos) << text;
}

TEST(Traffic, JsonHoldsTheSameFigures) {
  const auto json = traffic_json(two_kinds());
  EXPECT_EQ(json["hosts"], 2);
  EXPECT_EQ(json["steps"], 100);
  ASSERT_EQ(json["kinds"].size(), 2u);
  EXPECT_EQ(json["kinds"][0]["kind"], "attention TP");
  EXPECT_DOUBLE_EQ(json["kinds"][0]["share"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(json["kinds"][0]["bytes_per_step"].get<double>(), 1024.0 * 1024);
  EXPECT_DOUBLE_EQ(json["kinds"][1]["calls_per_step"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(json["total_share"].get<double>(), 0.3);
}

TEST(Traffic, NoStepsOrNoTimeGivesZeroRatesNotInfinities) {
  TrafficRun run = two_kinds();
  run.steps = 0;
  run.wall_s = 0;
  const auto json = traffic_json(run);
  EXPECT_EQ(json["kinds"][0]["share"].get<double>(), 0.0);
  EXPECT_EQ(json["kinds"][0]["bytes_per_step"].get<double>(), 0.0);
  EXPECT_EQ(format_traffic_lines(run).find("inf"), std::string::npos);
}

}  // namespace
}  // namespace k3::eval
