// Text files read and written the same way everywhere: whole-file reads with one error naming the
// file, lines with their numbers and offsets (so every reader reports file:line alike), and
// atomic replacement (temporary file, fsync, rename, directory sync).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace k3 {

// The whole file; InputError "cannot open <path> (<what>): <reason>".
std::string read_text_file(const std::filesystem::path& path, std::string_view what);

struct TextLine {
  std::size_t number = 0;   // 1-based
  std::size_t offset = 0;   // byte offset of the line in the file
  std::string_view text;    // without the '\n'
  bool terminated = false;  // followed by '\n' (false only for a last line cut short)
};

// Lines split on '\n'. The empty piece after a final '\n' is not a line.
std::vector<TextLine> split_lines(std::string_view text);

bool is_blank(std::string_view text);  // only JSON whitespace (so "\r" of CRLF files too)

// Index one past the last non-blank line: what follows is trailing blank lines.
std::size_t end_of_content(const std::vector<TextLine>& lines);

// Writes all of `text` to `fd` (retrying short writes and EINTR); InputError "cannot write
// <what>: <reason>".
void write_all(int fd, std::string_view text, const std::string& what);

// Writes `text` to `path` through a temporary file, fsync and rename, so a reader never sees a
// half-written file and a crash keeps the previous version.
void write_file_atomically(const std::filesystem::path& path, std::string_view text);

// The two halves of write_file_atomically for writers that fill the file themselves (the HDF5
// history): a temporary name beside `path`, and commit_file, which syncs the written `tmp`,
// renames it over `path` and syncs the directory (on failure `tmp` is removed and the error
// names it).
std::filesystem::path temporary_beside(const std::filesystem::path& path);
void commit_file(const std::filesystem::path& tmp, const std::filesystem::path& path);

// fsync of the directory holding `path`, so a file just created or renamed there survives a
// crash of the node. Best effort: some file systems refuse to sync directories.
void sync_parent_directory(const std::filesystem::path& path);

}  // namespace k3
