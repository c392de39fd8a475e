// Model fingerprint: the SHA-256 of a GGUF file's header, i.e. its magic, version, metadata and
// tensor table (names, types, shapes, offsets), every byte before the data section. It identifies
// which model a persisted cache (kv/file/kvc_file.h) was made with, without hashing gigabytes of
// weights: a different architecture, size, tokenizer, quantization or tensor layout changes it.
// Leaves out: the weights' bytes (two files that differ only in weight values share a fingerprint;
// re-converting a model with new weights and the same metadata is not detected).
#pragma once

#include <array>
#include <cstdint>

#include "snapkv/gguf/gguf.h"

namespace snapkv::gguf {

std::array<uint8_t, 32> fingerprint(const File& file);

}  // namespace snapkv::gguf
