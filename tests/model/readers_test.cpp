// The safetensors and GGUF header readers on handmade bytes: a round trip through the writers,
// and every malformed header rejected with a message that names the file and what was wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "model/checkpoint/checkpoint.h"
#include "model/config.h"
#include "model/checkpoint/file.h"
#include "model/checkpoint/gguf.h"
#include "model/checkpoint/safetensors.h"
#include "common/error.h"
#include "tests/model/test_dirs.h"

namespace k3::model {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

std::vector<std::uint8_t> safetensors_bytes(const std::string& header, std::size_t data_bytes) {
  std::vector<std::uint8_t> out(8 + header.size() + data_bytes, 0);
  const std::uint64_t len = header.size();
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

std::string parse_st(const std::string& header, std::size_t data_bytes) {
  const auto bytes = safetensors_bytes(header, data_bytes);
  return error_of([&] { parse_safetensors_header(bytes, bytes.size(), "x.safetensors"); });
}

TEST(Safetensors, RoundTrip) {
  SafetensorsWriter w;
  const std::vector<std::uint8_t> a(2 * 3 * 2, 7), b(4 * 4, 9);
  w.add("a", DType::kBF16, {2, 3}, a);
  w.add("b", DType::kF32, {4}, b);
  w.set_metadata("format", "pt");
  const fs::path p = test::scratch_dir() / "roundtrip.safetensors";
  w.write(p);
  const SafetensorsHeader h = read_safetensors_header(p);
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "a");
  EXPECT_EQ(h.tensors[0].shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(h.tensors[1].offset, h.data_start + 12);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.data_start % 8, 0u);
}

TEST(Safetensors, RejectsMalformedHeaders) {
  EXPECT_EQ(error_of([] {
              std::vector<std::uint8_t> b(5);
              parse_safetensors_header(b, 5, "x.safetensors");
            }),
            "x.safetensors: file of 5 bytes is too short for the 8-byte safetensors header length");
  {
    auto bytes = safetensors_bytes("{}", 0);
    const std::uint64_t len = 1000;
    std::memcpy(bytes.data(), &len, 8);
    EXPECT_EQ(
        error_of([&] { parse_safetensors_header(bytes, bytes.size(), "x.safetensors"); }),
        "x.safetensors: header length 1000 runs past the end of the 10-byte file (truncated?)");
  }
  EXPECT_EQ(parse_st("{\"a\": ", 0),
            "x.safetensors: invalid JSON at line 1, column 7: syntax error while parsing value - "
            "unexpected end of input; expected '[', '{', or a literal; a safetensors header is "
            "one JSON object of tensor entries");
  EXPECT_EQ(
      parse_st(
          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          8),
      "x.safetensors: header names tensor 'a' twice");
  EXPECT_EQ(parse_st(R"({"a":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", 4),
            "x.safetensors: tensor 'a': dtype 'F8_E4M3' is not supported (F64, F32, F16, BF16, "
            "I64, I32, I16, I8, U8, BOOL)");
  EXPECT_EQ(parse_st(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
            "x.safetensors: tensor 'a': data_offsets [0, 8] hold 8 bytes, but F32 [3] needs 12");
  EXPECT_EQ(parse_st(R"({"a":{"dtype":"F32","shape":[-3],"data_offsets":[0,8]}})", 8),
            "x.safetensors: tensor 'a': shape [-3] has a non-integer or negative dimension");
  // Absolute byte positions are 8 (length field) + header length + data offset.
  auto at = [](const std::string& header, std::uint64_t rel) {
    return std::to_string(8 + header.size() + rel);
  };
  const std::string past = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  EXPECT_EQ(parse_st(past, 8), "x.safetensors: file is truncated: tensor 'a' ends at byte " +
                                   at(past, 16) + " but the file has " + at(past, 8) + " bytes");
  const std::string overlap =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  EXPECT_EQ(parse_st(overlap, 12),
            "x.safetensors: tensors 'a' and 'b' overlap at file byte " + at(overlap, 4));
  const std::string hole = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_EQ(parse_st(hole, 8), "x.safetensors: bytes [" + at(hole, 0) + ", " + at(hole, 4) +
                                   ") belong to no tensor (a hole before tensor 'a')");
  const std::string trailing = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_EQ(parse_st(trailing, 8),
            "x.safetensors: 4 trailing bytes after the last tensor (file of " + at(trailing, 8) +
                " bytes, tensors end at " + at(trailing, 4) + ")");
  EXPECT_EQ(parse_st(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8),
            "x.safetensors: tensor 'a': data_offsets [8, 4] end before they begin");
}

fs::path write_small_gguf(const std::string& name) {
  GgufWriter w;
  w.set_string("general.architecture", "kimi-k3");
  w.set_u32("kimi-k3.block_count", 2);
  w.set_strings("tokenizer.ggml.tokens", {"a", "b", "c"});
  w.set_i32s("kimi-k3.attention.head_count_kv", {0, 1});
  std::vector<std::uint8_t> q4(18 * 2, 0x11), f32(16, 0);
  w.add_tensor("blk.0.attn_k_b.weight", DType::kQ4_0, {1, 64}, q4);
  w.add_tensor("output_norm.weight", DType::kF32, {4}, f32);
  const fs::path p = test::scratch_dir() / name;
  w.write(p);
  return p;
}

std::vector<std::uint8_t> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(Gguf, RoundTrip) {
  const GgufFile g = read_gguf_header(write_small_gguf("small.gguf"));
  EXPECT_EQ(g.version, 3u);
  EXPECT_EQ(g.string("general.architecture"), "kimi-k3");
  EXPECT_EQ(g.u32("kimi-k3.block_count"), 2u);
  EXPECT_EQ(g.strings("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(g.integers("kimi-k3.attention.head_count_kv"), (std::vector<std::int64_t>{0, 1}));
  ASSERT_EQ(g.tensors.size(), 2u);
  EXPECT_EQ(g.tensors[0].dtype, DType::kQ4_0);
  EXPECT_EQ(g.tensors[0].shape, (std::vector<std::int64_t>{1, 64}));
  EXPECT_EQ(g.tensors[0].nbytes, 36u);
  EXPECT_EQ(g.tensors[1].offset, g.data_start + 64);  // 36 bytes padded to the 32-byte alignment
  EXPECT_EQ(g.data_start % 32, 0u);
  EXPECT_EQ(error_of([&] { g.u32("general.architecture"); }),
            g.path + ": GGUF key 'general.architecture' is STRING, expected UINT32");
}

// Damages a copy of the small file at `offset` and returns the reader's message.
std::string damaged(std::size_t offset, const std::vector<std::uint8_t>& patch,
                    std::size_t truncate_to = 0) {
  auto bytes = read_all(write_small_gguf("damaged.gguf"));
  if (!patch.empty()) std::memcpy(bytes.data() + offset, patch.data(), patch.size());
  if (truncate_to) bytes.resize(truncate_to);
  return error_of([&] { parse_gguf_header(bytes, bytes.size(), "m.gguf"); });
}

std::vector<std::uint8_t> le32(std::uint32_t v) {
  std::vector<std::uint8_t> b(4);
  std::memcpy(b.data(), &v, 4);
  return b;
}
std::vector<std::uint8_t> le64(std::uint64_t v) {
  std::vector<std::uint8_t> b(8);
  std::memcpy(b.data(), &v, 8);
  return b;
}

TEST(Gguf, RejectsMalformedFiles) {
  EXPECT_EQ(damaged(0, {'G', 'G', 'M', 'L'}),
            "m.gguf: bad magic 0x4c4d4747, expected 0x46554747 (\"GGUF\") (at byte 4)");
  EXPECT_EQ(damaged(4, le32(4)),
            "m.gguf: unsupported GGUF version 4 (expected 2 or 3) (at byte 8)");
  EXPECT_EQ(damaged(4, le32(0x03000000)),
            "m.gguf: version 50331648 looks byte-swapped (big-endian file?) (at byte 8)");
  // The first key's length (at byte 24) claims far more than the file holds.
  const std::size_t file_size = read_all(write_small_gguf("size.gguf")).size();
  EXPECT_EQ(damaged(24, le64(1ull << 40)),
            "m.gguf: a metadata key has length 1099511627776, more than the " +
                std::to_string(file_size - 32) + " bytes left in the file (at byte 32)");
  EXPECT_EQ(damaged(8, le64(1ull << 50)),
            "m.gguf: tensor count 1125899906842624 cannot fit in the file (at byte 24)");
  const auto file = read_all(write_small_gguf("probe.gguf"));
  const GgufFile g = parse_gguf_header(file, file.size(), "probe.gguf");
  // The second tensor's offset field is the last 8 bytes before the padding of the header.
  std::size_t info_end = 0;
  {
    // Locate "output_norm.weight" in the tensor infos; its offset follows n_dims, ne and type.
    const std::string key = "output_norm.weight";
    const auto it = std::search(file.begin() + 200, file.end(), key.begin(), key.end());
    info_end = static_cast<std::size_t>(it - file.begin()) + key.size() + 4 + 8 + 4;
  }
  EXPECT_EQ(damaged(info_end, le64(33)),
            "m.gguf: tensor 'output_norm.weight': offset 33 is not a multiple of the alignment 32 "
            "(at byte " +
                std::to_string(info_end + 8) + ")");
  EXPECT_EQ(damaged(info_end, le64(1ull << 20)),
            "m.gguf: tensor 'output_norm.weight': data [1048576, 1048592) of the data section runs "
            "past the end of "
            "the file (data section of " +
                std::to_string(file.size() - g.data_start) + " bytes; truncated?) (at byte " +
                std::to_string(info_end + 8) + ")");
  EXPECT_EQ(damaged(info_end, le64(0)),
            "m.gguf: tensors 'blk.0.attn_k_b.weight' and 'output_norm.weight' overlap (at byte " +
                std::to_string(info_end + 8) + ")");
  EXPECT_EQ(damaged(0, {}, 100).rfind("m.gguf: file ends inside", 0), 0u);
}

// A number nlohmann-json cannot hold (out_of_range.406) is bad input, never an internal error.
TEST(JsonReaders, NumberOverflowIsAnInputErrorNamingTheFile) {
  // The input libFuzzer found in fuzz_modelslim_description.
  EXPECT_EQ(error_of([] {
              parse_modelslim_description("333126666666626e66633~33133126666666626e6666665",
                                          "q/quant_model_description.json");
            }),
            "q/quant_model_description.json: invalid JSON: number overflow parsing "
            "'333126666666626e66633'");
  EXPECT_EQ(parse_st(R"({"a":{"dtype":"F32","shape":[1e99999],"data_offsets":[0,4]}})", 4),
            "x.safetensors: invalid JSON: number overflow parsing '1e99999'; a safetensors header "
            "is one JSON object of tensor entries");
  const fs::path config = test::scratch_dir() / "overflow-config.json";
  std::ofstream(config) << R"({"model_type": "kimi_k3", "hidden_size": 1e99999})";
  EXPECT_EQ(error_of([&] { read_config_json(config); }),
            config.string() + ": invalid JSON: number overflow parsing '1e99999'");
}

// A value of the wrong type that a reader did not check first is still an input error.
TEST(JsonReaders, ModelSlimDescriptionOfTheWrongShape) {
  EXPECT_EQ(error_of([] { parse_modelslim_description("[1, 2]", "q.json"); }),
            "q.json: expected a JSON object");
  EXPECT_EQ(error_of([] { parse_modelslim_description("{\"group_size\": \"64\"}", "q.json"); }),
            "q.json: group_size is \"64\", expected a non-negative integer");
}

// A repacked matrix's source pages leave the resident set (FileMapping::release); the bytes
// stay readable, faulted back in from the file, and a range that holds no whole page is a no-op.
TEST(FileMapping, ReleasedPagesReadBackTheFile) {
  const fs::path path = k3::test::scratch_dir() / "release.bin";
  std::string contents(5 * 4096 + 123, '\0');
  for (std::size_t i = 0; i < contents.size(); ++i) contents[i] = static_cast<char>(i * 131 % 251);
  std::ofstream(path, std::ios::binary) << contents;
  const auto map = FileMapping::map(File::open_read(path));
  map->populate(0, contents.size());
  const auto all = map->bytes(0, contents.size());
  FileMapping::release(map->bytes(100, 3 * 4096));  // whole pages 1 and 2 only
  FileMapping::release(map->bytes(4096 + 1, 10));   // no whole page
  FileMapping::release(all);
  EXPECT_EQ(0, std::memcmp(all.data(), contents.data(), contents.size()));
}

}  // namespace
}  // namespace k3::model
