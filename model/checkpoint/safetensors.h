// safetensors: header reading with every offset checked against the file, and a writer.
//
// Layout: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data section; offsets are relative to its start (8 + N).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "model/checkpoint/dtype.h"

namespace k3::model {

// One tensor stored in one file.
struct TensorEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::uint64_t offset = 0;  // absolute offset of the first byte in the file
  std::uint64_t nbytes = 0;
};

struct SafetensorsHeader {
  std::string path;
  std::uint64_t file_size = 0;
  std::uint64_t data_start = 0;
  std::vector<TensorEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
};

// Largest header accepted; the official 96-shard release has headers of a few hundred KiB.
inline constexpr std::uint64_t kMaxSafetensorsHeader = 256ull << 20;

// Reads and validates only the header; no tensor data is touched. Every problem is a
// k3::InputError that names the file and, where there is one, the tensor: a file too short for
// its header, invalid JSON, a duplicate name, an unknown dtype, a shape whose size disagrees
// with the offsets, offsets past the end of the file (a truncated shard), overlaps and holes.
SafetensorsHeader read_safetensors_header(const std::filesystem::path& path);

// The same checks on bytes already in memory: `prefix` starts at the beginning of the file and
// holds at least the header; `file_size` is the whole file's size. (Used by the fuzzer.)
SafetensorsHeader parse_safetensors_header(std::span<const std::uint8_t> prefix,
                                           std::uint64_t file_size, const std::string& source);

class SafetensorsWriter {
 public:
  // `data` must hold exactly the tensor's bytes; it is copied.
  void add(const std::string& name, DType dtype, std::vector<std::int64_t> shape,
           std::span<const std::uint8_t> data);
  // A tensor whose bytes are not written: the file is extended sparsely to its full size, so a
  // header-only checkpoint of the real shapes costs no disk.
  void add_header_only(const std::string& name, DType dtype, std::vector<std::int64_t> shape);
  void set_metadata(const std::string& key, const std::string& value);
  std::uint64_t data_bytes() const { return data_bytes_; }
  std::size_t size() const { return entries_.size(); }

  void write(const std::filesystem::path& path) const;

 private:
  struct Pending {
    TensorEntry entry;
    std::vector<std::uint8_t> data;  // empty for header-only
    bool header_only = false;
  };
  std::vector<Pending> entries_;
  std::map<std::string, std::string> metadata_;
  std::uint64_t data_bytes_ = 0;
};

}  // namespace k3::model
