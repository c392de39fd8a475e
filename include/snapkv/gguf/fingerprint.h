// Model fingerprint: the SHA-256 of a GGUF file's header (its magic, version, metadata and tensor
// table with names, types, shapes and offsets: every byte before the data section) followed by
// three windows of kFingerprintWindow bytes of every tensor (its start, middle and end). It
// identifies which model a persisted cache (kv/file/kvc_file.h) was made with at the cost of
// reading a few pages per tensor: a different architecture, size, tokenizer, quantization or
// tensor layout changes it, and so do other weights under the same metadata (a fine-tune).
// Leaves out: the weights' other bytes (a change confined to them, such as a bit flip in the
// middle of a tensor, keeps the fingerprint; GGUF has no checksum of its own).
#pragma once

#include <array>
#include <cstdint>

#include "snapkv/gguf/gguf.h"

namespace snapkv::gguf {

inline constexpr uint64_t kFingerprintWindow = 256;  // bytes per sampled window

std::array<uint8_t, 32> fingerprint(const File& file);

}  // namespace snapkv::gguf
