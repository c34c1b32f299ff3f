// eval per-question results: one JSON line per finished question, appended and synced as soon
// as the question finishes, so a run that dies keeps everything it computed, and --resume
// reads them back and skips those questions.
//
// A line looks like (one line in the file):
//   {"id":3,"dp_group":1,"prompt_tokens":812,"output_text":" He sprints ...\n#### 540\n\n",
//    "prediction":"540","label":"540","correct":true,"invalid":false,"completion_tokens":41,
//    "finish_reason":"stop_token","latency_s":2.5,"token_ids":[1734,...]}
//
// completion_tokens counts as SGLang does: every generated token, a final stop token (EOS)
// included. token_ids lists the completion's tokens without that stop token, so
// completion_tokens = len(token_ids) + 1 when finish_reason is "stop_token", and len(token_ids)
// when it is "length" (max new tokens) or "stop_string" (a stop string ended the text).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/fd.h"
#include "common/wire.h"

namespace k3::eval {

struct QuestionResult {
  std::size_t id = 0;  // index of the question in the data file (SGLang's i)
  int dp_group = 0;    // the DP group that generated it
  std::size_t prompt_tokens = 0;
  std::string output_text;  // the completion, cut before the stop string
  std::string prediction;   // extracted answer (eval/extract.h), maybe kInvalidAnswer
  std::string label;        // extract_sglang(reference answer)
  bool correct = false;     // prediction == label
  bool invalid = false;     // prediction == kInvalidAnswer
  std::size_t completion_tokens = 0;
  // "length", "stop_token" or "stop_string" (model::engine::finish_name); "" in files written
  // before the field existed.
  std::string finish_reason;
  double latency_s = 0;                 // from admission to the last token
  std::vector<std::int32_t> token_ids;  // the completion's tokens (greedy: reproducible)

  bool operator==(const QuestionResult&) const = default;
};

// Fields in the order of the struct. Text that is not valid UTF-8 is written with U+FFFD in
// place of the bad bytes (JSON cannot carry them); token_ids keep the exact completion.
nlohmann::ordered_json to_json(const QuestionResult& result);
// Strict: every field present with its type (finish_reason may be absent), and the counts agree
// (completion_tokens against token_ids and finish_reason); InputError "<where>: ..." naming the
// field.
QuestionResult result_from_json(const nlohmann::json& j, const std::string& where);

// The binary record in which a result travels from its DP group's leader to rank 0 (common/
// wire.h): every field in struct order, text as raw bytes. JSON is only for the files.
void encode(WireWriter& out, const QuestionResult& result);
void decode(WireReader& in, QuestionResult& result);

// What read_results() found in a results file.
struct ResultsFile {
  std::vector<QuestionResult> results;  // in file order
  // Set when the last line was cut short (a run killed mid-write) and dropped: says so with
  // file:line, for the caller to log as a warning.
  std::optional<std::string> warning;
  // Bytes of the file that hold the kept lines; ResultsWriter::resume() cuts the file there.
  std::uint64_t valid_size = 0;
};

// Reads a results file for --resume. A missing file is an empty ResultsFile (nothing done
// yet). Only the last line may be broken, and only if it has no final newline (a write cut
// short); any other bad line, or an id seen twice, is an InputError naming file:line.
ResultsFile read_results(const std::filesystem::path& path);

// Appends one line per result and syncs it to disk (write(2) + fsync(2): nothing is buffered
// in the process, so an abort right after write() returns loses nothing).
class ResultsWriter {
 public:
  // Creates `path` (truncating an existing file).
  static ResultsWriter create(const std::filesystem::path& path);
  // Reopens a file that read_results() returned `read` for: the dropped partial line is cut
  // off and a missing final newline restored, then new lines are appended after the kept ones.
  static ResultsWriter resume(const std::filesystem::path& path, const ResultsFile& read);

  ResultsWriter(ResultsWriter&& other) noexcept = default;
  ResultsWriter& operator=(ResultsWriter&& other) noexcept = default;
  ResultsWriter(const ResultsWriter&) = delete;
  ResultsWriter& operator=(const ResultsWriter&) = delete;

  void write(const QuestionResult& result);
  const std::filesystem::path& path() const { return path_; }

 private:
  ResultsWriter(UniqueFd fd, std::filesystem::path path)
      : fd_(std::move(fd)), path_(std::move(path)) {}
  void write_bytes(std::string_view bytes);
  UniqueFd fd_;
  std::filesystem::path path_;
};

}  // namespace k3::eval
