// Writer -> reader round trips of every value type and tensor type, the exact byte layout the
// writer produces, typed getters, mmap'd files, and the API's argument checks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "gguf_test_util.h"

namespace snapkv::gguf {
namespace {

using testing::Raw;
using testing::sample_writer;
using testing::test_values;

template <class T>
const T& as(const File& f, std::string_view key) {
  const Value* v = f.find(key);
  EXPECT_NE(v, nullptr) << key;
  const T* p = v->get_if<T>();
  EXPECT_NE(p, nullptr) << key << " holds " << v->to_string();
  return *p;
}

TEST(GgufRoundTrip, EveryValueType) {
  const File f = File::from_bytes(sample_writer().to_bytes());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(as<std::string>(f, "general.architecture"), "llama");
  EXPECT_EQ(as<uint8_t>(f, "t.u8"), 200);
  EXPECT_EQ(as<int8_t>(f, "t.i8"), -100);
  EXPECT_EQ(as<uint16_t>(f, "t.u16"), 60000);
  EXPECT_EQ(as<int16_t>(f, "t.i16"), -30000);
  EXPECT_EQ(as<uint32_t>(f, "t.u32"), 4000000000u);
  EXPECT_EQ(as<int32_t>(f, "t.i32"), -2000000000);
  EXPECT_EQ(as<float>(f, "t.f32"), 1.5f);
  EXPECT_EQ(as<bool>(f, "t.bool"), true);
  EXPECT_EQ(as<std::string>(f, "t.string"), std::string("h\xC3\xA9llo\0x", 8));
  EXPECT_EQ(as<uint64_t>(f, "t.u64"), 18000000000000000000ull);
  EXPECT_EQ(as<int64_t>(f, "t.i64"), -9000000000000000000ll);
  EXPECT_EQ(as<double>(f, "t.f64"), -2.25e300);
  EXPECT_EQ(as<std::vector<uint8_t>>(f, "t.arr.u8"), (std::vector<uint8_t>{0, 1, 255}));
  EXPECT_EQ(as<std::vector<int8_t>>(f, "t.arr.i8"), (std::vector<int8_t>{-128, 0, 127}));
  EXPECT_EQ(as<std::vector<uint16_t>>(f, "t.arr.u16"), (std::vector<uint16_t>{1, 65535}));
  EXPECT_EQ(as<std::vector<int16_t>>(f, "t.arr.i16"), (std::vector<int16_t>{-32768, 32767}));
  EXPECT_EQ(as<std::vector<uint32_t>>(f, "t.arr.u32"), (std::vector<uint32_t>{7, 4294967295u}));
  EXPECT_EQ(as<std::vector<int32_t>>(f, "t.arr.i32"), (std::vector<int32_t>{-1, 0, 1, 2147483647}));
  const auto& f32s = as<std::vector<float>>(f, "t.arr.f32");
  ASSERT_EQ(f32s.size(), 3u);
  EXPECT_EQ(f32s[0], 0.5f);
  EXPECT_TRUE(std::signbit(f32s[1]));  // -0.0 survives bit-exactly
  EXPECT_EQ(f32s[2], 3.0e38f);
  EXPECT_EQ(as<std::vector<bool>>(f, "t.arr.bool"), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(as<std::vector<std::string>>(f, "t.arr.string"),
            (std::vector<std::string>{"<s>", "", "</s>", "<0x0A>"}));
  EXPECT_EQ(as<std::vector<uint64_t>>(f, "t.arr.u64"),
            (std::vector<uint64_t>{0, 18446744073709551615ull}));
  EXPECT_EQ(as<std::vector<int64_t>>(f, "t.arr.i64"),
            (std::vector<int64_t>{-1, 9223372036854775807ll}));
  EXPECT_EQ(as<std::vector<double>>(f, "t.arr.f64"), (std::vector<double>{1e-300, -0.125}));
  EXPECT_TRUE(as<std::vector<float>>(f, "t.arr.empty").empty());

  // insertion order is file order
  const Writer w = sample_writer();
  ASSERT_EQ(f.metadata().size(), w.metadata().size());
  for (size_t i = 0; i < w.metadata().size(); ++i) {
    EXPECT_EQ(f.metadata()[i].key, w.metadata()[i].key);
    EXPECT_EQ(f.metadata()[i].value.type(), w.metadata()[i].value.type());
  }
  EXPECT_EQ(f.find("t.arr.bool")->array_type(), ValueType::boolean);
  EXPECT_EQ(f.find("t.arr.bool")->array_size(), 3u);
  EXPECT_EQ(f.find("t.arr.string")->to_string(2), "[4 x string: \"<s>\", \"\", ...]");
}

TEST(GgufRoundTrip, EveryTensorTypeKeepsItsBytes) {
  const Writer w = sample_writer();
  const File f = File::from_bytes(w.to_bytes());
  ASSERT_EQ(f.tensors().size(), 6u);
  struct Expect {
    const char* name;
    TensorType type;
    std::vector<int64_t> ne;
    uint64_t seed;
  };
  const std::vector<Expect> expected = {
      {"w.f32", TensorType::f32, {5, 3}, 1},      {"w.f16", TensorType::f16, {7, 2}, 2},
      {"w.q8_0", TensorType::q8_0, {64, 3}, 3},   {"w.q4_0", TensorType::q4_0, {32, 2}, 4},
      {"w.bf16", TensorType::bf16, {3, 2, 2}, 5}, {"w.empty", TensorType::f32, {0, 4}, 0}};
  uint64_t running = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const TensorInfo& t = f.tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, expected[i].name);
    EXPECT_EQ(t.type, expected[i].type);
    EXPECT_EQ(t.ne, expected[i].ne);
    EXPECT_EQ(t.offset, running);
    EXPECT_EQ(t.n_bytes, tensor_n_bytes(t.type, t.ne));
    EXPECT_EQ(t.data, f.bytes() + f.data_offset() + t.offset);
    running += (t.n_bytes + 31) / 32 * 32;
    EXPECT_EQ(f.find_tensor(t.name), &t);
    if (t.n_elements() == 0) continue;
    // Decoding the stored bytes equals encoding the source values and decoding that.
    const auto n = static_cast<size_t>(t.n_elements());
    const std::vector<float> src = test_values(n, expected[i].seed);
    std::vector<uint8_t> encoded(t.n_bytes);
    std::vector<float> want(n), got(n);
    const auto row = static_cast<size_t>(t.row_length());
    for (int64_t r = 0; r < t.n_rows(); ++r) {
      const size_t o = static_cast<size_t>(r) * row;
      quantize_row(encoded.data() + o / block_size(t.type) * type_size(t.type), src.data() + o,
                   t.type, row);
      dequantize_row(got.data() + o, t.row(r), t.type, row);
    }
    EXPECT_EQ(std::memcmp(encoded.data(), t.data, t.n_bytes), 0);
    dequantize_row(want.data(), encoded.data(), t.type, n);
    EXPECT_EQ(got, want);
  }
  EXPECT_EQ(f.size(), f.data_offset() + running);  // the last tensor is padded too, as ggml
}

// The writer's bytes equal a file assembled field by field from the format description.
TEST(GgufRoundTrip, WriterLayoutMatchesTheFormatByteForByte) {
  Writer w;
  w.set_string("general.architecture", "llama");
  w.set_alignment(64);
  w.set_string_array("tokenizer.ggml.tokens", {"a", "bc"});
  w.set("flag", Value(true));
  const std::vector<float> a = {1.0f, 2.0f, 3.0f};
  w.add_tensor("a", TensorType::f32, {3, 1, 1},
               std::span(reinterpret_cast<const uint8_t*>(a.data()), 12), false);
  const std::vector<uint8_t> b(34, 0x11);
  w.add_tensor("b", TensorType::q8_0, {32}, b);

  Raw r;
  r.header(2, 4);
  r.kv_string("general.architecture", "llama");
  r.kv_u32("general.alignment", 64);
  r.str("tokenizer.ggml.tokens").i32(9).i32(8).u64(2).str("a").str("bc");
  r.str("flag").i32(7).u8(1);
  r.info("a", {3}, 0, 0);  // trailing 1s dropped, as ggml_n_dims
  r.info("b", {32}, 8, 64);
  r.pad_to(64);
  r.put(1.0f).put(2.0f).put(3.0f).pad_to(64);
  r.bytes.insert(r.bytes.end(), b.begin(), b.end());
  r.pad_to(64);
  EXPECT_EQ(w.to_bytes(), r.bytes);
  EXPECT_EQ(File::from_bytes(r.bytes).alignment(), 64u);
}

TEST(GgufRoundTrip, SettingAKeyAgainReplacesItInPlace) {
  Writer w;
  w.set_u32("a", 1);
  w.set_u32("b", 2);
  w.set_string("a", "x");
  const File f = File::from_bytes(w.to_bytes());
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata()[0].key, "a");
  EXPECT_EQ(f.get_string("a"), "x");
}

TEST(GgufRoundTrip, EmptyFileHasOnlyTheHeader) {
  const std::vector<uint8_t> bytes = Writer().to_bytes();
  EXPECT_EQ(bytes.size(), 32u);  // 24-byte header padded to 32
  const File f = File::from_bytes(bytes);
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_TRUE(f.tensors().empty());
}

TEST(GgufGetters, TypedAccessAndNamedErrors) {
  Writer w;
  w.set_u8("small", 7);
  w.set_i64("big", -5);
  w.set_u64("huge", 1ull << 40);
  w.set_f64("double", 0.25);
  w.set_f64("double.big", 1e300);
  w.set_string("s", "text");
  const File f = File::from_bytes(w.to_bytes());
  EXPECT_EQ(f.get_u32("small"), 7u);  // any integer type that fits
  EXPECT_EQ(f.get_i32("big"), -5);
  EXPECT_EQ(f.get_u64("huge"), 1ull << 40);
  EXPECT_EQ(f.get_f32("double"), 0.25f);
  EXPECT_EQ(f.get_u32_or("absent", 11u), 11u);
  EXPECT_EQ(f.get_f32_or("absent", 1e4f), 1e4f);
  EXPECT_EQ(f.get_string_or("absent", "fb"), "fb");
  EXPECT_EQ(f.get_bool_or("absent", true), true);

  const auto expect_error = [](auto&& fn, std::initializer_list<std::string_view> parts) {
    try {
      fn();
      ADD_FAILURE() << "no error, expected " << *parts.begin();
    } catch (const RuntimeError& e) {
      for (const auto p : parts)
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  };
  expect_error([&] { (void)f.get_u32("absent"); }, {"key 'absent' missing"});
  expect_error([&] { (void)f.get_u32("big"); }, {"key 'big' out of range", "got -5"});
  expect_error([&] { (void)f.get_i32("huge"); }, {"key 'huge' out of range", "1099511627776"});
  expect_error([&] { (void)f.get_u32("s"); }, {"key 's' has the wrong type", "got string"});
  expect_error([&] { (void)f.get_u32_or("s", 1); }, {"key 's' has the wrong type"});
  expect_error([&] { (void)f.get_string("small"); }, {"key 'small'", "got u8", "expected string"});
  expect_error([&] { (void)f.get_f32("double.big"); }, {"key 'double.big' out of range"});
  expect_error([&] { (void)f.get_bool("small"); }, {"expected bool"});
  expect_error([&] { (void)f.get_string_array("s"); }, {"expected array of string"});
  expect_error([&] { (void)f.get_f32_array("s"); }, {"expected array of f32"});
  expect_error([&] { (void)f.get_i32_array("s"); }, {"expected array of i32"});
  expect_error([&] { (void)f.get_tensor("nope"); }, {"tensor 'nope' missing"});
}

TEST(GgufFile, OpenMapsAFileAndMoves) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("gguf_test_" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  const Writer w = sample_writer();
  w.write(path);
  File f = File::open(path);
  std::filesystem::remove(path);  // the mapping stays valid after unlink
  const TensorInfo* t = f.find_tensor("w.q8_0");
  ASSERT_NE(t, nullptr);
  const File moved = std::move(f);
  EXPECT_EQ(moved.find_tensor("w.q8_0"), t);  // zero-copy views survive the move
  const std::vector<uint8_t> bytes = w.to_bytes();
  ASSERT_EQ(moved.size(), bytes.size());
  EXPECT_EQ(std::memcmp(moved.bytes(), bytes.data(), bytes.size()), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(moved.bytes() + moved.data_offset()) % 32, 0u);

  try {
    File::open(path);
    ADD_FAILURE() << "opened a missing file";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open file '" + path + "'"), std::string::npos);
  }
  EXPECT_THROW(w.write("/nonexistent-dir/x.gguf"), RuntimeError);
}

TEST(GgufFile, ErrorsFromAFileNameThePath) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("gguf_bad_" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  std::ofstream(path, std::ios::binary) << "GGML0000";
  try {
    File::open(path);
    ADD_FAILURE() << "parsed a bad file";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": header: bad magic"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove(path);
}

TEST(GgufWriter, RejectsBadArguments) {
  Writer w;
  const std::vector<uint8_t> four(4);
  EXPECT_THROW(w.set_u32("", 1), std::invalid_argument);
  EXPECT_THROW(w.set_alignment(48), std::invalid_argument);
  EXPECT_THROW(w.set_alignment(0), std::invalid_argument);
  EXPECT_THROW(w.set_string("general.alignment", "32"), std::invalid_argument);
  EXPECT_THROW(w.add_tensor("", TensorType::f32, {1}, four), std::invalid_argument);
  EXPECT_THROW(w.add_tensor(std::string(64, 'x'), TensorType::f32, {1}, four),
               std::invalid_argument);
  EXPECT_NO_THROW(w.add_tensor(std::string(63, 'x'), TensorType::f32, {1}, four));
  EXPECT_THROW(w.add_tensor(std::string(63, 'x'), TensorType::f32, {1}, four),
               std::invalid_argument);                                                 // duplicate
  EXPECT_THROW(w.add_tensor("t", TensorType::f32, {2}, four), std::invalid_argument);  // size
  EXPECT_THROW(w.add_tensor("t", TensorType::f32, {}, four), std::invalid_argument);
  EXPECT_THROW(w.add_tensor("t", TensorType::f32, {1, 1, 1, 1, 1}, four), std::invalid_argument);
  EXPECT_THROW(w.add_tensor("t", TensorType::f32, {-1}, four), std::invalid_argument);
  EXPECT_THROW(w.add_tensor("t", TensorType::q8_0, {16}, four), std::invalid_argument);
  EXPECT_THROW(w.add_tensor("t", static_cast<TensorType>(3), {1}, four), std::invalid_argument);
  EXPECT_THROW(w.add_tensor_f32("t", TensorType::f32, {3}, std::vector<float>(2)),
               std::invalid_argument);
  EXPECT_EQ(w.n_tensors(), 1u);
}

TEST(GgufShape, CheckShapeNamesTheTensor) {
  TensorInfo t;
  t.name = "blk.0.attn_q.weight";
  t.ne = {64, 128};
  EXPECT_NO_THROW(check_shape(t, std::vector<int64_t>{64, 128}));
  EXPECT_NO_THROW(check_shape(t, std::vector<int64_t>{64, 128, 1, 1}));
  try {
    check_shape(t, std::vector<int64_t>{128, 64});
    ADD_FAILURE() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_STREQ(e.what(),
                 "[gguf] tensor 'blk.0.attn_q.weight': wrong shape, got {64, 128}, expected "
                 "{128, 64}");
  }
}

}  // namespace
}  // namespace snapkv::gguf
