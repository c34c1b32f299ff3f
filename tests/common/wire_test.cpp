// common/wire.h: what one rank writes, another reads back exactly; a short record is an error.
#include "common/wire.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace k3 {
namespace {

enum class Colour : std::uint8_t { kRed = 3, kBlue = 7 };

TEST(Wire, ValuesRoundTrip) {
  WireWriter out;
  out.put(std::int32_t{-5});
  out.put(std::uint64_t{1} << 63);
  out.put(2.5);
  out.put(Colour::kBlue);
  out.put(std::string("layers.3.kv_b_proj"));
  out.put(std::vector<std::int64_t>{7168, -1, 0});
  out.put(std::vector<std::string>{"a", "", "ccc"});
  out.put(std::optional<Colour>{});
  out.put(std::optional<Colour>{Colour::kRed});
  const std::string bytes = out.take();

  WireReader in(bytes);
  EXPECT_EQ(in.get<std::int32_t>(), -5);
  EXPECT_EQ(in.get<std::uint64_t>(), std::uint64_t{1} << 63);
  EXPECT_EQ(in.get<double>(), 2.5);
  EXPECT_EQ(in.get<Colour>(), Colour::kBlue);
  EXPECT_EQ(in.get<std::string>(), "layers.3.kv_b_proj");
  EXPECT_EQ(in.get<std::vector<std::int64_t>>(), (std::vector<std::int64_t>{7168, -1, 0}));
  EXPECT_EQ(in.get<std::vector<std::string>>(), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_FALSE(in.get<std::optional<Colour>>().has_value());
  EXPECT_EQ(in.get<std::optional<Colour>>(), Colour::kRed);
  EXPECT_TRUE(in.done());
}

TEST(Wire, ShortOrLyingRecordsAreInternalErrors) {
  WireWriter out;
  out.put(std::string("twelve bytes"));
  const std::string bytes = out.take();
  WireReader cut(std::string_view(bytes).substr(0, bytes.size() - 1));
  EXPECT_THROW(cut.get<std::string>(), InternalError);
  // A length far beyond the record is refused before anything is allocated for it.
  WireWriter lying;
  lying.put(std::uint64_t{1} << 60);
  const std::string lie = lying.take();
  WireReader in(lie);
  EXPECT_THROW(in.get<std::vector<std::int64_t>>(), InternalError);
}

}  // namespace
}  // namespace k3
