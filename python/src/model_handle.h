// The model level's shared pieces (model.cpp's bindings): the loaded model and its tokenizer,
// text conversion, threads, and the checks that turn a Python prompt or cache argument into the
// library's tokens and CacheConfig.
//
// Promises: every check raises ValueError (std::invalid_argument) in the library's
// "[python] what, got X, expected Y" form; text() replaces invalid UTF-8 with U+FFFD.
// Leaves out: the bindings themselves (model.cpp).
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // every file that casts lists: one set of casters

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "snapkv/kv/core/config.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"

namespace snapkv::python {

namespace py = pybind11;

struct ModelHandle {
  std::string path;
  LlamaModel model;
  Tokenizer tokenizer;
  ModelHandle(std::string p, LlamaModel m)
      : path(std::move(p)), model(std::move(m)), tokenizer(Tokenizer::from_gguf(model.file())) {}
};
using ModelPtr = std::shared_ptr<const ModelHandle>;

// s as a Python str, invalid UTF-8 replaced.
py::str text(const std::string& s);
// Bytes of s that end on a complete UTF-8 sequence (a trailing partial sequence held back).
size_t utf8_complete(const std::string& s);
// snapkv.set_threads: the library's worker threads (0 = all cores), BLAS single-threaded.
void set_threads(int threads);
// The session options of a generation: the prefill chunk (>= 1) and KVzip's repeat prompt.
SessionOptions session_options(const ModelHandle& m, size_t prefill_chunk);
// A str (encoded with BOS as the model says) or a list of token ids, checked against the
// vocabulary and the model's context.
std::vector<int32_t> prompt_tokens(const ModelHandle& m, const py::handle& prompt);
// tokens non-empty and within the model's context.
std::vector<int32_t> check_prompt(const ModelHandle& m, std::vector<int32_t> tokens);
// The cache of a generation: None = the shared defaults; else a builder or config (common.h);
// the sampler's seed seeds the random policy unless the builder names its own.
CacheConfig cache_config(const py::handle& cache, size_t tokens, uint64_t seed);

}  // namespace snapkv::python
