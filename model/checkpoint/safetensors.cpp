#include "model/checkpoint/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "common/large_json.h"
#include "model/checkpoint/file.h"

namespace k3::model {

using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw InputError(source + ": " + what);
}

std::uint64_t read_u64_le(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string tensor_label(const std::string& name) { return "tensor '" + name + "'"; }

}  // namespace

namespace {

// The header length: within the limit and the file, and read into `prefix`.
std::uint64_t header_length(std::span<const std::uint8_t> prefix, std::uint64_t file_size,
                            const std::string& source) {
  if (file_size < 8 || prefix.size() < 8) {
    fail(source, "file of " + std::to_string(file_size) +
                     " bytes is too short for the 8-byte safetensors header length");
  }
  const std::uint64_t header_len = read_u64_le(prefix.data());
  if (header_len > kMaxSafetensorsHeader) {
    fail(source, "header length " + std::to_string(header_len) + " exceeds the " +
                     std::to_string(kMaxSafetensorsHeader) +
                     "-byte limit (not a safetensors file?)");
  }
  if (header_len > file_size - 8) {
    fail(source, "header length " + std::to_string(header_len) + " runs past the end of the " +
                     std::to_string(file_size) + "-byte file (truncated?)");
  }
  if (prefix.size() < 8 + header_len) {
    throw InternalError(source + ": header prefix not fully read");
  }
  return header_len;
}

// "__metadata__": an object of strings.
void read_metadata(const simdjson::dom::element& v, SafetensorsHeader& h) {
  const std::string& source = h.path;
  simdjson::dom::object metadata;
  if (v.get(metadata)) fail(source, "__metadata__ is not an object");
  for (const auto m : metadata) {
    std::string_view value;
    if (m.value.get(value))
      fail(source, "__metadata__ value '" + std::string(m.key) + "' is not a string");
    h.metadata[std::string(m.key)] = std::string(value);
  }
}

// The dtype and the shape of one entry.
void read_dtype_and_shape(const simdjson::dom::element& dtype, const simdjson::dom::element& shape,
                          const std::string& source, TensorEntry& t) {
  std::string_view dtype_text;
  if (dtype.get(dtype_text)) fail(source, tensor_label(t.name) + ": dtype is not a string");
  const auto parsed = dtype_from_safetensors(std::string(dtype_text));
  if (!parsed) {
    fail(source, tensor_label(t.name) + ": dtype '" + std::string(dtype_text) +
                     "' is not supported (F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
  }
  t.dtype = *parsed;
  simdjson::dom::array dims;
  if (shape.get(dims) || dims.size() > 8) {
    fail(source, tensor_label(t.name) + ": shape must be an array of at most 8 dimensions");
  }
  for (const simdjson::dom::element d : dims) {
    std::uint64_t extent = 0;
    if (!d.is<std::uint64_t>() || d.get(extent)) {
      fail(source, tensor_label(t.name) + ": shape " + simdjson::minify(shape) +
                       " has a non-integer or negative dimension");
    }
    t.shape.push_back(static_cast<std::int64_t>(std::min<std::uint64_t>(extent, INT64_MAX)));
  }
}

// One tensor's entry: its dtype and shape, and data_offsets that hold exactly its bytes inside
// the file.
TensorEntry read_tensor_entry(std::string_view name, const simdjson::dom::element& v,
                              const SafetensorsHeader& h) {
  const std::string& source = h.path;
  simdjson::dom::element dtype, shape, offsets;
  simdjson::dom::object entry;
  if (v.get(entry) || entry["dtype"].get(dtype) || entry["shape"].get(shape) ||
      entry["data_offsets"].get(offsets)) {
    fail(source,
         tensor_label(std::string(name)) + " needs an object with dtype, shape and data_offsets");
  }
  TensorEntry t;
  t.name = std::string(name);
  read_dtype_and_shape(dtype, shape, source, t);
  simdjson::dom::array range;
  std::uint64_t begin = 0, end = 0;
  if (offsets.get(range) || range.size() != 2 || !range.at(0).is<std::uint64_t>() ||
      !range.at(1).is<std::uint64_t>() || range.at(0).get(begin) || range.at(1).get(end)) {
    fail(source, tensor_label(t.name) + ": data_offsets must be two non-negative integers, got " +
                     simdjson::minify(offsets));
  }
  if (begin > end) {
    fail(source, tensor_label(t.name) + ": data_offsets [" + std::to_string(begin) + ", " +
                     std::to_string(end) + "] end before they begin");
  }
  const auto expected = tensor_bytes(t.dtype, t.shape);
  if (!expected)
    fail(source, tensor_label(t.name) + ": shape " + shape_string(t.shape) + " overflows");
  if (end - begin != *expected) {
    fail(source, tensor_label(t.name) + ": data_offsets [" + std::to_string(begin) + ", " +
                     std::to_string(end) + "] hold " + std::to_string(end - begin) +
                     " bytes, but " + std::string(dtype_name(t.dtype)) + " " +
                     shape_string(t.shape) + " needs " + std::to_string(*expected));
  }
  if (end > h.file_size - h.data_start) {
    fail(source, "file is truncated: " + tensor_label(t.name) + " ends at byte " +
                     std::to_string(h.data_start + end) + " but the file has " +
                     std::to_string(h.file_size) + " bytes");
  }
  t.offset = h.data_start + begin;
  t.nbytes = end - begin;
  return t;
}

// The data section is tiled exactly: no overlap, no hole (as the safetensors spec requires).
void check_tiling(SafetensorsHeader& h) {
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.nbytes < b.nbytes;
  });
  const std::string& source = h.path;
  std::uint64_t cursor = h.data_start;
  for (std::size_t i = 0; i < h.tensors.size(); ++i) {
    const TensorEntry& t = h.tensors[i];
    if (t.offset < cursor) {
      fail(source, "tensors '" + h.tensors[i - 1].name + "' and '" + t.name +
                       "' overlap at file byte " + std::to_string(t.offset));
    }
    if (t.offset > cursor) {
      fail(source, "bytes [" + std::to_string(cursor) + ", " + std::to_string(t.offset) +
                       ") belong to no tensor (a hole before " + tensor_label(t.name) + ")");
    }
    cursor = t.offset + t.nbytes;
  }
  if (cursor != h.file_size) {
    fail(source, std::to_string(h.file_size - cursor) +
                     " trailing bytes after the last tensor (file of " +
                     std::to_string(h.file_size) + " bytes, tensors end at " +
                     std::to_string(cursor) + ")");
  }
}

SafetensorsHeader parse_header(std::span<const std::uint8_t> prefix, std::uint64_t file_size,
                               const std::string& source) {
  const std::uint64_t header_len = header_length(prefix, file_size, source);
  SafetensorsHeader h;
  h.path = source;
  h.file_size = file_size;
  h.data_start = 8 + header_len;
  const std::string_view text(reinterpret_cast<const char*>(prefix.data() + 8), header_len);

  const LargeJson doc(text, {source, "a safetensors header is one JSON object of tensor entries"},
                      prefix.size() >= 8 + header_len + LargeJson::kPadding
                          ? LargeJson::Padding::kInPlace
                          : LargeJson::Padding::kCopy);
  simdjson::dom::object root;
  if (doc.root().get(root)) fail(source, "header is not a JSON object");

  // A lying header may name a tensor twice; the first repeat is reported.
  std::set<std::string_view> names;
  h.tensors.reserve(root.size());
  for (const auto field : root) {
    const std::string_view name = field.key;
    if (!names.insert(name).second)
      fail(source, "header names " + tensor_label(std::string(name)) + " twice");
    if (name == "__metadata__")
      read_metadata(field.value, h);
    else
      h.tensors.push_back(read_tensor_entry(name, field.value, h));
  }
  check_tiling(h);
  return h;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(std::span<const std::uint8_t> prefix,
                                           std::uint64_t file_size, const std::string& source) {
  return interpret_large_json(source, [&] { return parse_header(prefix, file_size, source); });
}

SafetensorsHeader read_safetensors_header(const std::filesystem::path& path) {
  const File file = File::open_read(path);
  const std::uint64_t size = file.size();
  std::uint8_t length[8] = {};
  const std::uint64_t first = std::min<std::uint64_t>(size, 8);
  file.read_exact(length, first, 0);
  std::uint64_t len = first == 8 ? read_u64_le(length) : 0;
  const bool readable = first == 8 && len <= kMaxSafetensorsHeader && len <= size - 8;
  if (!readable) len = 0;
  // The header is parsed in place: LargeJson::kPadding readable bytes past its end.
  std::vector<std::uint8_t> prefix(8 + len + LargeJson::kPadding);
  std::copy(length, length + first, prefix.begin());
  if (len > 0) file.read_exact(prefix.data() + 8, len, 8);
  // A file too short or with an impossible length: parse_safetensors_header names the problem.
  prefix.resize(readable ? prefix.size() : first);
  return parse_safetensors_header(prefix, size, path.string());
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<std::int64_t> shape,
                            std::span<const std::uint8_t> data) {
  const auto bytes = tensor_bytes(dtype, shape);
  if (!bytes || *bytes != data.size()) {
    throw InternalError("safetensors writer: " + name + " " + shape_string(shape) + " " +
                        std::string(dtype_name(dtype)) + " given " + std::to_string(data.size()) +
                        " bytes");
  }
  Pending p;
  p.entry = {name, dtype, std::move(shape), data_bytes_, *bytes};
  p.data.assign(data.begin(), data.end());
  data_bytes_ += *bytes;
  entries_.push_back(std::move(p));
}

void SafetensorsWriter::add_header_only(const std::string& name, DType dtype,
                                        std::vector<std::int64_t> shape) {
  const auto bytes = tensor_bytes(dtype, shape);
  if (!bytes) throw InternalError("safetensors writer: bad shape for " + name);
  Pending p;
  p.entry = {name, dtype, std::move(shape), data_bytes_, *bytes};
  p.header_only = true;
  data_bytes_ += *bytes;
  entries_.push_back(std::move(p));
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

void SafetensorsWriter::write(const std::filesystem::path& path) const {
  json header = json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  for (const Pending& p : entries_) {
    header[p.entry.name] = {{"dtype", dtype_name(p.entry.dtype)},
                            {"shape", p.entry.shape},
                            {"data_offsets", {p.entry.offset, p.entry.offset + p.entry.nbytes}}};
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  File file = File::create(path);
  std::uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<std::uint8_t>(text.size() >> (8 * i));
  std::uint64_t at = 0;
  file.write_at(len, 8, at);
  at += 8;
  file.write_at(text.data(), text.size(), at);
  at += text.size();
  for (const Pending& p : entries_) {
    if (!p.header_only) file.write_at(p.data.data(), p.data.size(), at + p.entry.offset);
  }
  file.truncate(at + data_bytes_);  // sparse where tensors are header-only
}

}  // namespace k3::model
