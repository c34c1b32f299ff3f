// Shared by the eval tests: the GSM8K test split, a scratch directory per test in the build tree,
// small files written there, and the message of the k3::Error a call throws.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "eval/dataset.h"

namespace k3::eval::test {

inline std::filesystem::path gsm8k_dir() { return K3_GSM8K_DIR; }

// The GSM8K test split of ../shared, read once per test binary.
inline const std::vector<Question>& gsm8k_test_set() {
  static const std::vector<Question> data = read_gsm8k(gsm8k_dir() / "test.jsonl");
  return data;
}

// build/tests/eval/scratch/<suite>.<test>, emptied first: tests may run in parallel.
inline std::filesystem::path scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path dir = std::filesystem::path(K3_BINARY_DIR) / "scratch" /
                                    (std::string(info->test_suite_name()) + "." + info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::filesystem::path write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The message of the k3::Error `f` throws (with its exit code checked), or "no error".
inline std::string error_of(const std::function<void()>& f, ExitCode code = ExitCode::kInput) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.exit_code()), static_cast<int>(code)) << e.what();
    return e.what();
  }
  return "no error";
}

}  // namespace k3::eval::test
