// Edits the checkpoint tests damage their private copies with: raw bytes, JSON files, and a
// safetensors shard's header (its data section kept byte for byte). Writes replace the file, so
// a copy made of hard links is never changed in place.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace k3::test {

inline std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::string s(std::filesystem::file_size(p), '\0');
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  return s;
}

inline void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::filesystem::remove(p);
  std::ofstream(p, std::ios::binary) << bytes;
}

inline void edit_json(const std::filesystem::path& p,
                      const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(read_bytes(p));
  edit(j);
  write_bytes(p, j.dump(1));
}

// The shard file that the index says holds `tensor`.
inline std::filesystem::path shard_holding(const std::filesystem::path& dir,
                                           const std::string& tensor) {
  const auto index = nlohmann::json::parse(read_bytes(dir / "model.safetensors.index.json"));
  return dir / index["weight_map"].at(tensor).get<std::string>();
}

// Rewrites a shard's header through `edit`. A header that still fits keeps its length (the file
// offsets of the data stay where they were); a longer one moves the data, whose offsets are
// relative to the data section, so they hold.
inline void edit_header(const std::filesystem::path& shard,
                        const std::function<void(nlohmann::json&)>& edit) {
  const std::string bytes = read_bytes(shard);
  std::uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  nlohmann::json h = nlohmann::json::parse(bytes.substr(8, len));
  edit(h);
  std::string text = h.dump();
  text.resize(len >= text.size() ? len : text.size() + (8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const std::uint64_t new_len = text.size();
  std::memcpy(out.data(), &new_len, 8);
  write_bytes(shard, out + text + bytes.substr(8 + len));
}

}  // namespace k3::test
