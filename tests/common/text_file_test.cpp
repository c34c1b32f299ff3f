#include "common/text_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/error.h"

namespace k3 {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("k3_text_file_test." + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

TEST(TextFile, LinesKeepNumbersOffsetsAndACutLastLine) {
  const auto lines = split_lines("a\n\nbc\r\nd");
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[2].number, 3u);
  EXPECT_EQ(lines[2].offset, 3u);
  EXPECT_EQ(lines[2].text, "bc\r");
  EXPECT_TRUE(lines[2].terminated);
  EXPECT_FALSE(lines[3].terminated);
  EXPECT_EQ(split_lines("x\n").size(), 1u);
  EXPECT_EQ(end_of_content(split_lines("x\n \n\r\n")), 1u);
}

TEST(TextFile, AtomicWriteReplacesAndLeavesNoTemporary) {
  const fs::path p = scratch("atomic.txt");
  write_file_atomically(p, "first\n");
  write_file_atomically(p, "second\n");
  EXPECT_EQ(read_text_file(p, "test file"), "second\n");
  for (const auto& entry : fs::directory_iterator(p.parent_path())) {
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  }
  fs::remove_all(p.parent_path());
}

TEST(TextFile, ErrorsNameTheFile) {
  const fs::path missing = scratch("missing.txt");
  try {
    read_text_file(missing, "the thing");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(missing.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("the thing"), std::string::npos) << e.what();
  }
  // A temporary that cannot be committed is removed, and the error names it.
  const fs::path tmp = temporary_beside(scratch("target.txt"));
  write_file_atomically(tmp, "x");
  try {
    commit_file(tmp, scratch("no-such-dir") / "target.txt");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(tmp.string()), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(tmp));
  fs::remove_all(missing.parent_path());
}

}  // namespace
}  // namespace k3
