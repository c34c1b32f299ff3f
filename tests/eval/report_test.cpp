// Reports: the status word, the summary JSON, and the HDF5 history (two runs appended and read
// back, dumped by h5dump, speculative decoding's optional fields, and files that are not
// histories refused by name).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "eval/history_file.h"
#include "eval/report.h"
#include "tests/eval/test_util.h"

namespace k3::eval {
namespace {

namespace fs = std::filesystem;

QuestionResult make(std::size_t id, bool correct) {
  QuestionResult r;
  r.id = id;
  r.dp_group = static_cast<int>(id % 2);
  r.prompt_tokens = 700 + id;
  r.output_text = " 2+2=<<2+2=4>>4\n#### " + std::string(correct ? "4" : "5") + "\n\n";
  r.prediction = correct ? "4" : "5";
  r.label = "4";
  r.correct = correct;
  r.invalid = false;
  r.completion_tokens = 9 + id;
  r.latency_s = 0.5 * static_cast<double>(id + 1);
  r.token_ids.assign(3 + id, static_cast<std::int32_t>(100 + id));
  return r;
}

RunRecord run(const std::string& checkpoint, std::size_t n) {
  RunRecord rec;
  rec.timestamp = "2026-11-30T06:17:16Z";
  rec.version = "0.1.0";
  rec.checkpoint = checkpoint;
  rec.config_name = "nightly-tiny";
  rec.layout = "tp8 dp2 ep8 dp-attention dp-lm-head";
  rec.extractor = "sglang";
  rec.verdict = "ok";
  rec.num_shots = 5;
  rec.num_questions = n;
  for (std::size_t i = 0; i < n; ++i) rec.results.push_back(make(i, i % 3 != 0));
  rec.completion_tokens = 123;
  rec.accuracy = 0.5;
  rec.invalid = 0.0;
  rec.latency_s = 3.25;
  rec.output_throughput = 37.8;
  rec.baseline_accuracy = 0.6;
  rec.threshold = 0.594;
  return rec;
}

// h5dump from PATH. CI installs hdf5-tools, so a missing h5dump fails the test.
fs::path find_h5dump() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const fs::path candidate = fs::path(dirs.substr(start, end - start)) / "h5dump";
    if (end > start && fs::exists(candidate)) return candidate;
    start = end + 1;
  }
  return {};
}

TEST(Status, OneWordFile) {
  const fs::path dir = test::scratch_dir();
  write_status(dir / "status", RunStatus::kRegression);
  EXPECT_EQ(test::read_file(dir / "status"), "regression\n");
  write_status(dir / "status", RunStatus::kOk);
  EXPECT_EQ(test::read_file(dir / "status"), "ok\n");
  EXPECT_EQ(status_word(RunStatus::kError), "error");
  EXPECT_EQ(status_of(std::nullopt), RunStatus::kOk);
  Verdict failed;
  failed.pass = false;
  EXPECT_EQ(status_of(failed), RunStatus::kRegression);
}

TEST(Summary, MetricsVerdictLogsAndConfig) {
  std::vector<QuestionResult> rs = {make(0, true), make(1, false)};
  const Metrics m = compute_metrics(rs, 2.0);
  Verdict v;
  v.pass = false;
  v.accuracy = 0.5;
  v.baseline_accuracy = 0.9;
  v.threshold = 0.891;
  v.reasons = {"accuracy 0.5000 is below the threshold 0.8910"};
  v.golden_mismatches = {GoldenMismatch{1, 2, 4, 4}};
  const nlohmann::json config = {{"num_shots", 5}, {"model_path", "/ckpt"}};
  const nlohmann::json s = summary_json(m, v, 3, config);
  EXPECT_EQ(s["status"], "regression");
  EXPECT_EQ(s["metrics"]["accuracy"], 0.5);
  EXPECT_EQ(s["metrics"]["questions"], 2);
  EXPECT_EQ(s["metrics"]["completion_tokens"], 19);
  EXPECT_EQ(s["metrics"]["output_throughput"], 9.5);
  EXPECT_EQ(s["verdict"]["golden_mismatches"][0]["id"], 1);
  EXPECT_EQ(s["verdict"]["reasons"][0], "accuracy 0.5000 is below the threshold 0.8910");
  EXPECT_EQ(s["log_errors"], 3);
  EXPECT_EQ(s["config"], config);

  const nlohmann::json empty = summary_json(compute_metrics({}, 0), std::nullopt, 0, {});
  EXPECT_TRUE(empty["metrics"]["accuracy"].is_null());  // NaN has no JSON form
  EXPECT_TRUE(empty["verdict"].is_null());
  EXPECT_EQ(empty["status"], "ok");

  const fs::path p = test::scratch_dir() / "summary.json";
  write_summary(p, s);
  EXPECT_EQ(nlohmann::json::parse(test::read_file(p)), s);
}

TEST(Timestamp, Iso8601Utc) {
  EXPECT_EQ(utc_timestamp(std::chrono::system_clock::from_time_t(1795760236)),
            "2026-11-27T06:17:16Z");
}

TEST(History, AppendTwoRunsAndReadThemBack) {
  const fs::path p = test::scratch_dir() / "history.h5";
  const RunRecord first = run("/ckpt/tiny-hf", 3);
  RunRecord second = run("/ckpt/tiny-gguf", 4);
  second.verdict = "regression";
  second.baseline_accuracy = std::nan("");
  second.threshold = std::nan("");
  second.results[1].output_text = "caf\xc3\xa9 \xe2\x82\xac 12";
  second.results[2].token_ids.clear();
  EXPECT_EQ(append_history(p, first), 0u);
  EXPECT_EQ(append_history(p, second), 1u);

  const std::vector<RunRecord> h = read_history(p);
  ASSERT_EQ(h.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const RunRecord& want = i == 0 ? first : second;
    const RunRecord& got = h[i];
    EXPECT_EQ(got.timestamp, want.timestamp);
    EXPECT_EQ(got.version, want.version);
    EXPECT_EQ(got.checkpoint, want.checkpoint);
    EXPECT_EQ(got.config_name, want.config_name);
    EXPECT_EQ(got.layout, want.layout);
    EXPECT_EQ(got.extractor, want.extractor);
    EXPECT_EQ(got.verdict, want.verdict);
    EXPECT_EQ(got.num_shots, want.num_shots);
    EXPECT_EQ(got.num_questions, want.num_questions);
    EXPECT_EQ(got.completion_tokens, want.completion_tokens);
    EXPECT_EQ(got.accuracy, want.accuracy);
    EXPECT_EQ(got.latency_s, want.latency_s);
    EXPECT_EQ(got.output_throughput, want.output_throughput);
    EXPECT_EQ(got.results, want.results);
  }
  EXPECT_EQ(h[0].threshold, 0.594);
  EXPECT_TRUE(std::isnan(h[1].threshold));

  // Readable by the standard tool, metadata and rows included.
  const fs::path h5dump = find_h5dump();
  ASSERT_FALSE(h5dump.empty()) << "h5dump not found on PATH (Debian: apt-get install hdf5-tools)";
  const fs::path out = p.parent_path() / "dump.txt";
  const std::string cmd =
      "'" + h5dump.string() + "' '" + p.string() + "' > '" + out.string() + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << test::read_file(out);
  const std::string dump = test::read_file(out);
  for (const char* needle :
       {"GROUP \"runs\"", "GROUP \"1\"", "ATTRIBUTE \"checkpoint\"", "\"/ckpt/tiny-gguf\"",
        "ATTRIBUTE \"accuracy\"", "DATASET \"questions\"", "H5T_COMPOUND", "\"output_text\"",
        "\"token_ids\"", "\"k3eval-history\""}) {
    EXPECT_NE(dump.find(needle), std::string::npos) << needle << "\n" << dump.substr(0, 2000);
  }
}

TEST(History, ThroughputRunsKeepTheirKindAndOlderHistoriesReadAsEvaluations) {
  const fs::path p = test::scratch_dir() / "history.h5";
  RunRecord t = run("/ckpt/tiny-hf", 0);
  t.kind = "throughput";
  t.num_questions = 8;
  t.input_tokens = 256;
  t.completion_tokens = 48;
  t.accuracy = t.invalid = std::nan("");
  t.baseline_output_throughput = 75;
  t.throughput_threshold = 67.5;
  append_history(p, run("/ckpt/tiny-hf", 2));
  append_history(p, t);
  auto h = read_history(p);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].kind, "eval");
  EXPECT_TRUE(std::isnan(h[0].baseline_output_throughput));
  EXPECT_EQ(h[1].kind, "throughput");
  EXPECT_EQ(h[1].input_tokens, 256u);
  EXPECT_EQ(h[1].completion_tokens, 48u);
  EXPECT_TRUE(std::isnan(h[1].accuracy));
  EXPECT_EQ(h[1].baseline_output_throughput, 75);
  EXPECT_EQ(h[1].throughput_threshold, 67.5);
  // A history written before these attributes existed: its runs are evaluations.
  const hid_t file = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const hid_t g = H5Gopen2(file, "/runs/1", H5P_DEFAULT);
  for (const char* attr :
       {"kind", "input_tokens", "baseline_output_throughput", "throughput_threshold"})
    EXPECT_GE(H5Adelete(g, attr), 0) << attr;
  H5Gclose(g);
  H5Fclose(file);
  h = read_history(p);
  EXPECT_EQ(h[1].kind, "eval");
  EXPECT_EQ(h[1].input_tokens, 0u);
  EXPECT_TRUE(std::isnan(h[1].throughput_threshold));
}

TEST(History, SpeculativeFieldsRoundTripAndOlderRunsReadAsNotRecorded) {
  const fs::path p = test::scratch_dir() / "history.h5";
  RunRecord spec = run("/ckpt/tiny-hf", 2);
  spec.speculative = SpeculativeRun{"dspark", 4, SpeculativeMetrics::of(8, 32, 14), ""};
  append_history(p, run("/ckpt/tiny-hf", 2));  // speculation off
  append_history(p, spec);
  auto h = read_history(p);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].speculative, std::nullopt);
  ASSERT_TRUE(h[1].speculative.has_value());
  EXPECT_EQ(*h[1].speculative, *spec.speculative);
  EXPECT_EQ(h[1].speculative->counts.accept_length(), 2.75);
  EXPECT_EQ(h[1].results, spec.results);

  // The ratios are stored too, for readers of the file (h5dump, h5py); off, nothing is.
  const hid_t file = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const hid_t off = H5Gopen2(file, "/runs/0", H5P_DEFAULT);
  const hid_t on = H5Gopen2(file, "/runs/1", H5P_DEFAULT);
  constexpr const char* kAttributes[] = {
      "speculative_algorithm", "speculative_block_size", "verify_rounds", "drafted_tokens",
      "accepted_drafts",       "accept_length",          "accept_rate"};
  for (const char* attr : kAttributes) {
    EXPECT_EQ(H5Aexists(off, attr), 0) << attr;
    EXPECT_GT(H5Aexists(on, attr), 0) << attr;
  }
  for (const auto& [attr, want] : {std::pair{"accept_length", 2.75}, {"accept_rate", 0.4375}}) {
    double value = 0;
    const hid_t a = H5Aopen(on, attr, H5P_DEFAULT);
    EXPECT_GE(H5Aread(a, H5T_NATIVE_DOUBLE, &value), 0);
    H5Aclose(a);
    EXPECT_EQ(value, want) << attr;
  }
  // A run written before these attributes existed (the same run without them) reads as one
  // without speculation recorded.
  for (const char* attr : kAttributes) EXPECT_GE(H5Adelete(on, attr), 0) << attr;
  H5Gclose(on);
  H5Gclose(off);
  H5Fclose(file);
  h = read_history(p);
  EXPECT_EQ(h[1].speculative, std::nullopt);
  EXPECT_EQ(h[1].accuracy, spec.accuracy);
}

TEST(History, IncompleteOrInconsistentSpeculativeFieldsAreInputErrors) {
  const fs::path dir = test::scratch_dir();
  RunRecord spec = run("/ckpt", 1);
  spec.speculative = SpeculativeRun{"dspark", 4, SpeculativeMetrics::of(8, 32, 14), ""};
  const auto rewrite = [&](const fs::path& p, const char* attr, const std::uint64_t* value) {
    append_history(p, spec);
    const hid_t file = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t g = H5Gopen2(file, "/runs/0", H5P_DEFAULT);
    if (value == nullptr) {
      EXPECT_GE(H5Adelete(g, attr), 0);
    } else {
      const hid_t a = H5Aopen(g, attr, H5P_DEFAULT);
      EXPECT_GE(H5Awrite(a, H5T_NATIVE_UINT64, value), 0);
      H5Aclose(a);
    }
    H5Gclose(g);
    H5Fclose(file);
  };
  const fs::path missing = dir / "missing.h5";
  rewrite(missing, "drafted_tokens", nullptr);
  EXPECT_EQ(test::error_of([&] { read_history(missing); }),
            missing.string() + ": run 0: missing attribute \"drafted_tokens\"");
  const fs::path inconsistent = dir / "inconsistent.h5";
  const std::uint64_t too_many = 33;
  rewrite(inconsistent, "accepted_drafts", &too_many);
  EXPECT_EQ(test::error_of([&] { read_history(inconsistent); }),
            inconsistent.string() + ": run 0: accepted_drafts 33 exceeds drafted_tokens 32");
}

TEST(History, EmptyRunIsStored) {
  const fs::path p = test::scratch_dir() / "history.h5";
  append_history(p, run("/ckpt", 0));
  const auto h = read_history(p);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_TRUE(h[0].results.empty());
}

TEST(History, FilesThatAreNotHistoriesAreInputErrorsNamingThem) {
  const fs::path dir = test::scratch_dir();
  const fs::path text = test::write_file(dir / "notes.h5", "just text\n");
  EXPECT_EQ(test::error_of([&] { read_history(text); }),
            text.string() + ": not an HDF5 file, so not a k3eval history");
  EXPECT_EQ(test::error_of([&] { append_history(text, run("/c", 1)); }),
            text.string() + ": not an HDF5 file, so not a k3eval history");
  EXPECT_EQ(test::read_file(text), "just text\n");  // untouched

  const fs::path missing = dir / "missing.h5";
  EXPECT_EQ(test::error_of([&] { read_history(missing); }),
            missing.string() + ": no such history file");

  // An HDF5 file of something else: make one with h5 history code, then break its format tag.
  const fs::path other = dir / "other.h5";
  append_history(other, run("/c", 1));
  {
    std::string bytes = test::read_file(other);
    const std::size_t at = bytes.find("k3eval-history");
    ASSERT_NE(at, std::string::npos);
    bytes.replace(at, 14, "k3eval-HISTORY");
    test::write_file(other, bytes);
  }
  EXPECT_EQ(test::error_of([&] { read_history(other); }),
            other.string() +
                ": not a k3eval history: its format attribute is \"k3eval-HISTORY\", expected "
                "\"k3eval-history\"");
  EXPECT_TRUE(fs::exists(other));
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

}  // namespace
}  // namespace k3::eval
