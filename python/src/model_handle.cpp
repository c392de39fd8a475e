// The model level's shared pieces (python/src/model_handle.h).
#include "model_handle.h"

#include <algorithm>
#include <string>
#include <thread>

#include "common.h"
#include "snapkv/model/generation.h"
#include "snapkv/model/kvzip.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"
#include "snapkv/util/text.h"

namespace snapkv::python {
namespace {

constexpr std::string_view kComponent = "python";

}  // namespace

py::str text(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<ssize_t>(s.size()), "replace");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

size_t utf8_complete(const std::string& s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

void set_threads(int threads) {
  const int max =
      std::min(256, 4 * std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  if (threads < 0 || threads > max) {
    throw_invalid(kComponent, "threads out of range", std::to_string(threads),
                  "0 (all cores) .. " + std::to_string(max));
  }
  set_num_threads(threads);
  set_blas_threads(1);  // one pool: ours (ops/gemm.h)
}

SessionOptions session_options(const ModelHandle& m, size_t prefill_chunk) {
  if (prefill_chunk == 0) throw_invalid(kComponent, "prefill_chunk", "0", ">= 1 tokens");
  return SessionOptions{prefill_chunk, ReconstructionOptions{kvzip_repeat_prompt(m.tokenizer)}};
}

std::vector<int32_t> prompt_tokens(const ModelHandle& m, const py::handle& prompt) {
  std::vector<int32_t> tokens;
  if (py::isinstance<py::str>(prompt)) {
    const std::string t = prompt.cast<std::string>();
    if (t.empty()) throw_invalid(kComponent, "empty prompt", "''", "a non-empty str");
    tokens = m.tokenizer.encode(t);
  } else {
    try {
      tokens = prompt.cast<std::vector<int32_t>>();
    } catch (const py::cast_error&) {
      throw_invalid(kComponent, "prompt",
                    py::str(py::type::of(prompt).attr("__name__")).cast<std::string>(),
                    "a str or a list of token ids");
    }
    for (int32_t t : tokens) {
      if (t < 0 || static_cast<size_t>(t) >= m.tokenizer.n_vocab()) {
        throw_invalid(kComponent, "prompt token id", std::to_string(t),
                      "in [0, " + num(m.tokenizer.n_vocab()) + ")");
      }
    }
  }
  return check_prompt(m, std::move(tokens));
}

std::vector<int32_t> check_prompt(const ModelHandle& m, std::vector<int32_t> tokens) {
  if (tokens.empty()) throw_invalid(kComponent, "empty prompt", "0 tokens", ">= 1 token");
  const LlamaConfig& mc = m.model.config();
  if (tokens.size() > mc.n_ctx) {
    throw_invalid(kComponent, "prompt longer than the model's context",
                  num(tokens.size()) + " tokens",
                  "<= " + std::string(mc.arch_name()) + ".context_length = " + num(mc.n_ctx));
  }
  return tokens;
}

CacheConfig cache_config(const py::handle& cache, size_t tokens, uint64_t seed) {
  if (cache.is_none()) {  // the shared defaults (model/generation.h)
    return CacheBuilder(std::string(kDefaultMethod), kDefaultKeep, {}, py::dict())
        .config_for(tokens);
  }
  CacheConfig c = config_from(cache, tokens, "cache");
  // The sampler's seed seeds the random policy too (as `snapkv run --seed`), unless the builder
  // names its own.
  if (py::isinstance<CacheBuilder>(cache) && !cache.cast<const CacheBuilder&>().gave("seed")) {
    c.seed = seed;
  }
  return c;
}

}  // namespace snapkv::python
