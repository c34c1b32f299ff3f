// Where model tests find the source tree, write their scratch files (the build tree), and find
// the synthetic checkpoints of the ctest fixture synth_tiny (tests/model/CMakeLists.txt).
#pragma once

#include <filesystem>
#include <string>

#include "model/checkpoint/format.h"
#include "model/synth/synth.h"

namespace k3::test {

inline std::filesystem::path source_dir() { return K3_SOURCE_DIR; }
inline std::filesystem::path scratch_dir() {
  std::filesystem::path p = std::filesystem::path(K3_BINARY_DIR) / "scratch";
  std::filesystem::create_directories(p);
  return p;
}

// The fixture's tiny checkpoint in `kind` (k3ckpt synth --shards 3 into the build tree), made
// here the same way when a test binary runs on its own.
inline std::filesystem::path synthetic_checkpoint(model::FormatKind kind) {
  const std::filesystem::path dir = scratch_dir() / ("tiny-" + std::string(model::format_name(kind)));
  // GGUF keeps its config inside the first split; the others have config.json.
  const std::filesystem::path marker = kind == model::FormatKind::kGguf
                                           ? dir / "kimi-k3-tiny-00001-of-00003.gguf"
                                           : dir / "config.json";
  if (!std::filesystem::exists(marker)) {
    model::SynthOptions o;
    o.format = kind;
    o.out = dir;
    o.shards = 3;
    o.corpus = source_dir() / ".." / "shared" / "data" / "gsm8k" / "train.jsonl";
    model::synthesize_checkpoint(o);
  }
  return dir;
}

}  // namespace k3::test
