// Where model tests find the source tree and write their scratch checkpoints (the build tree).
#pragma once

#include <filesystem>

namespace k3::test {

inline std::filesystem::path source_dir() { return K3_SOURCE_DIR; }
inline std::filesystem::path scratch_dir() {
  std::filesystem::path p = std::filesystem::path(K3_BINARY_DIR) / "scratch";
  std::filesystem::create_directories(p);
  return p;
}

}  // namespace k3::test
