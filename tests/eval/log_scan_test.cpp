// Log scan: spdlog error/critical lines (k3eval's own pattern and spdlog's default), Open MPI
// abort messages and srun errors counted per file, first offending lines kept.
#include <gtest/gtest.h>

#include "eval/log_scan.h"
#include "tests/eval/test_util.h"

namespace k3::eval {
namespace {

namespace fs = std::filesystem;

TEST(LogScan, CountsErrorsCriticalsAndAborts) {
  const fs::path dir = test::scratch_dir();
  const fs::path log = test::write_file(
      dir / "job.log",
      "[06:17:15.001] [rank 0/8] [info] loading 12 tensors\n"
      "[2026-11-30 06:17:16.123] [rank 3] [error] rank 3: shard 7 is truncated\n"
      "[06:17:16.200] [rank 3/8] [warning] retrying [error] in message text\n"
      "[06:17:16.300] [rank 3/8] [info] the word Abort and MPI_ABORT in an info line\n"
      "[06:17:17.000] [rank 3/8] [critical] fatal: bad shard (aborting the job)\n"
      "--------------------------------------------------------------------------\n"
      "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD\n"
      "[node1:01234] *** Process received signal ***\n"
      "[node1:01234] Signal: Aborted (6)\n"
      "srun: error: node1: task 3: Exited with exit code 2\n"
      "\x1b[31m[06:17:18.000] [rank 1/8] [\x1b[1merror\x1b[m] coloured\x1b[0m\r\n"
      "plain text mentioning an error\n");
  const LogScan scan = scan_log(log);
  EXPECT_EQ(scan.path, log);
  EXPECT_EQ(scan.lines, 12u);
  EXPECT_EQ(scan.errors, 3u);  // spdlog [error] twice (one coloured), srun once
  EXPECT_EQ(scan.criticals, 1u);
  EXPECT_EQ(scan.aborts, 2u);  // MPI_ABORT and "Signal: Aborted"
  EXPECT_EQ(scan.total(), 6u);
  ASSERT_EQ(scan.first.size(), 5u);
  EXPECT_EQ(scan.first[0].kind, LogFinding::Kind::kError);
  EXPECT_EQ(scan.first[0].line, 2u);
  EXPECT_EQ(scan.first[0].text,
            "[2026-11-30 06:17:16.123] [rank 3] [error] rank 3: shard 7 is truncated");
  EXPECT_EQ(scan.first[1].kind, LogFinding::Kind::kCritical);
  EXPECT_EQ(scan.first[1].line, 5u);
  EXPECT_EQ(scan.first[2].kind, LogFinding::Kind::kAbort);
  EXPECT_EQ(scan.first[2].line, 7u);
  EXPECT_EQ(kind_name(scan.first[4].kind), "error");
  EXPECT_EQ(scan.first[4].text, "srun: error: node1: task 3: Exited with exit code 2");

  const LogScan few = scan_log(log, 2);
  EXPECT_EQ(few.first.size(), 2u);
  EXPECT_EQ(few.total(), 6u);
}

TEST(LogScan, ColouredLinesAreCleanedAndLongLinesCut) {
  const fs::path dir = test::scratch_dir();
  const fs::path log =
      test::write_file(dir / "rank-00001.log",
                       "\x1b[31m[06:17:18.000] [rank 1/8] [\x1b[1merror\x1b[m] coloured\n" +
                           ("[06:17:18.000] [rank 1/8] [critical] " + std::string(400, 'x')));
  const LogScan scan = scan_log(log);
  ASSERT_EQ(scan.first.size(), 2u);
  EXPECT_EQ(scan.first[0].text, "[06:17:18.000] [rank 1/8] [error] coloured");
  EXPECT_EQ(scan.first[1].text.size(), 303u);
  EXPECT_TRUE(scan.first[1].text.ends_with("x..."));
}

TEST(LogScan, SeveralFilesAndCleanLogs) {
  const fs::path dir = test::scratch_dir();
  const fs::path clean = test::write_file(dir / "a.log", "[06:00:00.000] [rank 0/1] [info] ok\n");
  const fs::path bad = test::write_file(dir / "b.log", "[06:00:00.000] [k3] [error] no\n");
  const std::vector<fs::path> paths = {clean, bad};
  const auto scans = scan_logs(paths);
  ASSERT_EQ(scans.size(), 2u);
  EXPECT_EQ(scans[0].total(), 0u);
  EXPECT_TRUE(scans[0].first.empty());
  EXPECT_EQ(scans[1].errors, 1u);
  EXPECT_EQ(count_log_errors(scans), 1u);
  const fs::path missing = dir / "c.log";
  EXPECT_EQ(test::error_of([&] { scan_log(missing); }),
            "cannot open " + missing.string() + " (log): No such file or directory");
}

}  // namespace
}  // namespace k3::eval
