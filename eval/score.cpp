#include "eval/score.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/json.h"
#include "eval/prompt.h"
#include "common/text_file.h"

namespace k3::eval {

using nlohmann::json;

namespace {

constexpr const char* kExpectedRow =
    "expected one object per line with \"index\" (or \"id\", \"prompt_id\") and \"output\" (or "
    "\"output_text\")";

const std::string kDumpRule(80, '=');

std::string dump_header(std::size_t i) {
  return std::string(40, '=') + " " + std::to_string(i) + " " + std::string(40, '=') + "\n";
}

std::size_t line_at(std::string_view text, std::size_t offset) {
  return 1 + static_cast<std::size_t>(std::count(text.begin(), text.begin() + offset, '\n'));
}

// The one key of `names` present in `row`; InputError if none or several.
const char* one_of(const json& row, std::initializer_list<const char*> names,
                   const std::string& where) {
  const char* found = nullptr;
  for (const char* name : names) {
    if (!row.contains(name)) continue;
    if (found != nullptr) {
      throw InputError(where + ": has both \"" + found + "\" and \"" + name +
                       "\"; expected only one");
    }
    found = name;
  }
  if (found == nullptr) throw InputError(where + ": " + kExpectedRow);
  return found;
}

void check_index(std::size_t index, std::size_t count, const std::string& where) {
  if (index >= count) {
    throw InputError(where + ": index " + std::to_string(index) +
                     " is out of range: the data has " + std::to_string(count) + " questions (0.." +
                     std::to_string(count - 1) + ")");
  }
}

QuestionResult make_result(std::span<const Question> questions, std::size_t index,
                           std::string output, Extractor extractor) {
  QuestionResult r;
  r.id = index;
  r.output_text = std::move(output);
  r.label = extract_sglang(questions[index].answer);
  grade(r, extractor);
  return r;
}

std::vector<QuestionResult> read_jsonl(std::span<const Question> questions, std::string_view text,
                                       const std::string& file, Extractor extractor) {
  const std::vector<TextLine> lines = split_lines(text);
  const std::size_t end = end_of_content(lines);
  std::map<std::size_t, std::size_t> line_of;
  std::vector<QuestionResult> out;
  for (std::size_t i = 0; i < end; ++i) {
    const std::string where = file + ":" + std::to_string(lines[i].number);
    if (is_blank(lines[i].text)) throw InputError(where + ": empty line; " + kExpectedRow);
    read_json(lines[i].text, {where, kExpectedRow, true}, [&](const json& row) {
      if (!row.is_object()) {
        throw InputError(where + ": found " + a_json_type(row) + "; " + kExpectedRow);
      }
      const char* index_key = one_of(row, {"index", "id", "prompt_id"}, where);
      const json& index_value = row[index_key];
      if (!index_value.is_number_unsigned()) {
        throw InputError(where + ": \"" + index_key + "\" is " + index_value.dump() +
                         ", expected a question index (an unsigned integer)");
      }
      const std::size_t index = index_value.get<std::size_t>();
      check_index(index, questions.size(), where);
      if (const auto [it, inserted] = line_of.emplace(index, lines[i].number); !inserted) {
        throw InputError(where + ": duplicate index " + std::to_string(index) +
                         " (already on line " + std::to_string(it->second) + ")");
      }
      const char* output_key = one_of(row, {"output", "output_text"}, where);
      const json& output = row[output_key];
      if (!output.is_string()) {
        throw InputError(where + ": \"" + output_key + "\" is " + a_json_type(output) +
                         ", expected a string");
      }
      if (const auto prompt = row.find("prompt"); prompt != row.end()) {
        if (!prompt->is_string() || !prompt->get_ref<const std::string&>().ends_with(
                                        format_example(questions[index], false))) {
          throw InputError(where + ": \"prompt\" does not end with question " +
                           std::to_string(index) +
                           " of the data (\"Question: ...\\nAnswer:\"); the " +
                           "completions were made from other data");
        }
      }
      out.push_back(make_result(questions, index, output.get<std::string>(), extractor));
    });
  }
  if (out.empty()) throw InputError(file + ": no completions; " + kExpectedRow);
  return out;
}

std::vector<QuestionResult> read_sglang_dump(std::span<const Question> questions,
                                             std::string_view text, const std::string& file,
                                             Extractor extractor) {
  const std::string footer = "\n" + kDumpRule + "\n\n";
  std::vector<QuestionResult> out;
  std::size_t pos = 0;
  for (std::size_t i = 0; pos < text.size(); ++i) {
    const std::string where = file + ":" + std::to_string(line_at(text, pos));
    const std::string header = dump_header(i);
    if (text.substr(pos, header.size()) != header) {
      throw InputError(where + ": expected the header of state " + std::to_string(i) + " (" +
                       header.substr(0, header.size() - 1) + ") of a dump_state_text file");
    }
    check_index(i, questions.size(), where);
    const std::size_t begin = pos + header.size();
    std::size_t end = text.find(footer + dump_header(i + 1), begin);
    if (end != std::string_view::npos) {
      pos = end + footer.size();
    } else if (const std::size_t other = text.find(footer + std::string(40, '=') + " ", begin);
               other != std::string_view::npos) {
      // Another state follows, but not i + 1.
      throw InputError(file + ":" + std::to_string(line_at(text, other + footer.size())) +
                       ": expected the header of state " + std::to_string(i + 1) + " (" +
                       dump_header(i + 1).substr(0, dump_header(i + 1).size() - 1) +
                       ") of a dump_state_text file");
    } else if (text.size() >= begin + footer.size() && text.ends_with(footer)) {
      end = text.size() - footer.size();
      pos = text.size();
    } else {
      throw InputError(where + ": state " + std::to_string(i) +
                       " is not closed by a line of 80 '=' and a blank line (truncated dump?)");
    }
    const std::string_view state = text.substr(begin, end - begin);
    const std::string asked = format_example(questions[i], false);
    const std::size_t at = state.rfind(asked);
    if (at == std::string_view::npos) {
      throw InputError(where + ": state " + std::to_string(i) + " does not contain question " +
                       std::to_string(i) + " of the data (\"Question: ...\\nAnswer:\"); the " +
                       "dump was made from other data");
    }
    out.push_back(
        make_result(questions, i, std::string(state.substr(at + asked.size())), extractor));
  }
  if (out.empty()) throw InputError(file + ": no states in the dump");
  return out;
}

}  // namespace

void grade(QuestionResult& result, Extractor extractor) {
  result.prediction = extract_answer(result.output_text, extractor);
  result.invalid = is_invalid(result.prediction);
  result.correct = result.prediction == result.label;
}

ScoreReport score_completions(std::span<const Question> questions,
                              const std::filesystem::path& completions, Extractor extractor) {
  const std::string file = completions.string();
  const std::string text = read_text_file(completions, "completions");
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  ScoreReport report;
  if (first != std::string::npos && text[first] == '{') {
    report.format = "jsonl";
    report.results = read_jsonl(questions, text, file, extractor);
  } else if (text.starts_with(std::string(40, '=') + " ")) {
    report.format = "sglang-dump";
    report.results = read_sglang_dump(questions, text, file, extractor);
  } else {
    throw InputError(file + ": neither JSONL completions ({\"index\": i, \"output\": text} per " +
                     "line) nor an SGLang dump_state_text file (tmp_output_gsm8k.txt)");
  }
  report.metrics = compute_metrics(report.results, 0.0);
  return report;
}

}  // namespace k3::eval
