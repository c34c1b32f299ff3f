// model::Checkpoint: an opened checkpoint, headers only. Detects the format (or takes
// --load-format), reads the config, every shard's header and, for ModelSlim, the quantization
// description; no tensor data is read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/format.h"
#include "model/gguf.h"
#include "model/safetensors.h"

namespace k3::model {

struct StoredTensor {
  std::size_t file = 0;  // index into Checkpoint::files()
  TensorEntry entry;
};

// quant_model_description.json: a flat map from tensor name to scheme plus a few globals.
struct ModelSlimDescription {
  std::string model_quant_type;  // e.g. "W4A8_DYNAMIC"
  std::string version;           // "1.0.0": the new int4 packing
  int group_size = 0;            // 0: per-channel
  std::map<std::string, std::string>
      schemes;  // "...weight" -> FLOAT | W8A8 | W8A8_DYNAMIC | W4A8_DYNAMIC
  std::string scheme_of(const std::string& weight_name) const;  // "" when absent
};
ModelSlimDescription parse_modelslim_description(const std::string& text,
                                                 const std::string& source);

class Checkpoint {
 public:
  // `path` is a checkpoint directory or a .gguf file (the first of a split set is enough).
  static Checkpoint open(const std::filesystem::path& path,
                         std::optional<FormatKind> load_format = std::nullopt);

  const std::string& root() const { return root_; }
  const Format& format() const { return format_; }
  const ModelConfig& config() const { return config_; }
  const std::vector<std::string>& files() const { return files_; }
  const std::map<std::string, StoredTensor>& tensors() const { return tensors_; }
  const StoredTensor* find(const std::string& name) const;
  const std::optional<ModelSlimDescription>& modelslim() const { return modelslim_; }
  const std::optional<GgufFile>& gguf() const { return gguf_; }  // the first file's metadata
  std::uint64_t tensor_bytes() const;
  // Prefix of every stored name in safetensors formats ("language_model." in the release).
  const std::string& name_prefix() const { return prefix_; }

 private:
  Checkpoint(Format format) : format_(format) {}
  std::string root_;
  Format format_;
  ModelConfig config_;
  std::vector<std::string> files_;
  std::map<std::string, StoredTensor> tensors_;
  std::optional<ModelSlimDescription> modelslim_;
  std::optional<GgufFile> gguf_;
  std::string prefix_;
};

// Which format a path holds, from its files alone.
FormatKind detect_format(const std::filesystem::path& path);

// The GGUF split-file names of a set: "x-00001-of-00003.gguf" -> all three, in order.
std::vector<std::filesystem::path> gguf_split_files(const std::filesystem::path& any);

// Kimi-K3 config from GGUF metadata (llama.cpp's kimi-k3 keys) and tensor shapes.
ModelConfig config_from_gguf(const GgufFile& first,
                             const std::map<std::string, StoredTensor>& tensors);

}  // namespace k3::model
