// A model's sidecar GGUF files (model/head_types.h, model/kvzap.h): small GGUF files beside the
// model ("dir/m.gguf" -> "dir/m.<kind>.gguf") holding what was measured or trained for that one
// model. One layout for every kind: general.architecture names the kind, and "<kind>.version",
// "<kind>.model_fingerprint" (gguf/fingerprint.h, hex) and one u32 key per dimension follow it.
//
// Promises: the path rule; the header written in one order; the checks on reading (kind, version,
// fingerprint, dimensions, an f32 tensor of the model's shape), each a snapkv::RuntimeError
// "[kv] <label> <path>: ... got X, expected Y" naming the file and, for another model's file, the
// command that remakes it; the model's search for its sidecar (beside it, or the file an
// environment variable names), which leaves a status line saying why none was loaded.
// Leaves out: what the tensors mean (the kinds' own files).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "snapkv/gguf/gguf.h"

namespace snapkv::sidecar {

// What tells one kind of sidecar from another.
struct Kind {
  const char* arch;         // general.architecture and the key prefix ("heads")
  const char* suffix;       // of the file name (".heads.gguf")
  const char* label;        // names the file in errors ("head types")
  const char* not_this;     // a file of another kind is "not a <not_this>" ("head-types sidecar")
  const char* other_model;  // "was measured on another model"
  const char* remake;       // "measure again with snapkv find-heads"
  const char* env;          // the variable naming another file ("SNAPKV_HEADS")
  const char* none;         // the status when there is none ("no head types")
  uint32_t version;
};

// The kinds, defined beside their readers.
extern const Kind kHeadTypes;  // model/head_types.h
extern const Kind kKvzap;      // model/kvzap.h

// One dimension: its key after the prefix ("n_layers"), the model's value, and its words in
// messages (before + value + after: "4 layers", "head_dim 32").
struct Dim {
  const char* key;
  size_t value;
  const char* before;
  const char* after;
};

// "dir/m.gguf" -> "dir/m" + suffix; any other name gets the suffix appended.
std::string path_for(const std::string& model_path, std::string_view suffix);

// The dimensions in words, joined by " x " ("4 layers x 2 KV heads").
std::string dims_text(const std::vector<Dim>& dims);

// A writer with the header: general.architecture, general.name, version, fingerprint, then the
// dimensions in order. The kind adds its own keys and tensors after these.
gguf::Writer header(const Kind& kind, const char* name, const std::array<uint8_t, 32>& fingerprint,
                    const std::vector<Dim>& dims);

// Checks a parsed sidecar against the model it is for, in order: kind, version, fingerprint,
// dimensions; then reads its f32 tensors.
class Reader {
 public:
  Reader(const gguf::File& file, const std::string& path, const Kind& kind,
         const std::array<uint8_t, 32>& fingerprint, const std::vector<Dim>& dims);
  // Tensor `name` as f32 values; its shape (innermost first) must be `shape`.
  std::vector<float> f32(const char* name, const std::vector<int64_t>& shape) const;
  // "<kind>.<key>" as u32.
  uint32_t u32(const char* key) const;
  // "<label> <path>", the start of every error about this file.
  const std::string& where() const { return where_; }

 private:
  const gguf::File& file_;
  const Kind& kind_;
  std::string where_;
};

// The model's search for its sidecar: the file kind.env names when set and not empty, otherwise
// path_for(model_path, kind.suffix). Calls load(path) when that is a regular file. Returns the
// status when nothing was loaded: absent ("<none> (<path>, absent)") or load's error message
// (another model's, unreadable); "" when load returned.
std::string find(const std::string& model_path, const Kind& kind,
                 const std::function<void(const std::string& path)>& load);

}  // namespace snapkv::sidecar
