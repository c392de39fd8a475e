// The K-quant tensor types in the gguf layer: ids, names, block arithmetic, writer -> reader
// round trip, and the error that names a type this project does not read.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf_test_util.h"
#include "snapkv/gguf/gguf.h"

namespace snapkv::gguf {
namespace {

using testing::expect_gguf_error;
using testing::Raw;
using testing::test_values;

struct TypeFacts {
  TensorType type;
  int32_t id;
  const char* name;
  size_t bytes;  // per 256-element block
};
constexpr TypeFacts kKQuants[] = {{TensorType::q2_K, 10, "q2_K", 84},
                                  {TensorType::q3_K, 11, "q3_K", 110},
                                  {TensorType::q4_K, 12, "q4_K", 144},
                                  {TensorType::q5_K, 13, "q5_K", 176},
                                  {TensorType::q6_K, 14, "q6_K", 210}};

TEST(GgufKQuant, IdsNamesAndSizes) {
  for (const TypeFacts& f : kKQuants) {
    SCOPED_TRACE(f.name);
    EXPECT_EQ(tensor_type_from_id(f.id), f.type);
    EXPECT_EQ(tensor_type_name(f.type), f.name);
    EXPECT_EQ(tensor_type_from_name(f.name), f.type);
    std::string upper(f.name);
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(tensor_type_from_name(upper), f.type);
    EXPECT_EQ(block_size(f.type), 256u);
    EXPECT_EQ(type_size(f.type), f.bytes);
    const int64_t ne[2] = {512, 3};
    EXPECT_EQ(tensor_n_bytes(f.type, ne), 2 * 3 * f.bytes);
    EXPECT_THROW(row_n_bytes(f.type, 128), std::invalid_argument);
  }
  EXPECT_EQ(ggml_type_name(17), "IQ2_XS");
  EXPECT_EQ(ggml_type_name(3), "Q4_1");
  EXPECT_EQ(ggml_type_name(35), "TQ2_0");
  EXPECT_EQ(ggml_type_name(39), "");
  EXPECT_EQ(ggml_type_name(-1), "");
  EXPECT_FALSE(tensor_type_from_id(15).has_value());  // Q8_K: activations only, never in files
}

TEST(GgufKQuant, WriterReaderRoundTripKeepsBytesAndValues) {
  Writer w;
  w.set_string("general.architecture", "llama");
  for (const TypeFacts& f : kKQuants) {
    w.add_tensor_f32(std::string("w.") + f.name, f.type, {512, 3}, test_values(1536, f.id, 0.2f));
  }
  const File file = File::from_bytes(w.to_bytes());
  ASSERT_EQ(file.tensors().size(), std::size(kKQuants));
  for (size_t i = 0; i < std::size(kKQuants); ++i) {
    const TypeFacts& f = kKQuants[i];
    const TensorInfo& t = file.tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.type, f.type);
    EXPECT_EQ(t.n_bytes, 2 * 3 * f.bytes);
    const std::vector<float> src = test_values(1536, f.id, 0.2f);
    std::vector<uint8_t> encoded(t.n_bytes);
    quantize_row(encoded.data(), src.data(), f.type, 1536);
    EXPECT_EQ(std::memcmp(encoded.data(), t.data, t.n_bytes), 0);
    std::vector<float> got(1536), want(1536);
    for (int64_t r = 0; r < 3; ++r) dequantize_row(got.data() + 512 * r, t.row(r), t.type, 512);
    dequantize_row(want.data(), encoded.data(), f.type, 1536);
    EXPECT_EQ(got, want);  // (the encoder's error bound is tested in ops/quant_blocks_test)
  }
}

TEST(GgufKQuant, UnsupportedTypesAreNamed) {
  const auto one_tensor = [](int32_t type) {
    return Raw()
        .header(1, 0)
        .info("blk.0.ffn_down.weight", {256}, type, 0)
        .pad_to(32)
        .zeros(256)
        .bytes;
  };
  expect_gguf_error(one_tensor(17),
                    {"tensor 'blk.0.ffn_down.weight': unknown or unsupported tensor type",
                     "got IQ2_XS (type 17)", "Q4_K (12)"},
                    "iq2_xs");
  expect_gguf_error(one_tensor(20), {"got IQ4_NL (type 20)"}, "iq4_nl");
  expect_gguf_error(one_tensor(15), {"got Q8_K (type 15)"}, "q8_k");
  expect_gguf_error(one_tensor(31), {"got Q4_0_4_4 (type 31)"}, "retired");
  expect_gguf_error(one_tensor(77), {"unknown or unsupported tensor type, got 77"}, "unknown");
  // A K-quant row that is not whole 256-element blocks.
  expect_gguf_error(Raw().header(1, 0).info("a", {128, 2}, 12, 0).pad_to(32).zeros(288).bytes,
                    {"ne[0] not a multiple of the q4_K block size, got 128"}, "partial block");
}

}  // namespace
}  // namespace snapkv::gguf
