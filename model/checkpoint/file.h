// model::File: an owned file descriptor with positioned reads and writes that either complete or
// throw an error naming the path (short reads of a truncated file included).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "common/fd.h"

namespace k3::model {

class File {
 public:
  static File open_read(const std::filesystem::path& path);
  static File create(const std::filesystem::path& path);  // truncates an existing file
  File(File&& other) noexcept = default;
  File& operator=(File&& other) noexcept = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  std::uint64_t size() const;
  const std::string& path() const { return path_; }
  int fd() const { return fd_.get(); }

  // Reads exactly `n` bytes at `offset` or throws InputError ("... ends at byte X").
  void read_exact(void* dst, std::uint64_t n, std::uint64_t offset) const;
  void write_at(const void* src, std::uint64_t n, std::uint64_t offset);
  void truncate(std::uint64_t size);

 private:
  File(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  UniqueFd fd_;
  std::string path_;
};

// A whole file mapped read-only and shared with the page cache. Nothing is read by mapping;
// populate() faults in (and, on a cold cache, reads) exactly the ranges a rank asked for, so
// weights can live in the page cache without a copy. Truncating the file while it is mapped
// would fault (SIGBUS), as with any mapped model file.
class FileMapping {
 public:
  static std::shared_ptr<const FileMapping> map(const File& file);
  ~FileMapping();
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;

  std::span<const std::uint8_t> bytes(std::uint64_t offset, std::uint64_t length) const;
  // Prefaults [offset, offset + length): MADV_POPULATE_READ, or touching one byte per page.
  void populate(std::uint64_t offset, std::uint64_t length) const;
  // Unmaps from this process the whole pages inside `bytes`, a range of some FileMapping whose
  // contents were copied elsewhere (a repacked matrix): they leave the resident set, the page
  // cache keeps them, and a later read faults them back in. Best effort (madvise).
  static void release(std::span<const std::uint8_t> bytes);
  const std::string& path() const { return path_; }

 private:
  FileMapping(const std::uint8_t* base, std::uint64_t size, std::string path)
      : base_(base), size_(size), path_(std::move(path)) {}
  const std::uint8_t* base_;
  std::uint64_t size_;
  std::string path_;
};

}  // namespace k3::model
