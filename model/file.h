// model::File: an owned file descriptor with positioned reads and writes that either complete or
// throw an error naming the path (short reads of a truncated file included).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace k3::model {

class File {
 public:
  static File open_read(const std::filesystem::path& path);
  static File create(const std::filesystem::path& path);  // truncates an existing file
  ~File();
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  std::uint64_t size() const;
  const std::string& path() const { return path_; }
  int fd() const { return fd_; }

  // Reads exactly `n` bytes at `offset` or throws InputError ("... ends at byte X").
  void read_exact(void* dst, std::uint64_t n, std::uint64_t offset) const;
  void write_at(const void* src, std::uint64_t n, std::uint64_t offset);
  void truncate(std::uint64_t size);

 private:
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

}  // namespace k3::model
