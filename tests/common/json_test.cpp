// common/json.h: every nlohmann-json exception a document can provoke becomes one InputError
// that names the file, with the parser's words and no "[json.exception...]" prefix.
#include "common/json.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace k3 {
namespace {

std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(Json, SyntaxErrorsNameTheFileAndPosition) {
  EXPECT_EQ(input_error_of([] { parse_json("{\n  \"a\": ]", {"f.json"}); }),
            "f.json: invalid JSON at line 2, column 8: syntax error while parsing value - "
            "unexpected ']'; expected '[', '{', or a literal");
  EXPECT_EQ(input_error_of([] { parse_json("{\"a\" 1}", {"f.jsonl:3", "expected a row", true}); }),
            "f.jsonl:3: invalid JSON at column 6: syntax error while parsing object separator - "
            "unexpected number literal; expected ':'; expected a row");
}

TEST(Json, NumberTooLargeIsAnInputError) {
  EXPECT_EQ(input_error_of([] { parse_json("{\"group_size\": 1e99999}", {"q.json"}); }),
            "q.json: invalid JSON: number overflow parsing '1e99999'");
  // The input libFuzzer found (the parser meets the number before the stray '~').
  EXPECT_EQ(input_error_of([] {
              parse_json("333126666666626e66633~33133126666666626e6666665", {"q.json", "an object"});
            }),
            "q.json: invalid JSON: number overflow parsing '333126666666626e66633'; an object");
}

TEST(Json, AccessErrorsUnderInterpretAreInputErrors) {
  // type_error from get<>, out_of_range from at(): a reader's unchecked assumption about a file.
  EXPECT_EQ(input_error_of([] {
              read_json("{\"n\": \"seven\"}", {"c.json"},
                        [](const nlohmann::json& j) { return j["n"].get<int>(); });
            }),
            "c.json: type must be number, but is string");
  EXPECT_EQ(input_error_of([] {
              read_json("{}", {"c.json"}, [](const nlohmann::json& j) { return j.at("n").dump(); });
            }),
            "c.json: key 'n' not found");
  EXPECT_EQ(read_json("{\"n\": 7}", {"c.json"},
                      [](const nlohmann::json& j) { return j["n"].get<int>(); }),
            7);
}

TEST(Json, TypeNamesForMessages) {
  EXPECT_EQ(a_json_type(nlohmann::json::parse("{}")), "an object");
  EXPECT_EQ(a_json_type(nlohmann::json::parse("[]")), "an array");
  EXPECT_EQ(a_json_type(nlohmann::json::parse("1")), "a number");
  EXPECT_EQ(a_json_type(nlohmann::json::parse("null")), "null");
}

}  // namespace
}  // namespace k3
