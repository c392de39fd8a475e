// The generated malformed GGUF files (one per hostile field, each with the substrings its error
// must contain) and the seed-corpus writer built on them. Shared by test_gguf (which checks every
// case) and fuzz/write_gguf_seed_corpus (which writes them as fuzzing seeds).
#pragma once

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "gguf_test_util.h"

namespace snapkv::gguf::testing {

inline constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

struct Case {
  std::string name;
  std::vector<uint8_t> bytes;
  std::vector<std::string> expect;  // substrings of the error message
};

// A valid prefix: header with the given counts and one tensor 'a' of 8 f32 (32 bytes) at offset 0.
inline std::vector<Case> malformed_cases() {
  std::vector<Case> cases;
  const auto add = [&](std::string name, const Raw& r, std::vector<std::string> expect) {
    cases.push_back({std::move(name), r.bytes, std::move(expect)});
  };
  const auto one_kv = [](std::string_view key) { return Raw().header(0, 1).str(key); };

  // header
  add("bad-magic", Raw().put<uint32_t>(0x4C4D4747u).u32(3).i64(0).i64(0),
      {"header: bad magic, not a GGUF file, got 'GGML', expected 'GGUF'"});
  add("version-1", Raw().header(0, 0, 1), {"header: unsupported GGUF version, got 1 (GGUF v1/v2"});
  add("version-2", Raw().header(0, 0, 2), {"unsupported GGUF version, got 2"});
  add("version-4", Raw().header(0, 0, 4), {"unsupported GGUF version, got 4, expected 3"});
  add("version-big-endian", Raw().header(0, 0, 0x03000000u), {"(a big-endian file?)"});
  add("tensor-count-negative", Raw().header(-1, 0), {"header: tensor count out of range", "-1"});
  add("tensor-count-huge", Raw().header(kI64Max, 0).zeros(64), {"tensor count out of range"});
  add("kv-count-huge", Raw().header(0, int64_t{1} << 60).zeros(64),
      {"header: metadata count out of range"});
  add("counts-together-too-large", Raw().header(1, 3).zeros(64),
      {"header: tensor and metadata counts too large"});

  // keys and values
  add("key-length-huge", Raw().header(0, 1).u64(~0ull).zeros(16),
      {"key #0: key length exceeds the bytes left in the file"});
  add("key-empty", Raw().header(0, 1).str("").i32(4).u32(1), {"key #0: empty key"});
  add("key-duplicate", Raw().header(0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2),
      {"key 'a.b': duplicate key"});
  add("value-type-unknown", one_kv("k").i32(13).zeros(8), {"key 'k': unknown value type, got 13"});
  add("value-type-negative", one_kv("k").i32(-1).zeros(8), {"key 'k': unknown value type, got -1"});
  add("bool-not-0-or-1", one_kv("k").i32(7).u8(2), {"key 'k': bool value is not 0 or 1, got 2"});
  add("string-length-huge", one_kv("k").i32(8).u64(1ull << 62).zeros(8),
      {"key 'k': string value length exceeds the bytes left"});
  add("array-type-unknown", one_kv("k").i32(9).i32(42).u64(0),
      {"key 'k': unknown array element type, got 42"});
  add("array-nested", one_kv("k").i32(9).i32(9).u64(1).i32(0).u64(0),
      {"key 'k': nested arrays are not supported"});
  add("array-count-huge", one_kv("k").i32(9).i32(0).u64(1ull << 62).zeros(8),
      {"key 'k': array length exceeds the bytes left", "4611686018427387904"});
  add("array-u32-count-too-large", one_kv("k").i32(9).i32(4).u64(3).u32(1).u32(2),
      {"key 'k': array length exceeds the bytes left", "got 3, expected at most 2 u32"});
  add("array-string-element-huge",
      one_kv("tokenizer.ggml.tokens").i32(9).i32(8).u64(2).str("a").u64(1ull << 40).zeros(8),
      {"key 'tokenizer.ggml.tokens': string value length exceeds the bytes left"});
  add("array-bool-element-bad", one_kv("k").i32(9).i32(7).u64(3).u8(1).u8(0).u8(9),
      {"key 'k': bool value is not 0 or 1, got 9"});
  add("alignment-wrong-type", Raw().header(0, 1).kv_string("general.alignment", "32"),
      {"key 'general.alignment': wrong type, got string, expected u32"});
  add("alignment-u64", Raw().header(0, 1).str("general.alignment").i32(10).u64(32),
      {"key 'general.alignment': wrong type, got u64"});
  add("alignment-not-power-of-two", Raw().header(0, 1).kv_u32("general.alignment", 48),
      {"key 'general.alignment': alignment is not a power of two, got 48"});
  add("alignment-zero", Raw().header(0, 1).kv_u32("general.alignment", 0),
      {"alignment is not a power of two, got 0"});
  // A power of two above the 1 MiB bound: a rewrite would pad by up to 2 GiB.
  add("alignment-2-pow-31", Raw().header(0, 1).kv_u32("general.alignment", 1u << 31).zeros(24),
      {"key 'general.alignment': alignment too large, got 2147483648, expected a power of two at "
       "most 1048576"});
  add("alignment-2-pow-21", Raw().header(0, 1).kv_u32("general.alignment", 1u << 21),
      {"alignment too large, got 2097152"});

  // tensor infos (each followed by enough zero bytes to pass the count bounds)
  const auto one_tensor = [](std::string_view name, std::initializer_list<int64_t> ne, int32_t type,
                             uint64_t offset) {
    return Raw().header(1, 0).info(name, ne, type, offset).pad_to(32).zeros(64);
  };
  add("tensor-name-empty", one_tensor("", {8}, 0, 0), {"tensor #0: empty tensor name"});
  add("tensor-name-too-long", one_tensor(std::string(64, 'n'), {8}, 0, 0),
      {"tensor 'nnnn", "name too long, got 64 bytes, expected at most 63"});
  add("tensor-name-length-huge", Raw().header(1, 0).u64(1ull << 63).zeros(64),
      {"tensor #0: tensor name length exceeds the bytes left"});
  add("tensor-dims-zero", one_tensor("a", {}, 0, 0),
      {"tensor 'a': bad number of dimensions, got 0, expected 1..4"});
  add("tensor-dims-five", one_tensor("a", {1, 1, 1, 1, 1}, 0, 0),
      {"tensor 'a': bad number of dimensions, got 5"});
  add("tensor-ne-negative", one_tensor("a", {8, -3}, 0, 0),
      {"tensor 'a': negative dimension ne[1], got -3"});
  add("tensor-elements-overflow", one_tensor("a", {int64_t{1} << 32, int64_t{1} << 32}, 0, 0),
      {"tensor 'a': element count overflows int64, got {4294967296, 4294967296}"});
  add("tensor-bytes-overflow", one_tensor("a", {int64_t{1} << 31, int64_t{1} << 31}, 0, 0),
      {"tensor 'a': byte size overflows int64"});
  add("tensor-type-q4_1", one_tensor("a", {32}, 3, 0),
      {"tensor 'a': unknown or unsupported tensor type, got Q4_1 (type 3)"});
  add("tensor-type-negative", one_tensor("a", {32}, -7, 0),
      {"unknown or unsupported tensor type, got -7"});
  add("tensor-type-huge", one_tensor("a", {32}, 1 << 30, 0), {"tensor type, got 1073741824"});
  add("tensor-q8_0-partial-block", one_tensor("a", {16, 2}, 8, 0),
      {"tensor 'a': ne[0] not a multiple of the q8_0 block size, got 16, expected a multiple of "
       "32"});
  add("tensor-huge-past-eof", one_tensor("a", {int64_t{1} << 40}, 0, 0),
      {"tensor 'a': data extends past the end of the file"});
  add("tensor-first-offset-gap", one_tensor("a", {8}, 0, 32),
      {"tensor 'a': offset leaves a gap after the data start, got 32, expected 0"});
  add("tensor-offset-past-eof", one_tensor("a", {8}, 0, 1ull << 63),
      {"tensor 'a': offset leaves a gap", "9223372036854775808"});
  add("tensor-duplicate-name",
      Raw().header(2, 0).info("a", {8}, 0, 0).info("a", {8}, 0, 32).pad_to(32).zeros(64),
      {"tensor 'a': duplicate tensor name"});
  add("tensor-offset-misaligned",
      Raw().header(2, 0).info("a", {8}, 0, 0).info("b", {8}, 0, 36).pad_to(32).zeros(64),
      {"tensor 'b': offset not aligned, got 36, expected a multiple of 32"});
  add("tensor-offset-overlap",
      Raw().header(2, 0).info("a", {16}, 0, 0).info("b", {8}, 0, 32).pad_to(32).zeros(128),
      {"tensor 'b': offset overlaps tensor 'a', got 32, expected 64"});
  add("tensor-offset-gap",
      Raw().header(2, 0).info("a", {8}, 0, 0).info("b", {8}, 0, 64).pad_to(32).zeros(128),
      {"tensor 'b': offset leaves a gap after tensor 'a', got 64, expected 32"});
  add("tensor-offset-custom-alignment",
      Raw()
          .header(2, 1)
          .kv_u32("general.alignment", 64)
          .info("a", {8}, 0, 0)
          .info("b", {8}, 0, 32)
          .pad_to(64)
          .zeros(128),
      {"tensor 'b': offset not aligned, got 32, expected a multiple of 64"});
  add("tensor-data-truncated", Raw().header(1, 0).info("a", {8}, 0, 0).pad_to(32).zeros(31),
      {"tensor 'a': data extends past the end of the file", "at most 31"});
  {
    Raw r = Raw().header(1, 0).info("a", {8}, 0, 0);
    r.zeros(0);
    const size_t info_end = r.bytes.size();  // 24 + 9 + 4 + 8 + 4 + 8 = 57: data would start at 64
    r.bytes.resize(info_end + 2);
    add("data-section-past-eof", r, {"data section: starts past the end of the file, got 64"});
  }
  // Tensor infos and data disagree: bytes after the last tensor, or non-zero header padding.
  add("data-trailing-bytes", Raw().header(1, 0).info("a", {8}, 0, 0).pad_to(32).zeros(32 + 32),
      {"data section: bytes after the last tensor that no tensor info describes",
       "got 32 bytes after tensor 'a', expected at most 0 bytes of padding"});
  add("data-trailing-bytes-no-tensors", Raw().header(0, 0).pad_to(32).zeros(1),
      {"data section: bytes after the last tensor", "after the header"});
  {
    // Two tensor infos with the count lowered to 1: the second info is read as padding.
    Raw r = Raw().header(2, 0).info("a", {8}, 0, 0).info("b", {8}, 0, 32).pad_to(32).zeros(64);
    r.bytes[8] = 1;
    add("tensor-count-lowered", r,
        {"data section: padding before the data section is not zero (tensor count too low?)"});
  }
  return cases;
}

// Writes every case as bad-<name>.gguf and three valid files into `dir` (created if missing):
// the seeds of tests/gguf/corpus.
inline void write_seed_corpus(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const auto save = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream(dir / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  };
  for (const Case& c : malformed_cases()) save("bad-" + c.name + ".gguf", c.bytes);
  save("valid-sample.gguf", sample_writer().to_bytes());
  save("valid-empty.gguf", Writer().to_bytes());
  Writer w;
  w.set_string("general.architecture", "llama");
  w.set_alignment(8);
  w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "<0x00>"});
  w.set_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1});
  w.set_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 6});
  w.add_tensor_f32("token_embd.weight", TensorType::q8_0, {32, 4}, test_values(128, 9));
  w.add_tensor_f32("output_norm.weight", TensorType::f32, {32}, test_values(32, 10));
  save("valid-align8.gguf", w.to_bytes());
}

}  // namespace snapkv::gguf::testing
