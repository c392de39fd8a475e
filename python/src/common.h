// Shared pieces of the Python extension module `snapkv._snapkv`: numpy array checks, option values
// from Python objects, the cache builder (a method name, keep or budget, and cache options over
// the library's defaults) and the registration functions of each binding file.
//
// Promises: every check raises ValueError (std::invalid_argument) whose message names the argument,
// what was got and what was expected, in the library's "[python] what, got X, expected Y" form;
// arrays are used in place (no copy) when they are C-contiguous float32.
// Leaves out: the bindings themselves (caches.cpp, model.cpp, module.cpp).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/kv/core/spec.h"

namespace snapkv::python {

namespace py = pybind11;

// A C-contiguous float32 numpy array used in place. `expected` holds the wanted size of each
// dimension (0 = any); its rank is the wanted rank. `dims` names the dimensions for messages
// ("n_kv_heads", "S", "head_dim"). Raises ValueError for another type, dtype, rank, shape or a
// non-contiguous array (refused, not copied: np.ascontiguousarray makes one).
struct F32Array {
  py::array array;  // keeps the data alive
  const float* data = nullptr;
  std::vector<size_t> shape;
};
F32Array f32_array(const py::handle& obj, const char* name, const std::vector<size_t>& expected,
                   const std::vector<const char*>& dims);

// "(2, 5, 32)"
std::string shape_text(const std::vector<size_t>& shape);

// The value of cache option `option` from a Python object: bool for flags, int for counts (a
// negative int only where the option has a special value), float or int for reals, str for
// choices (or any option as text). Raises ValueError naming the option otherwise.
OptionValue option_value(const CacheOption& option, const py::handle& value);

// snapkv.builder(...): how to build caches for a prompt. The method name and every option are
// checked when it is made; config_for() applies keep (or budget) to a prompt length.
class CacheBuilder {
 public:
  // method: the CLI's grammar (kv/core/method.h); keep in (0, 1] or budget >= 1 (not both; neither
  // = CacheConfig's default budget); options: cache option name (or alias) -> value.
  CacheBuilder(std::string method, std::optional<double> keep, std::optional<size_t> budget,
               const py::dict& options);
  CacheBuilder(std::string method, std::optional<double> keep, std::optional<size_t> budget,
               const CacheConfig& knobs);

  // The validated config for a prompt whose compressed part has `tokens` tokens.
  CacheConfig config_for(size_t tokens) const;
  const std::string& method() const { return method_; }
  std::optional<double> keep() const { return keep_; }
  std::optional<size_t> budget() const { return budget_; }
  // Every option as the config for `tokens` has it (name -> value), for repr and records.
  py::dict options(size_t tokens) const;
  std::string repr() const;
  // True when the option (canonical name) was given.
  bool gave(std::string_view name) const;

 private:
  void check() const;

  std::string method_;
  std::optional<double> keep_;
  std::optional<size_t> budget_;
  Method parsed_;
  // Options of the method group (policy, codec, ...) given explicitly: applied after the name.
  std::vector<std::pair<const CacheOption*, OptionValue>> overrides_;
  std::vector<std::string> given_;  // canonical names given, for repr
};

// The cache config a Python `config` argument stands for: a CacheBuilder, a "key=value ..." string
// (the C ABI's syntax) or a dict of options. tokens: the prompt length keep applies to (0 = none
// known: keep is then refused).
CacheConfig config_from(const py::handle& config, size_t tokens, const char* name);

// Cache accounting as a dict: tokens_seen, tokens_kept, rows_kept, mean_kept, bytes_stored,
// bytes_full_fp16, eviction_ratio, keep_rate.
py::dict stats_dict(const CacheStats& s);

// Python value of an option value.
py::object to_python(const OptionValue& value);

void register_options(py::module_& m);
void register_caches(py::module_& m);
void register_model(py::module_& m);

}  // namespace snapkv::python
