// Compressed prompt-cache files (.kvc): one prompt's caches, after compression, written once and
// loaded many times without re-running the prefill. Byte layout: kv/file/kvc_format.h.
//
// Promises:
//  - write_kvc writes atomically: a temporary file in the target's directory, fsync, rename; a
//    failure leaves no file (and the temporary one removed);
//  - the reader treats the file as hostile: the header's sizes, then the checksum, then the model
//    fingerprint and dimensions, then every count, offset and size of the payload are checked
//    before anything is used; each failure is a KvcError of a named kind;
//  - a loaded cache holds exactly the saved state: positions, the codec's stored rows (fp16, or
//    KIVI codes, parameters, sinks and residual), tokens seen, so appending to it and attending
//    through it give bit-identical results to the cache that was saved.
// Leaves out: the model (the fingerprint is 32 opaque bytes here; gguf/fingerprint.h computes it),
// tokenization, an open prompt (an end_of_prompt cache must be ended before it is written).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/util/error.h"

namespace snapkv {

using ModelFingerprint = std::array<uint8_t, 32>;

enum class KvcErrorKind {
  io,             // cannot open, read, write or rename
  truncated,      // shorter than its header or payload says
  not_kvc,        // wrong magic
  wrong_version,  // a format version this reader does not know
  wrong_model,    // fingerprint or dimensions differ from the model it is loaded for
  corrupted,      // checksum mismatch
  malformed,      // checksum fine, but a count, size, position or value breaks the format
};
std::string_view to_string(KvcErrorKind kind);

class KvcError : public RuntimeError {
 public:
  KvcError(KvcErrorKind kind, const std::string& message) : RuntimeError(message), kind_(kind) {}
  KvcErrorKind kind() const { return kind_; }

 private:
  KvcErrorKind kind_;
};

// What the loader expects (wrong_model otherwise). Empty fields are not checked.
struct KvcExpect {
  const ModelFingerprint* fingerprint = nullptr;
  std::string_view model_name;  // the expected model's general.name: named in a fingerprint
                                // mismatch beside the file's (never compared: the fingerprint is)
  size_t n_layers = 0;
  CacheDims dims;  // fields left 0 are not checked
};

// Version 3's labels (kv/file/kvc_format.h KvcModelRecord): the model's general.name (cut to 63
// bytes at a UTF-8 boundary; NUL and what follows dropped) and the caller's note (at most
// kKvcMaxNoteBytes; std::invalid_argument past it).
struct KvcLabels {
  std::string model_name;
  std::string note;
};

struct KvcContents {
  ModelFingerprint fingerprint{};
  std::string model_name;  // "" for version 1-2 files or a model without general.name
  std::string note;        // "" for version 1-2 files
  CacheConfig config;
  CacheDims dims;
  std::vector<int32_t> tokens;     // [n_tokens] the prompt
  std::vector<LayerCache> caches;  // [n_layers] every prompt ended, offset() == n_tokens
  size_t file_bytes = 0;           // bytes read (the whole file: the checksum covers it)
  uint32_t version = 0;            // the file's format version (kv/file/kvc_format.h)
};

// Writes `caches` (one per layer, same dims and config, prompts ended, offset() == tokens.size()
// >= 1) with the prompt's tokens and the model fingerprint. Bad arguments: std::invalid_argument;
// I/O failures: KvcError io.
void write_kvc(const std::string& path, const ModelFingerprint& fingerprint,
               std::span<const int32_t> tokens, std::span<const LayerCache> caches,
               const KvcLabels& labels = {});
// The bytes write_kvc would write (tests, the fuzz corpus).
std::vector<uint8_t> encode_kvc(const ModelFingerprint& fingerprint,
                                std::span<const int32_t> tokens, std::span<const LayerCache> caches,
                                const KvcLabels& labels = {});
// general.name as a .kvc stores it: up to the first NUL, cut to 63 bytes at a UTF-8 boundary.
std::string kvc_model_name(std::string_view name);

// Maps a whole file read-only (mmap, no copy of it in memory; the loaded stores copy what they
// keep), validates it (see the file comment) and unmaps it. Reads every version from
// kKvcOldestVersion to kKvcVersion (kv/file/kvc_format.h). Throws KvcError. Like every mapped read,
// it assumes the file is not cut short in place while it is read (write_kvc never does: it
// replaces files by rename).
KvcContents read_kvc(const std::string& path, const KvcExpect& expect = {});
// The same on bytes in memory. verify_checksum = false skips only the checksum (the fuzz target
// uses it to reach the payload checks; everything else is still validated).
KvcContents decode_kvc(std::span<const uint8_t> bytes, const KvcExpect& expect = {},
                       bool verify_checksum = true);

}  // namespace snapkv
