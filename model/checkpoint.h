// model::Checkpoint: an opened checkpoint, headers only. Detects the format (or takes
// --load-format), reads the config, every shard's header and, for ModelSlim, the quantization
// description; no tensor data is read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
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
  std::unordered_map<std::string, std::string>
      schemes;  // "...weight" -> FLOAT | W8A8 | W8A8_DYNAMIC | W4A8_DYNAMIC
  std::string scheme_of(const std::string& weight_name) const;  // "" when absent
};
ModelSlimDescription parse_modelslim_description(const std::string& text,
                                                 const std::string& source);

// One file's part of the tensor index; for the first file of a GGUF set also its metadata
// (the config and the vocabulary live there).
struct ShardHeader {
  std::vector<TensorEntry> tensors;
  std::optional<GgufFile> gguf;  // metadata only (its tensors are in `tensors`)
};

// A checkpoint is opened in three stages, so that a job can spread the middle one over its
// ranks (model/pipeline.h): discover() reads the small files (format, file list, config.json,
// the ModelSlim description, the index), read_shard_header() one file's header, and
// add_headers() joins the headers into the tensor index and runs every check that spans files.
// open() does all three in this process.
class Checkpoint {
 public:
  // `path` is a checkpoint directory or a .gguf file (the first of a split set is enough).
  static Checkpoint open(const std::filesystem::path& path,
                         std::optional<FormatKind> load_format = std::nullopt);

  static Checkpoint discover(const std::filesystem::path& path,
                             std::optional<FormatKind> load_format = std::nullopt);
  ShardHeader read_shard_header(std::size_t file) const;
  // `headers[i]` is file i's. Throws InputError for a tensor stored twice, an index that
  // disagrees with the headers, or a config the tensors cannot hold.
  void add_headers(std::vector<ShardHeader> headers);

  // What a rank that did not read the headers knows: the planning rank's format, config and
  // files, and no tensor index (its load plan names the bytes it reads).
  static Checkpoint view(std::string root, FormatKind kind, ModelConfig config,
                         std::vector<std::string> files, std::string name_prefix);

  const std::string& root() const { return root_; }
  const Format& format() const { return format_; }
  const ModelConfig& config() const { return config_; }
  const std::vector<std::string>& files() const { return files_; }
  // The index: every stored tensor by name (unordered; sort names where order shows).
  const std::unordered_map<std::string, StoredTensor>& tensors() const { return tensors_; }
  const StoredTensor* find(const std::string& name) const;
  const std::optional<ModelSlimDescription>& modelslim() const { return modelslim_; }
  const std::optional<GgufFile>& gguf() const { return gguf_; }  // the first file's metadata
  std::uint64_t tensor_bytes() const;
  // Prefix of every stored name in safetensors formats ("language_model." in the release).
  const std::string& name_prefix() const { return prefix_; }

 private:
  Checkpoint(Format format) : format_(format) {}
  std::string root_;
  std::uint64_t tensor_bytes_ = 0;
  // model.safetensors.index.json's weight_map (tensor -> file index), checked against the headers.
  std::vector<std::pair<std::string, std::size_t>> weight_map_;
  Format format_;
  ModelConfig config_;
  std::vector<std::string> files_;
  std::unordered_map<std::string, StoredTensor> tensors_;
  std::optional<ModelSlimDescription> modelslim_;
  std::optional<GgufFile> gguf_;
  std::string prefix_;
};

// Which format a path holds, from its files alone.
FormatKind detect_format(const std::filesystem::path& path);

// The files whose headers a checkpoint of `kind` at `path` may hold, found without reading any
// of them: a GGUF split set, or every .safetensors file of the directory, in name order. A
// reader can start on these while discover() reads the index (which may name fewer).
std::vector<std::string> header_files(const std::filesystem::path& path, FormatKind kind);

// The GGUF split-file names of a set: "x-00001-of-00003.gguf" -> all three, in order.
std::vector<std::filesystem::path> gguf_split_files(const std::filesystem::path& any);

// Kimi-K3 config from GGUF metadata (llama.cpp's kimi-k3 keys) and tensor shapes.
ModelConfig config_from_gguf(const GgufFile& first,
                             const std::unordered_map<std::string, StoredTensor>& tensors);

}  // namespace k3::model
