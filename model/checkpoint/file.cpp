#include "model/checkpoint/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace k3::model {

namespace {
std::string errno_text() { return std::strerror(errno); }
}  // namespace

File File::open_read(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError("cannot open " + path.string() + ": " + errno_text());
  return File(UniqueFd(fd), path.string());
}

File File::create(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError("cannot create " + path.string() + ": " + errno_text());
  return File(UniqueFd(fd), path.string());
}

std::uint64_t File::size() const {
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) throw InputError("cannot stat " + path_ + ": " + errno_text());
  return static_cast<std::uint64_t>(st.st_size);
}

void File::read_exact(void* dst, std::uint64_t n, std::uint64_t offset) const {
  auto* out = static_cast<char*>(dst);
  std::uint64_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_.get(), out + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw InputError("cannot read " + path_ + " at byte " + std::to_string(offset + done) + ": " +
                       errno_text());
    }
    if (got == 0) {
      throw InputError(path_ + " ends at byte " + std::to_string(offset + done) + ", expected " +
                       std::to_string(n - done) + " more bytes (truncated file?)");
    }
    done += static_cast<std::uint64_t>(got);
  }
}

void File::write_at(const void* src, std::uint64_t n, std::uint64_t offset) {
  const auto* in = static_cast<const char*>(src);
  std::uint64_t done = 0;
  while (done < n) {
    const ssize_t put = ::pwrite(fd_.get(), in + done, n - done, static_cast<off_t>(offset + done));
    if (put < 0) {
      if (errno == EINTR) continue;
      throw InputError("cannot write " + path_ + ": " + errno_text());
    }
    done += static_cast<std::uint64_t>(put);
  }
}

void File::truncate(std::uint64_t size) {
  if (::ftruncate(fd_.get(), static_cast<off_t>(size)) != 0) {
    throw InputError("cannot resize " + path_ + ": " + errno_text());
  }
}

std::shared_ptr<const FileMapping> FileMapping::map(const File& file) {
  const std::uint64_t size = file.size();
  if (size == 0)
    return std::shared_ptr<const FileMapping>(new FileMapping(nullptr, 0, file.path()));
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, file.fd(), 0);
  if (p == MAP_FAILED) throw InputError("cannot map " + file.path() + ": " + errno_text());
  return std::shared_ptr<const FileMapping>(
      new FileMapping(static_cast<const std::uint8_t*>(p), size, file.path()));
}

FileMapping::~FileMapping() {
  if (base_) ::munmap(const_cast<std::uint8_t*>(base_), size_);
}

std::span<const std::uint8_t> FileMapping::bytes(std::uint64_t offset, std::uint64_t length) const {
  if (offset > size_ || length > size_ - offset) {
    throw InputError(path_ + ": range [" + std::to_string(offset) + ", " +
                     std::to_string(offset + length) + ") runs past the end of the " +
                     std::to_string(size_) + "-byte file");
  }
  return {base_ + offset, static_cast<std::size_t>(length)};
}

void FileMapping::release(std::span<const std::uint8_t> bytes) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(bytes.data());
  const std::uintptr_t first = (begin + page - 1) & ~(page - 1);
  const std::uintptr_t last = (begin + bytes.size()) & ~(page - 1);
  // MADV_DONTNEED on a shared read-only file mapping drops this process's page table entries
  // only; the file's pages and contents are untouched.
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

void FileMapping::populate(std::uint64_t offset, std::uint64_t length) const {
  const auto range = bytes(offset, length);
  if (range.empty()) return;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<std::uintptr_t>(range.data()) & ~(page - 1);
  const auto last = reinterpret_cast<std::uintptr_t>(range.data()) + range.size();
#ifdef MADV_POPULATE_READ
  if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_POPULATE_READ) == 0) return;
#endif
  volatile std::uint8_t sink = 0;  // older kernels: fault the pages in by reading them
  for (std::uintptr_t a = first < reinterpret_cast<std::uintptr_t>(range.data()) ? first + page
                                                                                 : first;
       a < last; a += page) {
    sink = sink + *reinterpret_cast<const volatile std::uint8_t*>(a);
  }
  if (!range.empty()) sink = sink + range[0];
}

}  // namespace k3::model
