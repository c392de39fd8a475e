// What the model fingerprint (gguf/fingerprint.h) covers: every byte before the data section
// (magic, version, metadata, tensor table), and not the weights' bytes. The docs and the .kvc
// format promise exactly this; these tests hold both sides of it.
#include <gtest/gtest.h>

#include <vector>

#include "gguf_test_util.h"
#include "snapkv/gguf/fingerprint.h"

namespace snapkv::gguf {
namespace {

using testing::sample_writer;

TEST(GgufFingerprint, ChangesWithMetadataAndTensorTable) {
  const std::vector<uint8_t> base = sample_writer().to_bytes();
  const auto fp = fingerprint(File::from_bytes(base));
  EXPECT_EQ(fingerprint(File::from_bytes(sample_writer().to_bytes())), fp) << "deterministic";

  Writer other_value = sample_writer();
  other_value.set_u32("t.u32", 4000000001u);
  EXPECT_NE(fingerprint(File::from_bytes(other_value.to_bytes())), fp) << "a metadata value";

  Writer other_tensor = sample_writer();
  other_tensor.add_tensor_f32("w.extra", TensorType::f32, {4, 1}, testing::test_values(4, 9));
  EXPECT_NE(fingerprint(File::from_bytes(other_tensor.to_bytes())), fp) << "the tensor table";
}

TEST(GgufFingerprint, LeavesOutTheWeightBytes) {
  const std::vector<uint8_t> base = sample_writer().to_bytes();
  const File file = File::from_bytes(base);
  const auto fp = fingerprint(file);
  ASSERT_LT(file.data_offset(), base.size());
  // Every byte of the data section flipped: the same fingerprint (documented limitation).
  std::vector<uint8_t> flipped = base;
  for (size_t i = file.data_offset(); i < flipped.size(); ++i) flipped[i] ^= 0x5A;
  EXPECT_EQ(fingerprint(File::from_bytes(flipped)), fp);
  // One byte of the header flipped (inside the tensor table's last offset field): a different
  // fingerprint, or a file the reader refuses.
  std::vector<uint8_t> header = base;
  header[file.data_offset() - 1] ^= 0x01;
  try {
    EXPECT_NE(fingerprint(File::from_bytes(header)), fp);
  } catch (const RuntimeError&) {
    SUCCEED();
  }
}

}  // namespace
}  // namespace snapkv::gguf
