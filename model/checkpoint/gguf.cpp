#include "model/checkpoint/gguf.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "common/error.h"
#include "model/checkpoint/file.h"

namespace k3::model {

using nlohmann::json;

std::string_view gguf_type_name(GgufType type) {
  // In GgufType's order: the type's number is its index.
  static constexpr std::string_view kNames[] = {"UINT8",  "INT8",    "UINT16", "INT16",  "UINT32",
                                                "INT32",  "FLOAT32", "BOOL",   "STRING", "ARRAY",
                                                "UINT64", "INT64",   "FLOAT64"};
  const auto i = static_cast<std::size_t>(type);
  return i < std::size(kNames) ? kNames[i] : "UNKNOWN";
}

namespace {

constexpr std::uint64_t kMaxString = 1ull << 30;

std::uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    case GgufType::kString:
      return 8;  // at least its length field
    case GgufType::kArray:
      return 12;
  }
  return 0;
}

// Sequential little-endian reads over the header bytes, each checked against what is left.
class Cursor {
 public:
  Cursor(std::span<const std::uint8_t> bytes, std::uint64_t file_size, std::string source)
      : bytes_(bytes), file_size_(file_size), source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(source_ + ": " + what + " (at byte " + std::to_string(pos_) + ")");
  }
  std::uint64_t pos() const { return pos_; }
  std::uint64_t remaining() const { return file_size_ - pos_; }

  void take(void* dst, std::uint64_t n, const char* what) {
    if (n > remaining()) {
      fail(std::string("file ends inside ") + what + ": needs " + std::to_string(n) + " bytes, " +
           std::to_string(remaining()) + " left");
    }
    if (pos_ + n > bytes_.size()) throw InternalError(source_ + ": GGUF header buffer too short");
    std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
  }
  template <class T>
  T get(const char* what) {
    T v{};
    take(&v, sizeof v, what);
    return v;
  }
  std::string string(const char* what) {
    const auto len = get<std::uint64_t>(what);
    if (len > kMaxString || len > remaining()) {
      fail(std::string(what) + " has length " + std::to_string(len) + ", more than the " +
           std::to_string(remaining()) + " bytes left in the file");
    }
    std::string s(len, '\0');
    take(s.data(), len, what);
    return s;
  }

 private:
  std::span<const std::uint8_t> bytes_;
  std::uint64_t file_size_;
  std::string source_;
  std::uint64_t pos_ = 0;
};

bool valid_type(std::uint32_t t) { return t <= static_cast<std::uint32_t>(GgufType::kF64); }

json read_scalar(Cursor& c, GgufType t, const std::string& key) {
  switch (t) {
    case GgufType::kU8:
      return c.get<std::uint8_t>("a value");
    case GgufType::kI8:
      return c.get<std::int8_t>("a value");
    case GgufType::kU16:
      return c.get<std::uint16_t>("a value");
    case GgufType::kI16:
      return c.get<std::int16_t>("a value");
    case GgufType::kU32:
      return c.get<std::uint32_t>("a value");
    case GgufType::kI32:
      return c.get<std::int32_t>("a value");
    case GgufType::kF32:
      return c.get<float>("a value");
    case GgufType::kU64:
      return c.get<std::uint64_t>("a value");
    case GgufType::kI64:
      return c.get<std::int64_t>("a value");
    case GgufType::kF64:
      return c.get<double>("a value");
    case GgufType::kBool: {
      const auto b = c.get<std::uint8_t>("a value");
      if (b > 1) c.fail("key '" + key + "': BOOL value " + std::to_string(b) + " is not 0 or 1");
      return b == 1;
    }
    case GgufType::kString:
      return c.string("a string value");
    case GgufType::kArray:
      break;
  }
  c.fail("key '" + key + "': unexpected type");
}

// The magic, the version and the two counts, each count bounded by what the file can hold.
struct Counts {
  std::uint64_t tensors = 0;
  std::uint64_t kv = 0;
};
Counts read_preamble(Cursor& c, GgufFile& f) {
  const auto magic = c.get<std::uint32_t>("the magic");
  if (magic != kGgufMagic) {
    char shown[32];
    std::snprintf(shown, sizeof shown, "0x%08x", magic);
    c.fail(std::string("bad magic ") + shown + ", expected 0x46554747 (\"GGUF\")");
  }
  f.version = c.get<std::uint32_t>("the version");
  if ((f.version & 0xffffu) == 0)
    c.fail("version " + std::to_string(f.version) + " looks byte-swapped (big-endian file?)");
  if (f.version != 2 && f.version != 3) {
    c.fail("unsupported GGUF version " + std::to_string(f.version) + " (expected 2 or 3)");
  }
  Counts n;
  n.tensors = c.get<std::uint64_t>("the tensor count");
  n.kv = c.get<std::uint64_t>("the metadata count");
  // Each tensor info takes at least 8+1+4+8+4+8 bytes, each key-value at least 8+1+4+1.
  if (n.tensors > c.remaining() / 33) {
    c.fail("tensor count " + std::to_string(n.tensors) + " cannot fit in the file");
  }
  if (n.kv > c.remaining() / 14)
    c.fail("metadata count " + std::to_string(n.kv) + " cannot fit in the file");
  return n;
}

// One metadata value of type `raw` (already checked valid): a scalar, or an array of scalars.
GgufValue read_value(Cursor& c, std::uint32_t raw, const std::string& key) {
  GgufValue v;
  v.type = static_cast<GgufType>(raw);
  if (v.type != GgufType::kArray) {
    v.value = read_scalar(c, v.type, key);
    return v;
  }
  const auto elem = c.get<std::uint32_t>("an array element type");
  if (!valid_type(elem))
    c.fail("key '" + key + "': unknown array element type " + std::to_string(elem));
  v.elem = static_cast<GgufType>(elem);
  if (v.elem == GgufType::kArray) c.fail("key '" + key + "': arrays of arrays are not supported");
  const auto count = c.get<std::uint64_t>("an array length");
  if (count > c.remaining() / scalar_size(v.elem)) {
    c.fail("key '" + key + "': array of " + std::to_string(count) + " " +
           std::string(gguf_type_name(v.elem)) + " cannot fit in the " +
           std::to_string(c.remaining()) + " bytes left");
  }
  v.value = json::array();
  auto& arr = v.value.get_ref<json::array_t&>();
  arr.reserve(count);
  for (std::uint64_t j = 0; j < count; ++j) arr.push_back(read_scalar(c, v.elem, key));
  return v;
}

// The key-value section, then general.alignment (a power of two) when it is set.
void read_metadata(Cursor& c, std::uint64_t n_kv, GgufFile& f) {
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.string("a metadata key");
    if (key.empty()) c.fail("metadata key #" + std::to_string(i) + " is empty");
    if (f.kv.count(key)) c.fail("metadata key '" + key + "' appears twice");
    const auto raw = c.get<std::uint32_t>("a value type");
    if (!valid_type(raw)) c.fail("key '" + key + "': unknown value type " + std::to_string(raw));
    GgufValue v = read_value(c, raw, key);
    f.kv.emplace(std::move(key), std::move(v));
  }
  if (auto it = f.kv.find("general.alignment"); it != f.kv.end()) {
    if (it->second.type != GgufType::kU32) {
      c.fail("general.alignment is " + std::string(gguf_type_name(it->second.type)) +
             ", expected UINT32");
    }
    const auto a = it->second.value.get<std::uint32_t>();
    if (a == 0 || (a & (a - 1)) != 0)
      c.fail("general.alignment " + std::to_string(a) + " is not a power of two");
    f.alignment = a;
  }
}

// The tensor infos: names, dimensions and types checked; the offsets (relative to the data
// section, not yet checked) returned in the same order.
std::vector<std::uint64_t> read_tensor_infos(Cursor& c, std::uint64_t n_tensors, GgufFile& f) {
  std::set<std::string> names;
  std::vector<std::uint64_t> offsets;
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    TensorEntry t;
    t.name = c.string("a tensor name");
    if (t.name.empty() || t.name.size() > kGgufMaxTensorName) {
      c.fail("tensor #" + std::to_string(i) + " name of " + std::to_string(t.name.size()) +
             " bytes (expected 1.." + std::to_string(kGgufMaxTensorName) + ")");
    }
    if (!names.insert(t.name).second) c.fail("tensor '" + t.name + "' appears twice");
    const auto n_dims = c.get<std::uint32_t>("a dimension count");
    if (n_dims == 0 || n_dims > 4) {
      c.fail("tensor '" + t.name + "': " + std::to_string(n_dims) + " dimensions (expected 1..4)");
    }
    std::vector<std::int64_t> ne(n_dims);
    for (auto& d : ne) {
      d = c.get<std::int64_t>("a dimension");
      if (d < 0) c.fail("tensor '" + t.name + "': negative dimension " + std::to_string(d));
    }
    const auto type = c.get<std::int32_t>("a tensor type");
    const auto dtype = dtype_from_ggml(type);
    if (!dtype) {
      c.fail("tensor '" + t.name + "': ggml type " + std::to_string(type) +
             " is not supported (F32, F16, BF16, Q8_0, Q4_0, Q2_K, Q3_K, MXFP4, I8..I64, F64)");
    }
    t.dtype = *dtype;
    t.shape.assign(ne.rbegin(), ne.rend());
    const auto size = tensor_bytes(t.dtype, t.shape);
    if (!size) {
      c.fail("tensor '" + t.name + "': shape " + shape_string(t.shape) + " does not fit " +
             std::string(dtype_name(t.dtype)) + " (row length must be a multiple of its block)");
    }
    t.nbytes = *size;
    offsets.push_back(c.get<std::uint64_t>("a tensor offset"));
    f.tensors.push_back(std::move(t));
  }
  return offsets;
}

// The data section after the aligned header end: every tensor's offset aligned, its bytes inside
// the file, and no two tensors overlapping.
void place_tensors(const Cursor& c, const std::vector<std::uint64_t>& offsets, GgufFile& f) {
  const std::uint64_t header_end = c.pos();
  f.data_start =
      f.tensors.empty() ? header_end : (header_end + f.alignment - 1) / f.alignment * f.alignment;
  if (f.data_start > f.file_size) {
    c.fail("data section starts at byte " + std::to_string(f.data_start) + " past the end of the " +
           std::to_string(f.file_size) + "-byte file");
  }
  const std::uint64_t data_size = f.file_size - f.data_start;
  for (std::size_t i = 0; i < f.tensors.size(); ++i) {
    TensorEntry& t = f.tensors[i];
    const std::uint64_t rel = offsets[i];
    if (rel % f.alignment != 0) {
      c.fail("tensor '" + t.name + "': offset " + std::to_string(rel) +
             " is not a multiple of the alignment " + std::to_string(f.alignment));
    }
    if (rel > data_size || t.nbytes > data_size - rel) {
      c.fail("tensor '" + t.name + "': data [" + std::to_string(rel) + ", " +
             std::to_string(rel + t.nbytes) +
             ") of the data section runs past the end of the file (data section of " +
             std::to_string(data_size) + " bytes; truncated?)");
    }
    t.offset = f.data_start + rel;
  }
  std::vector<const TensorEntry*> order;
  for (const auto& t : f.tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < order.size(); ++i) {
    if (order[i]->offset < order[i - 1]->offset + order[i - 1]->nbytes) {
      c.fail("tensors '" + order[i - 1]->name + "' and '" + order[i]->name + "' overlap");
    }
  }
}

}  // namespace

GgufFile parse_gguf_header(std::span<const std::uint8_t> bytes, std::uint64_t file_size,
                           const std::string& source) {
  Cursor c(bytes, file_size, source);
  GgufFile f;
  f.path = source;
  f.file_size = file_size;
  const Counts n = read_preamble(c, f);
  read_metadata(c, n.kv, f);
  const std::vector<std::uint64_t> offsets = read_tensor_infos(c, n.tensors, f);
  place_tensors(c, offsets, f);
  return f;
}

GgufFile read_gguf_header(const std::filesystem::path& path) {
  const File file = File::open_read(path);
  const std::uint64_t size = file.size();
  // Headers (with a 164k-token vocabulary) are a few MiB; grow the prefix until it parses.
  std::uint64_t want = std::min<std::uint64_t>(size, 1ull << 20);
  for (;;) {
    std::vector<std::uint8_t> prefix(want);
    file.read_exact(prefix.data(), want, 0);
    try {
      return parse_gguf_header(prefix, size, path.string());
    } catch (const InternalError&) {
      if (want == size) throw;
      want = std::min<std::uint64_t>(size, want * 4);
    }
  }
}

const GgufValue& GgufFile::at(const std::string& key) const {
  auto it = kv.find(key);
  if (it == kv.end()) throw InputError(path + ": missing GGUF key '" + key + "'");
  return it->second;
}

namespace {
[[noreturn]] void wrong_type(const GgufFile& f, const std::string& key, const char* expected) {
  throw InputError(f.path + ": GGUF key '" + key + "' is " +
                   std::string(gguf_type_name(f.at(key).type)) + ", expected " + expected);
}
}  // namespace

std::uint32_t GgufFile::u32(const std::string& key) const {
  const GgufValue& v = at(key);
  if (v.type != GgufType::kU32) wrong_type(*this, key, "UINT32");
  return v.value.get<std::uint32_t>();
}

float GgufFile::f32(const std::string& key) const {
  const GgufValue& v = at(key);
  if (v.type != GgufType::kF32) wrong_type(*this, key, "FLOAT32");
  return v.value.get<float>();
}

bool GgufFile::boolean(const std::string& key) const {
  const GgufValue& v = at(key);
  if (v.type != GgufType::kBool) wrong_type(*this, key, "BOOL");
  return v.value.get<bool>();
}

std::string GgufFile::string(const std::string& key) const {
  const GgufValue& v = at(key);
  if (v.type != GgufType::kString) wrong_type(*this, key, "STRING");
  return v.value.get<std::string>();
}

std::vector<std::string> GgufFile::strings(const std::string& key) const {
  const GgufValue& v = at(key);
  if (v.type != GgufType::kArray || v.elem != GgufType::kString)
    wrong_type(*this, key, "ARRAY of STRING");
  return v.value.get<std::vector<std::string>>();
}

std::vector<std::int64_t> GgufFile::integers(const std::string& key) const {
  const GgufValue& v = at(key);
  const bool integral = v.elem != GgufType::kF32 && v.elem != GgufType::kF64 &&
                        v.elem != GgufType::kString && v.elem != GgufType::kBool;
  if (v.type != GgufType::kArray || !integral) wrong_type(*this, key, "ARRAY of integers");
  std::vector<std::int64_t> out;
  for (const json& x : v.value) out.push_back(x.get<std::int64_t>());
  return out;
}

// ---- writer ----

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::set_u32(const std::string& k, std::uint32_t v) {
  set(k, {GgufType::kU32, GgufType::kU8, v});
}
void GgufWriter::set_i32(const std::string& k, std::int32_t v) {
  set(k, {GgufType::kI32, GgufType::kU8, v});
}
void GgufWriter::set_u16(const std::string& k, std::uint16_t v) {
  set(k, {GgufType::kU16, GgufType::kU8, v});
}
void GgufWriter::set_f32(const std::string& k, float v) {
  set(k, {GgufType::kF32, GgufType::kU8, v});
}
void GgufWriter::set_bool(const std::string& k, bool v) {
  set(k, {GgufType::kBool, GgufType::kU8, v});
}
void GgufWriter::set_string(const std::string& k, const std::string& v) {
  set(k, {GgufType::kString, GgufType::kU8, v});
}
void GgufWriter::set_strings(const std::string& k, const std::vector<std::string>& v) {
  set(k, {GgufType::kArray, GgufType::kString, v});
}
void GgufWriter::set_i32s(const std::string& k, const std::vector<std::int32_t>& v) {
  set(k, {GgufType::kArray, GgufType::kI32, v});
}
void GgufWriter::set_u32s(const std::string& k, const std::vector<std::uint32_t>& v) {
  set(k, {GgufType::kArray, GgufType::kU32, v});
}
void GgufWriter::set_f32s(const std::string& k, const std::vector<float>& v) {
  set(k, {GgufType::kArray, GgufType::kF32, v});
}

void GgufWriter::add_tensor(const std::string& name, DType dtype, std::vector<std::int64_t> shape,
                            std::span<const std::uint8_t> data) {
  const auto bytes = tensor_bytes(dtype, shape);
  if (!bytes || *bytes != data.size() || ggml_type_of(dtype) < 0 ||
      name.size() > kGgufMaxTensorName) {
    throw InternalError("GGUF writer: cannot store " + name + " " + std::string(dtype_name(dtype)) +
                        " " + shape_string(shape) + " from " + std::to_string(data.size()) +
                        " bytes");
  }
  Pending p;
  p.entry = {name, dtype, std::move(shape), data_bytes_, *bytes};
  p.data.assign(data.begin(), data.end());
  data_bytes_ +=
      (*bytes + kGgufDefaultAlignment - 1) / kGgufDefaultAlignment * kGgufDefaultAlignment;
  tensors_.push_back(std::move(p));
}

void GgufWriter::add_header_only(const std::string& name, DType dtype,
                                 std::vector<std::int64_t> shape) {
  const auto bytes = tensor_bytes(dtype, shape);
  if (!bytes || ggml_type_of(dtype) < 0) throw InternalError("GGUF writer: cannot store " + name);
  Pending p;
  p.entry = {name, dtype, std::move(shape), data_bytes_, *bytes};
  p.header_only = true;
  data_bytes_ +=
      (*bytes + kGgufDefaultAlignment - 1) / kGgufDefaultAlignment * kGgufDefaultAlignment;
  tensors_.push_back(std::move(p));
}

namespace {

class Buffer {
 public:
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof v);
  }
  void put_string(const std::string& s) {
    put<std::uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void put_scalar(GgufType t, const json& v) {
    switch (t) {
      case GgufType::kU8:
        put(v.get<std::uint8_t>());
        break;
      case GgufType::kI8:
        put(v.get<std::int8_t>());
        break;
      case GgufType::kU16:
        put(v.get<std::uint16_t>());
        break;
      case GgufType::kI16:
        put(v.get<std::int16_t>());
        break;
      case GgufType::kU32:
        put(v.get<std::uint32_t>());
        break;
      case GgufType::kI32:
        put(v.get<std::int32_t>());
        break;
      case GgufType::kF32:
        put(v.get<float>());
        break;
      case GgufType::kU64:
        put(v.get<std::uint64_t>());
        break;
      case GgufType::kI64:
        put(v.get<std::int64_t>());
        break;
      case GgufType::kF64:
        put(v.get<double>());
        break;
      case GgufType::kBool:
        put<std::uint8_t>(v.get<bool>() ? 1 : 0);
        break;
      case GgufType::kString:
        put_string(v.get<std::string>());
        break;
      case GgufType::kArray:
        throw InternalError("GGUF writer: nested array");
    }
  }
  std::vector<std::uint8_t> bytes;
};

}  // namespace

void GgufWriter::write(const std::filesystem::path& path) const {
  Buffer b;
  b.put<std::uint32_t>(kGgufMagic);
  b.put<std::uint32_t>(3);
  b.put<std::uint64_t>(tensors_.size());
  b.put<std::uint64_t>(kv_.size());
  for (const auto& [key, v] : kv_) {
    b.put_string(key);
    b.put<std::uint32_t>(static_cast<std::uint32_t>(v.type));
    if (v.type == GgufType::kArray) {
      b.put<std::uint32_t>(static_cast<std::uint32_t>(v.elem));
      b.put<std::uint64_t>(v.value.size());
      for (const json& x : v.value) b.put_scalar(v.elem, x);
    } else {
      b.put_scalar(v.type, v.value);
    }
  }
  for (const Pending& p : tensors_) {
    b.put_string(p.entry.name);
    b.put<std::uint32_t>(static_cast<std::uint32_t>(p.entry.shape.size()));
    for (auto it = p.entry.shape.rbegin(); it != p.entry.shape.rend(); ++it)
      b.put<std::int64_t>(*it);
    b.put<std::int32_t>(ggml_type_of(p.entry.dtype));
    b.put<std::uint64_t>(p.entry.offset);
  }
  const std::uint64_t data_start =
      (b.bytes.size() + kGgufDefaultAlignment - 1) / kGgufDefaultAlignment * kGgufDefaultAlignment;
  b.bytes.resize(data_start, 0);
  File file = File::create(path);
  file.write_at(b.bytes.data(), b.bytes.size(), 0);
  for (const Pending& p : tensors_) {
    if (!p.header_only) file.write_at(p.data.data(), p.data.size(), data_start + p.entry.offset);
  }
  file.truncate(data_start + data_bytes_);
}

}  // namespace k3::model
