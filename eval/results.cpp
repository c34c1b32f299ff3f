#include "eval/results.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "common/error.h"
#include "common/json.h"
#include "common/text_file.h"

namespace k3::eval {

using nlohmann::json;

namespace {

constexpr const char* kResultsShape = "expected one result object per line";

const json& field(const json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) throw InputError(where + ": missing \"" + key + "\"");
  return *it;
}

[[noreturn]] void wrong_type(const json& value, const char* key, const char* expected,
                             const std::string& where) {
  throw InputError(where + ": \"" + key + "\" is " +
                   value.dump(-1, ' ', false, json::error_handler_t::replace) + ", expected " +
                   expected);
}

std::uint64_t unsigned_field(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_number_unsigned()) wrong_type(v, key, "an unsigned integer", where);
  return v.get<std::uint64_t>();
}

std::string string_field(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_string()) wrong_type(v, key, "a string", where);
  return v.get<std::string>();
}

bool bool_field(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_boolean()) wrong_type(v, key, "true or false", where);
  return v.get<bool>();
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

nlohmann::ordered_json to_json(const QuestionResult& r) {
  nlohmann::ordered_json j{{"id", r.id},
                           {"dp_group", r.dp_group},
                           {"prompt_tokens", r.prompt_tokens},
                           {"output_text", r.output_text},
                           {"prediction", r.prediction},
                           {"label", r.label},
                           {"correct", r.correct},
                           {"invalid", r.invalid},
                           {"completion_tokens", r.completion_tokens}};
  if (!r.finish_reason.empty()) j["finish_reason"] = r.finish_reason;  // unknown: no field
  j["latency_s"] = r.latency_s;
  j["token_ids"] = r.token_ids;
  return j;
}

QuestionResult result_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) {
    throw InputError(where + ": found " + a_json_type(j) + "; " + kResultsShape);
  }
  QuestionResult r;
  r.id = unsigned_field(j, "id", where);
  const json& dp = field(j, "dp_group", where);
  if (!dp.is_number_unsigned() || dp.get<std::uint64_t>() > std::numeric_limits<int>::max()) {
    wrong_type(dp, "dp_group", "a DP group index", where);
  }
  r.dp_group = dp.get<int>();
  r.prompt_tokens = unsigned_field(j, "prompt_tokens", where);
  r.output_text = string_field(j, "output_text", where);
  r.prediction = string_field(j, "prediction", where);
  r.label = string_field(j, "label", where);
  r.correct = bool_field(j, "correct", where);
  r.invalid = bool_field(j, "invalid", where);
  r.completion_tokens = unsigned_field(j, "completion_tokens", where);
  const json& latency = field(j, "latency_s", where);
  if (!latency.is_number() || latency.get<double>() < 0) {
    wrong_type(latency, "latency_s", "a number of seconds >= 0", where);
  }
  r.latency_s = latency.get<double>();
  const json& ids = field(j, "token_ids", where);
  if (!ids.is_array()) wrong_type(ids, "token_ids", "an array of token ids", where);
  r.token_ids.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const json& t = ids[i];
    if (!t.is_number_integer() || t.get<std::int64_t>() < 0 ||
        t.get<std::int64_t>() > std::numeric_limits<std::int32_t>::max()) {
      throw InputError(where + ": \"token_ids\"[" + std::to_string(i) + "] is " + t.dump() +
                       ", expected a token id (0 .. 2^31-1)");
    }
    r.token_ids.push_back(t.get<std::int32_t>());
  }
  if (j.contains("finish_reason")) {
    r.finish_reason = string_field(j, "finish_reason", where);
    const bool stop_token = r.finish_reason == "stop_token";
    if (!stop_token && r.finish_reason != "length" && r.finish_reason != "stop_string") {
      throw InputError(where + ": \"finish_reason\" is \"" + r.finish_reason +
                       "\", expected length, stop_token or stop_string");
    }
    const std::size_t expected = r.token_ids.size() + (stop_token ? 1 : 0);
    if (r.completion_tokens != expected) {
      throw InputError(where + ": \"completion_tokens\" is " +
                       std::to_string(r.completion_tokens) + ", but " +
                       std::to_string(r.token_ids.size()) + " token_ids" +
                       (stop_token ? " and a stop token" : "") + " make " +
                       std::to_string(expected));
    }
  }
  return r;
}

ResultsFile read_results(const std::filesystem::path& path) {
  ResultsFile out;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return out;
  const std::string text = read_text_file(path, "results");
  const std::vector<TextLine> lines = split_lines(text);
  const std::size_t end = end_of_content(lines);
  std::unordered_map<std::size_t, std::size_t> line_of_id;
  for (std::size_t i = 0; i < end; ++i) {
    const TextLine& line = lines[i];
    const std::string where = path.string() + ":" + std::to_string(line.number);
    const bool cut_short = i + 1 == end && !line.terminated;
    json j;
    try {
      if (is_blank(line.text)) throw InputError(where + ": empty line; " + kResultsShape);
      j = parse_json(line.text, {where, kResultsShape, true});
    } catch (const InputError& e) {
      if (!cut_short) {
        throw InputError(std::string(e.what()) +
                         " (only a last line cut short by a killed run is tolerated)");
      }
      out.warning = where + ": dropped the last line, cut short (" +
                    std::to_string(line.text.size()) +
                    " bytes, no newline) by a run that was killed while writing it";
      break;
    }
    QuestionResult r = interpret_json(where, [&] { return result_from_json(j, where); });
    const auto [it, inserted] = line_of_id.emplace(r.id, line.number);
    if (!inserted) {
      throw InputError(where + ": duplicate id " + std::to_string(r.id) + " (already on line " +
                       std::to_string(it->second) + ")");
    }
    out.results.push_back(std::move(r));
    out.valid_size = line.offset + line.text.size() + (line.terminated ? 1 : 0);
  }
  return out;
}

void encode(WireWriter& out, const QuestionResult& r) {
  out.put(static_cast<std::uint64_t>(r.id));
  out.put(static_cast<std::int32_t>(r.dp_group));
  out.put(static_cast<std::uint64_t>(r.prompt_tokens));
  out.put(r.output_text);
  out.put(r.prediction);
  out.put(r.label);
  out.put(static_cast<std::uint8_t>(r.correct));
  out.put(static_cast<std::uint8_t>(r.invalid));
  out.put(static_cast<std::uint64_t>(r.completion_tokens));
  out.put(r.finish_reason);
  out.put(r.latency_s);
  out.put(r.token_ids);
}

void decode(WireReader& in, QuestionResult& r) {
  r.id = static_cast<std::size_t>(in.get<std::uint64_t>());
  r.dp_group = in.get<std::int32_t>();
  r.prompt_tokens = static_cast<std::size_t>(in.get<std::uint64_t>());
  in.get(r.output_text);
  in.get(r.prediction);
  in.get(r.label);
  r.correct = in.get<std::uint8_t>() != 0;
  r.invalid = in.get<std::uint8_t>() != 0;
  r.completion_tokens = static_cast<std::size_t>(in.get<std::uint64_t>());
  in.get(r.finish_reason);
  in.get(r.latency_s);
  in.get(r.token_ids);
}

ResultsWriter ResultsWriter::create(const std::filesystem::path& path) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644));
  if (!fd) throw InputError("cannot create results file " + path.string() + ": " + errno_text());
  ResultsWriter writer(std::move(fd), path);
  sync_parent_directory(path);
  return writer;
}

ResultsWriter ResultsWriter::resume(const std::filesystem::path& path, const ResultsFile& read) {
  UniqueFd opened(::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!opened) throw InputError("cannot open results file " + path.string() + ": " + errno_text());
  const int fd = opened.get();
  ResultsWriter writer(std::move(opened), path);
  if (::ftruncate(fd, static_cast<off_t>(read.valid_size)) != 0) {
    throw InputError("cannot cut " + path.string() + " to " + std::to_string(read.valid_size) +
                     " bytes: " + errno_text());
  }
  if (read.valid_size > 0) {
    char last = 0;
    if (::pread(fd, &last, 1, static_cast<off_t>(read.valid_size - 1)) != 1) {
      throw InputError("cannot read " + path.string() + ": " + errno_text());
    }
    if (last != '\n') writer.write_bytes("\n");
  }
  if (::fsync(fd) != 0) throw InputError("cannot sync " + path.string() + ": " + errno_text());
  return writer;
}

void ResultsWriter::write_bytes(std::string_view bytes) {
  write_all(fd_.get(), bytes, "results file " + path_.string());
}

void ResultsWriter::write(const QuestionResult& result) {
  // One write(2) per line where possible, so a line from a killed run is cut at most once.
  write_bytes(to_json(result).dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
  if (::fsync(fd_.get()) != 0) {
    throw InputError("cannot sync results file " + path_.string() + ": " + errno_text());
  }
}

}  // namespace k3::eval
