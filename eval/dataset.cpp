#include "eval/dataset.h"

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/json.h"
#include "common/text_file.h"

namespace k3::eval {

namespace {

constexpr const char* kDatasetShape =
    "expected one JSON object per line with string fields \"question\" and \"answer\"";

std::string dataset_string(const nlohmann::json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) throw InputError(where + ": missing \"" + key + "\"; " + kDatasetShape);
  if (!it->is_string()) {
    throw InputError(where + ": \"" + key + "\" is " + a_json_type(*it) + ", expected a string");
  }
  return it->get<std::string>();
}

}  // namespace

std::vector<Question> read_gsm8k(const std::filesystem::path& path) {
  const std::string text = read_text_file(path, "GSM8K data");
  const std::vector<TextLine> lines = split_lines(text);
  const std::size_t end = end_of_content(lines);
  if (end == 0) throw InputError(path.string() + ": empty file; " + kDatasetShape);

  std::vector<Question> out;
  out.reserve(end);
  for (std::size_t i = 0; i < end; ++i) {
    const TextLine& line = lines[i];
    const std::string where = path.string() + ":" + std::to_string(line.number);
    if (is_blank(line.text)) {
      throw InputError(where + ": empty line; " + kDatasetShape +
                       " (blank lines are allowed only at the end)");
    }
    out.push_back(read_json(line.text, {where, kDatasetShape, true}, [&](const nlohmann::json& j) {
      if (!j.is_object()) {
        throw InputError(where + ": found " + a_json_type(j) + "; " + kDatasetShape);
      }
      Question q;
      q.line = line.number;
      q.question = dataset_string(j, "question", where);
      q.answer = dataset_string(j, "answer", where);
      return q;
    }));
  }
  return out;
}

}  // namespace k3::eval
