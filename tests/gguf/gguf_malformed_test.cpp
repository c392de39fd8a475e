// A generated corpus of malformed GGUF files: a valid file truncated at every byte, and one
// hand-made file per hostile field (magic, version, counts, lengths, types, dims, offsets,
// duplicates, alignment). Each must fail with a snapkv::RuntimeError naming the key or tensor at
// fault and what was wrong; none may crash or read out of bounds (run under ASan in CI).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "gguf/exercise.h"
#include "gguf_malformed_cases.h"

namespace snapkv::gguf {
namespace {

using testing::Case;
using testing::expect_gguf_error;
using testing::malformed_cases;
using testing::Raw;
using testing::sample_writer;

// Bytes one metadata value takes on disk after its i32 type.
size_t value_disk_size(const Value& v) {
  return std::visit(
      [](const auto& x) -> size_t {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return 8 + x.size();
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          size_t n = 12;
          for (const auto& s : x) n += 8 + s.size();
          return n;
        } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
          return 12 + x.size();
        } else if constexpr (requires { x.size(); }) {
          return 12 + x.size() * sizeof(typename T::value_type);
        } else {
          return sizeof(T);
        }
      },
      v.storage());
}

// The error a file truncated at `cut` bytes must report, as substrings of the message.
std::vector<std::string> expected_for_cut(const File& full, size_t cut) {
  const size_t n_kv = full.metadata().size();
  const size_t n_t = full.tensors().size();
  if (cut < 4) return {"header: truncated file while reading magic"};
  if (cut < 8) return {"header: truncated file while reading version"};
  if (cut < 16) return {"header: truncated file while reading tensor count"};
  if (cut < 24) return {"header: truncated file while reading metadata count"};
  const size_t left = cut - 24;
  if (n_t > left / 32) return {"header: tensor count out of range for the file size"};
  if (n_kv > left / 13) return {"header: metadata count out of range for the file size"};
  if (n_t * 32 + n_kv * 13 > left) return {"header: tensor and metadata counts too large"};
  size_t pos = 24;
  for (size_t i = 0; i < n_kv; ++i) {
    const KeyValue& kv = full.metadata()[i];
    const size_t key_end = pos + 8 + kv.key.size();
    const size_t end = key_end + 4 + value_disk_size(kv.value);
    if (cut < key_end) return {"key #" + std::to_string(i) + ":"};
    if (cut < end) return {"key '" + kv.key + "':"};
    pos = end;
  }
  for (size_t i = 0; i < n_t; ++i) {
    const TensorInfo& t = full.tensors()[i];
    const size_t name_end = pos + 8 + t.name.size();
    const size_t end = name_end + 4 + 8 * t.ne.size() + 4 + 8;
    if (cut < name_end) return {"tensor #" + std::to_string(i) + ":"};
    if (cut < end) return {"tensor '" + t.name + "':", "truncated"};
    pos = end;
  }
  if (cut < full.data_offset()) return {"data section: starts past the end of the file"};
  for (const TensorInfo& t : full.tensors()) {
    if (cut < full.data_offset() + t.offset + t.n_bytes) {
      return {"tensor '" + t.name + "': data extends past the end of the file"};
    }
  }
  return {};  // only trailing padding is missing: still a valid file
}

// Truncates bytes at every offset; returns how many truncations still parse (only cuts into the
// padding after the last tensor may).
size_t check_every_truncation(const std::vector<uint8_t>& bytes) {
  const File full = File::from_bytes(bytes);
  size_t n_valid = 0;
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    const std::vector<uint8_t> part(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(cut));
    const std::vector<std::string> want = expected_for_cut(full, cut);
    if (want.empty()) {
      EXPECT_NO_THROW(File::from_bytes(part)) << "cut " << cut;
      ++n_valid;
      continue;
    }
    try {
      File::from_bytes(part);
      ADD_FAILURE() << "cut " << cut << " parsed, expected: " << want[0];
    } catch (const RuntimeError& e) {
      for (const std::string& w : want) {
        EXPECT_NE(std::string(e.what()).find(w), std::string::npos)
            << "cut " << cut << ": '" << w << "' not in: " << e.what();
      }
    }
  }
  return n_valid;
}

TEST(GgufMalformed, TruncatedAtEveryByte) {
  // Every section of the sample: header, 26 keys of every type, 6 tensor infos, padding, data.
  // Its last tensor is empty and sits at the padded end of the one before: no cut is valid.
  EXPECT_EQ(check_every_truncation(sample_writer().to_bytes()), 0u);
  // One f32 tensor of 5 values: 20 data bytes then 12 bytes of padding that may be cut off.
  Writer w;
  w.set_string("general.name", "x");
  w.add_tensor_f32("t", TensorType::f32, {5}, testing::test_values(5, 1));
  EXPECT_EQ(check_every_truncation(w.to_bytes()), 12u);
}

TEST(GgufMalformed, EachHostileFieldGivesItsNamedError) {
  const std::vector<Case> cases = malformed_cases();
  EXPECT_GE(cases.size(), 50u);
  for (const Case& c : cases) {
    std::vector<std::string_view> parts(c.expect.begin(), c.expect.end());
    SCOPED_TRACE(c.name);
    try {
      File::from_bytes(c.bytes);
      ADD_FAILURE() << c.name << ": parsed, expected " << c.expect[0];
    } catch (const RuntimeError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[gguf] ", 0), 0u) << e.what();
      for (const auto& p : c.expect) {
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
            << c.name << ": '" << p << "' not in: " << e.what();
      }
    }
    EXPECT_FALSE(detail::exercise_reader(c.bytes.data(), c.bytes.size())) << c.name;
  }
}

TEST(GgufMalformed, OddButValidLayoutsParse) {
  // alignment 1: tensors packed back to back at odd offsets
  Raw r;
  r.header(2, 1).kv_u32("general.alignment", 1).info("a", {3}, 1, 0).info("b", {1}, 0, 6);
  r.put<uint16_t>(0x3C00).put<uint16_t>(0x4000).put<uint16_t>(0xC000).put(5.0f);
  const File f = File::from_bytes(r.bytes);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[1].offset, 6u);
  float row[3];
  dequantize_row(row, f.tensors()[0].data, TensorType::f16, 3);
  EXPECT_EQ(row[2], -2.0f);
  dequantize_row(row, f.tensors()[1].data, TensorType::f32, 1);  // unaligned: memcpy'd
  EXPECT_EQ(row[0], 5.0f);
  EXPECT_TRUE(detail::exercise_reader(r.bytes.data(), r.bytes.size()));
  // zero-sized tensors and a data section with no tensors in it
  Raw z;
  z.header(2, 0).info("e", {0}, 0, 0).info("f", {4, 0}, 0, 0).pad_to(32);
  EXPECT_EQ(File::from_bytes(z.bytes).tensors()[1].n_bytes, 0u);
  EXPECT_TRUE(File::from_bytes(Raw().header(0, 0).bytes).tensors().empty());
}

TEST(GgufMalformed, LoweredTensorCountOfARealLayoutIsAnError) {
  // A written file whose tensor count is lowered by one. Its last info is read
  // as padding (or, when it fits in the padding, its data is left over): never a silent load.
  const std::vector<uint8_t> bytes = sample_writer().to_bytes();
  const File full = File::from_bytes(bytes);
  std::vector<uint8_t> lowered = bytes;
  const auto n = static_cast<int64_t>(full.tensors().size()) - 1;
  std::memcpy(lowered.data() + 8, &n, sizeof n);
  expect_gguf_error(lowered, {"data section: ", "(tensor count too low?)"}, "lowered count");
  // The same file with a tensor's worth of extra data appended.
  std::vector<uint8_t> longer = bytes;
  longer.insert(longer.end(), 64, 0);
  expect_gguf_error(longer, {"data section: bytes after the last tensor"}, "trailing data");
}

TEST(GgufMalformed, WriterRefusesAlignmentAboveTheBound) {
  Writer w;
  EXPECT_NO_THROW(w.set_alignment(kMaxAlignment));
  EXPECT_THROW(w.set_alignment(kMaxAlignment * 2), std::invalid_argument);
  EXPECT_THROW(w.set_alignment(1u << 31), std::invalid_argument);
  EXPECT_EQ(File::from_bytes(w.to_bytes()).alignment(), kMaxAlignment);
}

}  // namespace
}  // namespace snapkv::gguf
