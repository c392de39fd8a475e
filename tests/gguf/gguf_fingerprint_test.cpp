// What the model fingerprint (gguf/fingerprint.h) covers: every byte before the data section
// (magic, version, metadata, tensor table) and three windows of every tensor's bytes, nothing
// else. The docs and the .kvc format promise exactly this; these tests hold both sides of it.
#include <gtest/gtest.h>

#include <algorithm>
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

TEST(GgufFingerprint, CoversThreeWindowsOfEveryTensor) {
  const std::vector<uint8_t> base = sample_writer().to_bytes();
  const File file = File::from_bytes(base);
  const auto fp = fingerprint(file);
  ASSERT_LT(file.data_offset(), base.size());
  // Which bytes of the data section the fingerprint reads, by the rule in gguf/fingerprint.h.
  std::vector<bool> sampled(base.size(), false);
  size_t n_sampled = 0;
  for (const TensorInfo& t : file.tensors()) {
    const uint64_t start = file.data_offset() + t.offset;
    const uint64_t w = std::min<uint64_t>(kFingerprintWindow, t.n_bytes);
    for (const uint64_t s : {uint64_t{0}, (t.n_bytes - w) / 2, t.n_bytes - w}) {
      for (uint64_t i = s; i < s + w; ++i) sampled[start + i] = true;
    }
  }
  for (size_t i = file.data_offset(); i < base.size(); ++i) {
    std::vector<uint8_t> flipped = base;
    flipped[i] ^= 0x01;
    const bool changed = fingerprint(File::from_bytes(flipped)) != fp;
    EXPECT_EQ(changed, static_cast<bool>(sampled[i])) << "data byte " << i;
    n_sampled += sampled[i] ? 1 : 0;
  }
  EXPECT_GT(n_sampled, 0u);
  // Every byte of the data section flipped: a different fingerprint (another model's weights).
  std::vector<uint8_t> all = base;
  for (size_t i = file.data_offset(); i < all.size(); ++i) all[i] ^= 0x5A;
  EXPECT_NE(fingerprint(File::from_bytes(all)), fp);
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

TEST(GgufFingerprint, LargeTensorsKeepTheirMiddleOutOfIt) {
  // A tensor of 4 KiB: bytes outside its three windows do not move the fingerprint (the
  // documented limit), bytes inside do.
  Writer w = sample_writer();
  w.add_tensor_f32("w.big", TensorType::f32, {1024, 1}, testing::test_values(1024, 7));
  const std::vector<uint8_t> base = w.to_bytes();
  const File file = File::from_bytes(base);
  const auto fp = fingerprint(file);
  const TensorInfo* big = nullptr;
  for (const TensorInfo& t : file.tensors()) big = t.name == "w.big" ? &t : big;
  ASSERT_NE(big, nullptr);
  ASSERT_EQ(big->n_bytes, 4096u);
  const size_t at = static_cast<size_t>(file.data_offset() + big->offset);
  std::vector<uint8_t> b = base;
  b[at + 1000] ^= 0x01;  // between the first window [0, 256) and the middle one [1920, 2176)
  EXPECT_EQ(fingerprint(File::from_bytes(b)), fp);
  b = base;
  b[at + 2000] ^= 0x01;  // inside the middle window
  EXPECT_NE(fingerprint(File::from_bytes(b)), fp);
  b = base;
  b[at + 4095] ^= 0x01;  // the last byte
  EXPECT_NE(fingerprint(File::from_bytes(b)), fp);
}

}  // namespace
}  // namespace snapkv::gguf
