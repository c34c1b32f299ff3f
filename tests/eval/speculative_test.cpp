// Speculative decoding's acceptance figures: SGLang's accept length and accept rate from the
// counts, summed over DP groups before the ratios are taken, and the lines and JSON the reports
// print.
#include "eval/speculative.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace k3::eval {
namespace {

TEST(Speculative, NoVerifyRoundHasNoFigures) {
  const SpeculativeMetrics none;
  EXPECT_FALSE(none.ran());
  EXPECT_EQ(none.accept_length(), std::nullopt);
  EXPECT_EQ(none.accept_rate(), std::nullopt);
  EXPECT_EQ(format_accept_suffix(none), "");  // the progress line stays as it is
}

TEST(Speculative, EveryDraftAccepted) {
  // 10 rounds of 4 drafts, all kept: 4 drafts + the bonus token per verify forward.
  const SpeculativeMetrics all = SpeculativeMetrics::of(10, 40, 40);
  EXPECT_TRUE(all.ran());
  EXPECT_EQ(all.accept_length(), 5.0);
  EXPECT_EQ(all.accept_rate(), 1.0);
  EXPECT_EQ(format_accept_suffix(all), ", accept len 5.00, accept rate 1.00");
}

TEST(Speculative, NoDraftAcceptedStillCommitsTheBonusToken) {
  const SpeculativeMetrics none_kept = SpeculativeMetrics::of(10, 40, 0);
  EXPECT_EQ(none_kept.accept_length(), 1.0);
  EXPECT_EQ(none_kept.accept_rate(), 0.0);
  EXPECT_EQ(format_accept_suffix(none_kept), ", accept len 1.00, accept rate 0.00");
}

TEST(Speculative, DpGroupsSumTheirCountsNotTheirRatios) {
  // Group 0 verified few rounds and accepted much, group 1 many rounds and accepted little.
  const SpeculativeMetrics group0 = SpeculativeMetrics::of(10, 40, 30);   // length 4.0, rate 0.75
  const SpeculativeMetrics group1 = SpeculativeMetrics::of(30, 120, 15);  // length 1.5, rate 0.125
  SpeculativeMetrics job;
  job += group0;
  job += group1;
  EXPECT_EQ(job, (SpeculativeMetrics::of(40, 160, 45)));
  EXPECT_EQ(job, group0 + group1);
  EXPECT_DOUBLE_EQ(*job.accept_length(), 85.0 / 40.0);  // 2.125, not the mean 2.75
  EXPECT_DOUBLE_EQ(*job.accept_rate(), 45.0 / 160.0);   // 0.28125, not the mean 0.4375
  EXPECT_EQ(format_accept_suffix(job), ", accept len 2.12, accept rate 0.28");
  // A DP group that decoded nothing adds nothing.
  EXPECT_EQ(job + SpeculativeMetrics{}, job);
}

TEST(Speculative, ARatioWithoutItsDenominatorIsShownAsADashAndNull) {
  // Verify rounds without drafted tokens (a block size of 0): an accept length, no accept rate.
  const SpeculativeRun run{"dspark", 0, SpeculativeMetrics::of(5, 0, 0), ""};
  EXPECT_EQ(format_accept_suffix(run.counts), ", accept len 1.00, accept rate -");
  EXPECT_TRUE(speculative_json(run)["accept_rate"].is_null());
  EXPECT_EQ(format_speculative_lines(run),
            "Accept length: 1.000\n"
            "Accept rate: -\n"
            "Speculative decoding: dspark, block size 0: 5 verify rounds, 0 drafted tokens, 0 "
            "accepted\n");
}

TEST(Speculative, ConsoleLinesAndSummaryObject) {
  const SpeculativeRun run{"dspark", 4, SpeculativeMetrics::of(8, 32, 14), ""};
  EXPECT_EQ(format_speculative_lines(run),
            "Accept length: 2.750\n"
            "Accept rate: 0.438\n"
            "Speculative decoding: dspark, block size 4: 8 verify rounds, 32 drafted tokens, 14 "
            "accepted\n");
  EXPECT_EQ(speculative_json(run).dump(),
            R"({"algorithm":"dspark","block_size":4,"verify_rounds":8,"drafted_tokens":32,)"
            R"("accepted_drafts":14,"accept_length":2.75,"accept_rate":0.4375,"policy":"",)"
            R"("draft_lengths":{},"decode_s":null,"plain_estimate_s":null,"saved_s":null})");
}

TEST(Speculative, DraftLengthsAndDecodeTimeAgainstThePlainEstimate) {
  SpeculativeMetrics c = SpeculativeMetrics::of(8, 20, 10);
  c.draft_lengths = {3, 0, 5, 0, 3};  // K = 0, 2 and 4
  c.decode_s = 1.2;
  c.plain_estimate_s = 1.5;
  const SpeculativeRun run{"dspark", 4, c, "goodput"};
  EXPECT_EQ(format_draft_lengths(c), "K=0 3, K=2 5, K=4 3");
  EXPECT_EQ(format_speculative_lines(run),
            "Accept length: 2.250\n"
            "Accept rate: 0.500\n"
            "Speculative decoding: dspark, block size 4: 8 verify rounds, 20 drafted tokens, 10 "
            "accepted\n"
            "Draft lengths (goodput): K=0 3, K=2 5, K=4 3\n"
            "Decode time: 1.20 s; decoding plainly, by the cost model: 1.50 s (saved 0.30 s, 20.0 %)\n");
  const auto j = speculative_json(run);
  EXPECT_EQ(j["policy"], "goodput");
  EXPECT_EQ(j["draft_lengths"].dump(), R"({"0":3,"2":5,"4":3})");
  EXPECT_NEAR(j["saved_s"].get<double>(), 0.3, 1e-12);
  // Slower than the estimate: a loss, said so.
  c.decode_s = 1.8;
  EXPECT_EQ(format_decode_time(c),
            "1.80 s; decoding plainly, by the cost model: 1.50 s (lost 0.30 s, 20.0 %)");
  // Two DP groups: lengths and times add up.
  SpeculativeMetrics sum = c + c;
  EXPECT_EQ(sum.draft_lengths, (std::vector<std::uint64_t>{6, 0, 10, 0, 6}));
  EXPECT_DOUBLE_EQ(sum.plain_estimate_s, 3.0);
}

}  // namespace
}  // namespace k3::eval
