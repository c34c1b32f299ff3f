// The per-question results file: lines written and synced one by one, read back for --resume,
// a last line cut short by a killed run dropped with a warning, anything else refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "eval/results.h"
#include "tests/eval/test_util.h"

namespace k3::eval {
namespace {

namespace fs = std::filesystem;

QuestionResult make(std::size_t id) {
  QuestionResult r;
  r.id = id;
  r.dp_group = static_cast<int>(id % 4);
  r.prompt_tokens = 800 + id;
  r.output_text = " He runs 3*60=180 meters.\n#### " + std::to_string(id) + "\n\n";
  r.prediction = std::to_string(id);
  r.label = "540";
  r.correct = id == 540;
  r.invalid = false;
  r.completion_tokens = 12;
  r.latency_s = 1.25;
  r.token_ids = {1, 2, 3, static_cast<std::int32_t>(id)};
  return r;
}

std::string resume_error(const fs::path& p) {
  const std::string message = test::error_of([&] { read_results(p); });
  return message.rfind(p.string(), 0) == 0 ? message.substr(p.string().size()) : message;
}

TEST(Results, WriteThenReadBack) {
  const fs::path p = test::scratch_dir() / "results.jsonl";
  {
    ResultsWriter w = ResultsWriter::create(p);
    for (std::size_t id : {3, 0, 7}) w.write(make(id));
  }
  const std::string text = test::read_file(p);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);
  EXPECT_TRUE(text.starts_with(R"({"id":3,"dp_group":3,"prompt_tokens":803,"output_text":)"));
  const ResultsFile read = read_results(p);
  EXPECT_FALSE(read.warning);
  ASSERT_EQ(read.results.size(), 3u);
  EXPECT_EQ(read.results[0], make(3));
  EXPECT_EQ(read.results[2], make(7));
  EXPECT_EQ(read.valid_size, text.size());
}

TEST(Results, CompletionTokensAgreeWithTokenIdsAndFinishReason) {
  QuestionResult r = make(1);  // 4 token ids
  r.finish_reason = "stop_token";
  r.completion_tokens = 5;  // the stop token counts, as in SGLang, but is not listed
  EXPECT_EQ(result_from_json(nlohmann::json::parse(to_json(r).dump()), "q:1"), r);
  r.finish_reason = "length";
  r.completion_tokens = 4;
  EXPECT_EQ(result_from_json(nlohmann::json::parse(to_json(r).dump()), "q:1"), r);
  r.completion_tokens = 5;
  EXPECT_EQ(test::error_of([&] {
              result_from_json(nlohmann::json::parse(to_json(r).dump()), "q:1");
            }),
            "q:1: \"completion_tokens\" is 5, but 4 token_ids make 4");
  r.finish_reason = "eos";
  EXPECT_EQ(test::error_of([&] {
              result_from_json(nlohmann::json::parse(to_json(r).dump()), "q:1");
            }),
            "q:1: \"finish_reason\" is \"eos\", expected length, stop_token or stop_string");
  // A line written before the field existed: no check, read as "".
  nlohmann::json old = nlohmann::json::parse(to_json(make(2)).dump());
  old.erase("finish_reason");
  EXPECT_EQ(result_from_json(old, "q:2"), make(2));
}

TEST(Results, BinaryRecordsRoundTripAndAShortOneIsAnError) {
  QuestionResult odd = make(7);
  const char raw[] = "raw \xff bytes\0kept";  // an invalid byte and a NUL travel as they are
  odd.output_text = std::string(raw, sizeof raw - 1);
  odd.finish_reason = "";
  odd.latency_s = 0.1 + 0.2;  // travels bit for bit
  WireWriter out;
  encode(out, make(3));
  encode(out, odd);
  const std::string bytes = out.take();
  WireReader in(bytes);
  QuestionResult a, b;
  decode(in, a);
  decode(in, b);
  EXPECT_TRUE(in.done());
  EXPECT_EQ(a, make(3));
  EXPECT_EQ(b, odd);
  WireReader cut(std::string_view(bytes).substr(0, bytes.size() - 3));
  decode(cut, a);
  EXPECT_THROW(decode(cut, b), InternalError);
}

TEST(Results, MissingFileMeansNothingDoneYet) {
  const ResultsFile read = read_results(test::scratch_dir() / "none.jsonl");
  EXPECT_TRUE(read.results.empty());
  EXPECT_EQ(read.valid_size, 0u);
}

TEST(Results, TruncatedLastLineIsDroppedWithAWarningAndResumeCutsIt) {
  const fs::path p = test::scratch_dir() / "results.jsonl";
  {
    ResultsWriter w = ResultsWriter::create(p);
    w.write(make(0));
    w.write(make(1));
  }
  const std::string whole = test::read_file(p);
  const std::size_t first_line = whole.find('\n') + 1;
  // Killed in the middle of writing the second line.
  test::write_file(p, whole.substr(0, first_line + 40));
  const ResultsFile read = read_results(p);
  ASSERT_EQ(read.results.size(), 1u);
  EXPECT_EQ(read.results[0], make(0));
  ASSERT_TRUE(read.warning);
  EXPECT_EQ(*read.warning, p.string() +
                               ":2: dropped the last line, cut short (40 bytes, no newline) by "
                               "a run that was killed while writing it");
  EXPECT_EQ(read.valid_size, first_line);

  {
    ResultsWriter w = ResultsWriter::resume(p, read);
    w.write(make(1));
  }
  EXPECT_EQ(test::read_file(p), whole);
  EXPECT_EQ(read_results(p).results.size(), 2u);
}

TEST(Results, CompleteLastLineWithoutNewlineIsKeptAndResumeAddsTheNewline) {
  const fs::path p = test::scratch_dir() / "results.jsonl";
  {
    ResultsWriter w = ResultsWriter::create(p);
    w.write(make(0));
  }
  const std::string line = test::read_file(p);
  test::write_file(p, line.substr(0, line.size() - 1));
  const ResultsFile read = read_results(p);
  EXPECT_FALSE(read.warning);
  ASSERT_EQ(read.results.size(), 1u);
  {
    ResultsWriter w = ResultsWriter::resume(p, read);
    w.write(make(1));
  }
  EXPECT_EQ(read_results(p).results.size(), 2u);
}

TEST(Results, CorruptMiddleLineIsAnErrorNamingTheLine) {
  const fs::path p = test::scratch_dir() / "results.jsonl";
  const std::string good = to_json(make(0)).dump() + "\n";
  test::write_file(p, good + "{\"id\": 1, \"dp_gr\n" + to_json(make(2)).dump() + "\n");
  EXPECT_EQ(resume_error(p),
            ":2: invalid JSON at column 17: syntax error while parsing object key - invalid "
            "string: missing closing quote; last read: '\"dp_gr'; expected string literal; "
            "expected one result object per line (only a last line cut short by a killed run "
            "is tolerated)");
  // A broken last line that does end in a newline was not cut short by a kill either.
  test::write_file(p, good + "{\"id\": 1,\n");
  EXPECT_EQ(resume_error(p),
            ":2: invalid JSON at column 10: syntax error while parsing object key - unexpected "
            "end of input; expected string literal; expected one result object per line (only "
            "a last line cut short by a killed run is tolerated)");
}

TEST(Results, DuplicateIdsAndBadFieldsAreErrors) {
  const fs::path p = test::scratch_dir() / "results.jsonl";
  const std::string a = to_json(make(4)).dump() + "\n";
  test::write_file(p, a + to_json(make(5)).dump() + "\n" + a);
  EXPECT_EQ(resume_error(p), ":3: duplicate id 4 (already on line 1)");

  nlohmann::ordered_json j = to_json(make(1));
  j.erase("label");
  test::write_file(p, j.dump() + "\n");
  EXPECT_EQ(resume_error(p), ":1: missing \"label\"");
  j = to_json(make(1));
  j["token_ids"][1] = -5;
  test::write_file(p, j.dump() + "\n");
  EXPECT_EQ(resume_error(p), ":1: \"token_ids\"[1] is -5, expected a token id (0 .. 2^31-1)");
  j = to_json(make(1));
  j["correct"] = "yes";
  test::write_file(p, j.dump() + "\n");
  EXPECT_EQ(resume_error(p), ":1: \"correct\" is \"yes\", expected true or false");
  test::write_file(p, "[]\n");
  EXPECT_EQ(resume_error(p), ":1: found an array; expected one result object per line");
}

TEST(Results, InvalidUtf8TextIsWrittenWithReplacementCharacters) {
  const fs::path p = test::scratch_dir() / "results.jsonl";
  QuestionResult r = make(0);
  r.output_text = "ok \xff\xfe end";
  {
    ResultsWriter w = ResultsWriter::create(p);
    w.write(r);
  }
  const ResultsFile read = read_results(p);
  ASSERT_EQ(read.results.size(), 1u);
  EXPECT_EQ(read.results[0].output_text, "ok \xef\xbf\xbd\xef\xbf\xbd end");
  EXPECT_EQ(read.results[0].token_ids, r.token_ids);
}

}  // namespace
}  // namespace k3::eval
