#include "common/text_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/fd.h"

namespace k3 {

std::string read_text_file(const std::filesystem::path& path, std::string_view what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw InputError("cannot read " + path.string() + " (" + std::string(what) +
                     "): it is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw InputError("cannot open " + path.string() + " (" + std::string(what) +
                     "): " + std::strerror(errno));
  }
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw InputError("cannot read " + path.string() + " (" + std::string(what) + ")");
  return std::move(s).str();
}

std::vector<TextLine> split_lines(std::string_view text) {
  std::vector<TextLine> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t nl = text.find('\n', start);
    TextLine line;
    line.number = lines.size() + 1;
    line.offset = start;
    if (nl == std::string_view::npos) {
      line.text = text.substr(start);
      line.terminated = false;
      lines.push_back(line);
      break;
    }
    line.text = text.substr(start, nl - start);
    line.terminated = true;
    lines.push_back(line);
    start = nl + 1;
  }
  return lines;
}

bool is_blank(std::string_view text) {
  return text.find_first_not_of(" \t\r") == std::string_view::npos;
}

std::size_t end_of_content(const std::vector<TextLine>& lines) {
  std::size_t end = lines.size();
  while (end > 0 && is_blank(lines[end - 1].text)) --end;
  return end;
}

void write_all(int fd, std::string_view text, const std::string& what) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t put = ::write(fd, text.data() + done, text.size() - done);
    if (put < 0) {
      if (errno == EINTR) continue;
      throw InputError("cannot write " + what + ": " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(put);
  }
}

std::filesystem::path temporary_beside(const std::filesystem::path& path) {
  return path.string() + ".tmp." + std::to_string(::getpid());
}

void commit_file(const std::filesystem::path& tmp, const std::filesystem::path& path) {
  try {
    const UniqueFd fd(::open(tmp.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) throw InputError("cannot open " + tmp.string() + ": " + std::strerror(errno));
    if (::fsync(fd.get()) != 0) {
      throw InputError("cannot sync " + tmp.string() + ": " + std::strerror(errno));
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      throw InputError("cannot rename " + tmp.string() + " to " + path.string() + ": " +
                       std::strerror(errno));
    }
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  sync_parent_directory(path);
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  const std::filesystem::path tmp = temporary_beside(path);
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) throw InputError("cannot create " + tmp.string() + ": " + std::strerror(errno));
    try {
      write_all(fd.get(), text, tmp.string());
      if (fd.close() != 0) {
        throw InputError("cannot write " + tmp.string() + ": " + std::strerror(errno));
      }
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
  }
  commit_file(tmp, path);
}

void sync_parent_directory(const std::filesystem::path& path) {
  std::filesystem::path dir = path.parent_path();
  if (dir.empty()) dir = ".";
  const UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd) ::fsync(fd.get());
}

}  // namespace k3
