// model::Checkpoint: an opened checkpoint, headers only. Detects the format (or takes
// --load-format), reads the config, every shard's header and, for ModelSlim, the quantization
// description; no tensor data is read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/config.h"
#include "model/checkpoint/format.h"
#include "model/checkpoint/gguf.h"
#include "model/checkpoint/packed_names.h"
#include "model/checkpoint/safetensors.h"

namespace k3::model {

struct StoredTensor {
  std::size_t file = 0;  // index into Checkpoint::files()
  TensorEntry entry;
};

// The per-tensor schemes of quant_model_description.json.
enum class ModelSlimScheme : std::uint8_t { kFloat, kW8A8, kW8A8Dynamic, kW4A8Dynamic };
std::string_view scheme_name(ModelSlimScheme scheme);  // "FLOAT", "W8A8", ... as in the file

// quant_model_description.json: a flat map from tensor name to scheme plus a few globals.
struct ModelSlimDescription {
  std::string model_quant_type;  // e.g. "W4A8_DYNAMIC"
  std::string version;           // "1.0.0": the new int4 packing
  int group_size = 0;            // 0: per-channel
  // "...weight" -> ModelSlimScheme, in file order (a repeated name: the last entry counts).
  // Checkpoint::add_headers joins them to the tensors; look schemes up there.
  PackedNames schemes;
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
// ranks (model/load/preflight.h): discover() reads the small files (format, file list, config.json,
// the ModelSlim description, the index), read_shard_header() one file's header, and
// add_headers() joins the headers into the tensor index and runs every check that spans files.
// open() does all three in this process.
class Checkpoint {
 public:
  Checkpoint(Checkpoint&&) = default;
  Checkpoint& operator=(Checkpoint&&) = default;
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

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
  // The index: every stored tensor, in file order, and by name.
  const std::vector<StoredTensor>& tensors() const { return tensors_; }
  const StoredTensor* find(std::string_view name) const;
  // A tensor's place in tensors(): per-tensor flags can live in a plain vector.
  std::size_t ordinal(const StoredTensor& t) const {
    return static_cast<std::size_t>(&t - tensors_.data());
  }
  const std::optional<ModelSlimDescription>& modelslim() const { return modelslim_; }
  // The description's scheme for a weight name, stored or not; nullopt when it has no entry.
  std::optional<ModelSlimScheme> scheme_of(std::string_view weight_name) const;
  std::optional<ModelSlimScheme> scheme_of(const StoredTensor& t) const;
  // The description's entries that name no stored tensor, in name order.
  std::vector<std::pair<std::string, ModelSlimScheme>> schemes_of_absent_tensors() const;
  const std::optional<GgufFile>& gguf() const { return gguf_; }  // the first file's metadata
  std::uint64_t tensor_bytes() const;
  // Prefix of every stored name in safetensors formats ("language_model." in the release).
  const std::string& name_prefix() const { return prefix_; }
  // The format's stored name of a logical parameter: the prefixed logical name, or GGUF's
  // (gguf_names.h).
  std::string stored_name(const std::string& logical) const;
  // Whether a stored tensor that no parameter claimed belongs to the model k3eval loads (so it
  // is unexpected: a problem) rather than to a part it never loads (the release's vision tower:
  // ignored). A GGUF file and a draft hold their model alone.
  bool holds_model_tensor(const std::string& name) const;

 private:
  Checkpoint(Format format) : format_(format) {}
  void join_modelslim_schemes();
  std::string root_;
  std::uint64_t tensor_bytes_ = 0;
  // model.safetensors.index.json's weight_map (tensor -> file index), checked against the headers.
  PackedNames weight_map_;
  Format format_;
  ModelConfig config_;
  std::vector<std::string> files_;
  std::vector<StoredTensor> tensors_;
  // Views of the names in tensors_ (a move keeps the vector's buffer, so they stay valid; a copy
  // of a Checkpoint would not, hence it is move-only).
  std::unordered_map<std::string_view, std::uint32_t> by_name_;
  std::optional<ModelSlimDescription> modelslim_;
  // The description joined to the tensors: scheme code per ordinal (kNoScheme: no entry), and
  // the entries that name no stored tensor.
  static constexpr std::uint8_t kNoScheme = 0xff;
  std::vector<std::uint8_t> scheme_codes_;
  std::unordered_map<std::string, ModelSlimScheme> absent_schemes_;
  std::optional<GgufFile> gguf_;
  std::string prefix_;
};

// Which format a path holds, from its files alone.
FormatKind detect_format(const std::filesystem::path& path);

// The files whose headers a checkpoint of `kind` at `path` may hold, found without reading any
// of them: a GGUF split set, or every .safetensors file of the directory, in name order. A
// reader can start on these while discover() reads the index (which may name fewer).
std::vector<std::string> header_files(const std::filesystem::path& path, FormatKind kind);

// Whether file `f` of header_files() holds the config in its header (a GGUF set's first file,
// whose metadata is the config), so that the planning rank reads that header itself.
bool header_holds_config(FormatKind kind, std::size_t f);

// The GGUF split-file names of a set: "x-00001-of-00003.gguf" -> all three, in order.
std::vector<std::filesystem::path> gguf_split_files(const std::filesystem::path& any);

// Kimi-K3 config from GGUF metadata (llama.cpp's kimi-k3 keys) and tensor shapes.
// `find` looks a stored tensor up by name (null when absent).
ModelConfig config_from_gguf(const GgufFile& first,
                             const std::function<const TensorEntry*(std::string_view)>& find);

}  // namespace k3::model
