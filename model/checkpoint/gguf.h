// GGUF v3 (llama.cpp's model container): a header reader that checks every count, length, type
// and offset against the file before trusting it, and a writer for the synthetic checkpoints.
// Layout and rules: ggml's GGUF specification (docs/gguf.md in ggml and llama.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "model/checkpoint/safetensors.h"  // TensorEntry

namespace k3::model {

inline constexpr std::uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr std::uint32_t kGgufDefaultAlignment = 32;
inline constexpr std::size_t kGgufMaxTensorName = 63;  // ggml's GGML_MAX_NAME - 1

// A metadata value's on-disk type (ggml's gguf_type).
enum class GgufType : std::uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string_view gguf_type_name(GgufType type);

// One metadata value. Scalars and arrays are held as JSON values; `type` (and `elem` for arrays)
// keep the exact on-disk type, which llama.cpp checks strictly.
struct GgufValue {
  GgufType type = GgufType::kU32;
  GgufType elem = GgufType::kU8;  // arrays only
  nlohmann::json value;
};

struct GgufFile {
  std::string path;
  std::uint32_t version = 3;
  std::uint64_t file_size = 0;
  std::uint32_t alignment = kGgufDefaultAlignment;
  std::uint64_t data_start = 0;
  std::map<std::string, GgufValue> kv;
  std::vector<TensorEntry> tensors;  // shape in row-major order (ggml's ne reversed)

  bool has(const std::string& key) const { return kv.count(key) != 0; }
  // Typed access: a missing key or another on-disk type is an InputError naming file and key.
  const GgufValue& at(const std::string& key) const;
  std::uint32_t u32(const std::string& key) const;
  float f32(const std::string& key) const;
  bool boolean(const std::string& key) const;
  std::string string(const std::string& key) const;
  std::vector<std::string> strings(const std::string& key) const;
  std::vector<std::int64_t> integers(const std::string& key) const;  // any integer array
};

// Reads the header (metadata and tensor infos) only.
GgufFile read_gguf_header(const std::filesystem::path& path);
// The same parser over bytes in memory (the whole file, or at least its header). For fuzzing.
GgufFile parse_gguf_header(std::span<const std::uint8_t> bytes, std::uint64_t file_size,
                           const std::string& source);

class GgufWriter {
 public:
  void set(const std::string& key, GgufValue value);
  void set_u32(const std::string& key, std::uint32_t v);
  void set_i32(const std::string& key, std::int32_t v);
  void set_u16(const std::string& key, std::uint16_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_strings(const std::string& key, const std::vector<std::string>& v);
  void set_i32s(const std::string& key, const std::vector<std::int32_t>& v);
  void set_u32s(const std::string& key, const std::vector<std::uint32_t>& v);
  void set_f32s(const std::string& key, const std::vector<float>& v);

  // `shape` in row-major order (the writer stores ggml's reversed ne).
  void add_tensor(const std::string& name, DType dtype, std::vector<std::int64_t> shape,
                  std::span<const std::uint8_t> data);
  void add_header_only(const std::string& name, DType dtype, std::vector<std::int64_t> shape);
  std::uint64_t data_bytes() const { return data_bytes_; }

  void write(const std::filesystem::path& path) const;

 private:
  struct Pending {
    TensorEntry entry;  // offset relative to the data section
    std::vector<std::uint8_t> data;
    bool header_only = false;
  };
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Pending> tensors_;
  std::uint64_t data_bytes_ = 0;
};

}  // namespace k3::model
