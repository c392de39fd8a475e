// The module `snapkv._snapkv`: version, the cache option table, the cache builder and the checks
// shared by every binding (python/src/common.h). The Python package `snapkv` (python/snapkv/)
// wraps it: builder() gets its keywords and defaults from cache_options() here.
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "common.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/snapkv.h"
#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

namespace snapkv::python {

namespace {
constexpr std::string_view kComponent = "python";

std::string real_text(double v) {
  return format_option_value(OptionValue{v});
}

std::string type_name(const py::handle& obj) {
  return py::str(py::type::of(obj).attr("__name__")).cast<std::string>();
}

const char* type_text(OptionType t) {
  switch (t) {
    case OptionType::flag:
      return "bool";
    case OptionType::count:
      return "int";
    case OptionType::real:
      return "float";
    case OptionType::choice:
      return "str";
  }
  return "?";
}

const char* group_text(OptionGroup g) {
  switch (g) {
    case OptionGroup::method:
      return "method";
    case OptionGroup::sizing:
      return "sizing";
    case OptionGroup::eviction:
      return "eviction";
    case OptionGroup::decode:
      return "decode";
    case OptionGroup::codec:
      return "codec";
  }
  return "?";
}
}  // namespace

std::string shape_text(const std::vector<size_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + num(shape[i]);
  if (shape.size() == 1) s += ",";
  return s + ")";
}

F32Array f32_array(const py::handle& obj, const char* name, const std::vector<size_t>& expected,
                   const std::vector<const char*>& dims) {
  std::string want = "(";
  for (size_t i = 0; i < expected.size(); ++i) {
    want += i ? ", " : "";
    want += dims[i];
    if (expected[i] != 0) want += "=" + num(expected[i]);
  }
  want += ")";
  if (!py::isinstance<py::array>(obj)) {
    throw_invalid(kComponent, std::string(name) + ": not a numpy array", type_name(obj),
                  "a float32 numpy.ndarray of shape " + want);
  }
  auto a = py::reinterpret_borrow<py::array>(obj);
  if (!a.dtype().is(py::dtype::of<float>())) {
    throw_invalid(kComponent, std::string(name) + ": dtype", py::str(a.dtype()).cast<std::string>(),
                  "float32 (np.asarray(" + std::string(name) + ", dtype=np.float32))");
  }
  std::vector<size_t> shape(static_cast<size_t>(a.ndim()));
  for (size_t i = 0; i < shape.size(); ++i)
    shape[i] = static_cast<size_t>(a.shape(static_cast<ssize_t>(i)));
  bool ok = shape.size() == expected.size();
  for (size_t i = 0; ok && i < shape.size(); ++i) {
    ok = expected[i] == 0 || expected[i] == shape[i];
  }
  if (!ok) throw_invalid(kComponent, std::string(name) + ": shape", shape_text(shape), want);
  if ((a.flags() & py::array::c_style) == 0) {
    throw_invalid(kComponent, std::string(name) + ": not C-contiguous", "strides of a view",
                  "a C-contiguous array (np.ascontiguousarray(" + std::string(name) + "))");
  }
  F32Array out;
  out.data = static_cast<const float*>(a.data());
  out.shape = std::move(shape);
  out.array = std::move(a);
  return out;
}

OptionValue option_value(const CacheOption& option, const py::handle& value) {
  const std::string name(option.name);
  const auto bad = [&](const char* expected) {
    throw_invalid(kComponent, "option '" + name + "'",
                  py::repr(value).cast<std::string>() + " (" + type_name(value) + ")", expected);
  };
  if (py::isinstance<py::str>(value)) {
    return parse_option_value(option, value.cast<std::string>());
  }
  switch (option.type) {
    case OptionType::flag:
      if (!py::isinstance<py::bool_>(value)) bad("True or False");
      return check_option_value(option, OptionValue{value.cast<bool>()});
    case OptionType::count: {
      if (py::isinstance<py::bool_>(value) || !py::isinstance<py::int_>(value)) bad("an int");
      const auto v = value.cast<py::int_>();
      if (py::int_(0) > v || v > py::int_(std::numeric_limits<uint64_t>::max())) {
        // A negative count only as the option's special value (-1: the codec's own default).
        const double d = value.cast<double>();
        return check_option_value(option, OptionValue{d});
      }
      return check_option_value(option, OptionValue{value.cast<uint64_t>()});
    }
    case OptionType::real: {
      if (py::isinstance<py::bool_>(value) ||
          !(py::isinstance<py::float_>(value) || py::isinstance<py::int_>(value))) {
        bad("a float");
      }
      const double d = value.cast<double>();
      if (!std::isfinite(d)) bad("a finite float");
      return check_option_value(option, OptionValue{d});
    }
    case OptionType::choice:
      bad(("one of " + std::string(option.choices)).c_str());
  }
  bad("a value");
  return {};
}

py::dict stats_dict(const CacheStats& s) {
  py::dict d;
  d["tokens_seen"] = s.tokens_seen;
  d["tokens_kept"] = s.tokens_kept;
  d["rows_kept"] = s.rows_kept;
  d["mean_kept"] = s.mean_kept();
  d["bytes_stored"] = s.bytes_stored;
  d["bytes_full_fp16"] = s.bytes_full_fp16;
  d["eviction_ratio"] = s.eviction_ratio();
  d["keep_rate"] = s.keep_rate();
  return d;
}

bool CacheBuilder::gave(std::string_view name) const {
  return std::find(given_.begin(), given_.end(), name) != given_.end();
}

py::object to_python(const OptionValue& value) {
  return std::visit([](const auto& v) -> py::object { return py::cast(v); }, value);
}

// ---- CacheBuilder -----------------------------------------------------------------------------

CacheBuilder::CacheBuilder(std::string method, std::optional<double> keep,
                           std::optional<size_t> budget, const py::dict& options)
    : method_(std::move(method)), keep_(keep), budget_(budget) {
  CacheConfig knobs;
  for (const auto& [key, value] : options) {
    const std::string k = py::str(key).cast<std::string>();
    const CacheOption* o = find_cache_option(k);
    if (o == nullptr) {
      throw_invalid(kComponent, "unknown cache option", "'" + k + "'",
                    "one of " + cache_option_names());
    }
    const std::string canonical(o->name);
    for (const std::string& g : given_) {
      if (g == canonical) {
        throw_invalid(kComponent, "cache option given twice", "'" + canonical + "'",
                      "each option once (an alias names the same option)");
      }
    }
    if (o->group == OptionGroup::sizing) {
      throw_invalid(kComponent, "option '" + canonical + "' inside options", k,
                    "budget=N or keep=F as builder arguments");
    }
    const OptionValue v = option_value(*o, value);
    given_.push_back(canonical);
    if (o->group == OptionGroup::method) {
      overrides_.emplace_back(o, v);
    } else {
      o->set(knobs, v);
    }
  }
  parsed_ = parse_method(method_, knobs);
  check();
}

CacheBuilder::CacheBuilder(std::string method, std::optional<double> keep,
                           std::optional<size_t> budget, const CacheConfig& knobs)
    : method_(std::move(method)), keep_(keep), budget_(budget) {
  parsed_ = parse_method(method_, knobs);
  check();
}

void CacheBuilder::check() const {
  if (keep_ && budget_) {
    throw_invalid(kComponent, "keep and budget both given",
                  "keep=" + real_text(*keep_) + ", budget=" + num(*budget_), "at most one of them");
  }
  if (keep_) (void)parse_keeps(real_text(*keep_));  // (0, 1]
  if (budget_ && *budget_ == 0) throw_invalid(kComponent, "budget", "0", ">= 1 rows per KV head");
  // Bad settings fail now, before any model runs (as the command line checks with --budget).
  (void)config_for(std::max<size_t>(budget_.value_or(CacheConfig{}.budget), 1));
}

CacheConfig CacheBuilder::config_for(size_t tokens) const {
  CacheConfig c = parsed_.config;
  for (const auto& [o, v] : overrides_) o->set(c, v);
  if (keep_) {
    if (tokens == 0) {
      throw_invalid(kComponent, "keep without a prompt length", "keep=" + real_text(*keep_),
                    "budget=N for caches built without a prompt (or prompt_tokens=T)");
    }
    c.budget = parsed_.uses_keep ? budget_for(*keep_, tokens, c) : std::max<size_t>(tokens, 1);
  } else {
    c.budget = budget_.value_or(CacheConfig{}.budget);
  }
  c.validate();
  return c;
}

py::dict CacheBuilder::options(size_t tokens) const {
  py::dict d;
  for (const auto& [name, value] : config_record(config_for(tokens), /*resolved=*/false)) {
    d[py::str(std::string(name))] = to_python(value);
  }
  return d;
}

std::string CacheBuilder::repr() const {
  std::ostringstream s;
  s << "snapkv.builder(method='" << method_ << "'";
  if (keep_) s << ", keep=" << real_text(*keep_);
  if (budget_) s << ", budget=" << *budget_;
  const CacheConfig c = config_for(std::max<size_t>(budget_.value_or(CacheConfig{}.budget), 1));
  for (const auto& [name, value] : config_record(c, false)) {
    for (const std::string& g : given_) {
      if (g == name) {
        const bool text = std::holds_alternative<std::string>(value);
        const std::string v = std::holds_alternative<bool>(value)
                                  ? (std::get<bool>(value) ? "True" : "False")
                                  : format_option_value(value);
        s << ", " << name << "=" << (text ? "'" + v + "'" : v);
      }
    }
  }
  s << ")";
  return s.str();
}

CacheConfig config_from(const py::handle& config, size_t tokens, const char* name) {
  if (py::isinstance<CacheBuilder>(config))
    return config.cast<const CacheBuilder&>().config_for(tokens);
  if (py::isinstance<py::str>(config)) {
    // The C ABI's "key=value key=value" syntax (method=, keep=, budget= and the spec's keys),
    // over the library's defaults.
    std::string s = config.cast<std::string>();
    for (char& ch : s) ch = (ch == ',' || ch == ';' || ch == '\t') ? ' ' : ch;
    std::istringstream in(s);
    std::string item;
    std::optional<std::string> method;
    std::optional<double> keep;
    py::dict options;
    while (in >> item) {
      const size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
        throw_invalid(kComponent, std::string(name) + ": config item is not key=value",
                      "'" + item + "'", "key=value (e.g. budget=256)");
      }
      const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
      if (key == "method") {
        method = value;
      } else if (key == "keep") {
        keep = parse_keeps(value).at(0);
      } else {
        if (options.contains(key)) {
          throw_invalid(kComponent, "config key given twice", "'" + key + "'", "each key once");
        }
        options[py::str(key)] = value;
      }
    }
    if (method || keep) {
      std::optional<size_t> budget;
      if (options.contains("budget")) {
        budget = static_cast<size_t>(std::get<uint64_t>(parse_option_value(
            *find_cache_option("budget"), options["budget"].cast<std::string>())));
        PyDict_DelItemString(options.ptr(), "budget");
      }
      if (method) return CacheBuilder(*method, keep, budget, options).config_for(tokens);
      CacheConfig c;
      for (const auto& [k, v] : options)
        set_cache_option(c, k.cast<std::string>(), v.cast<std::string>());
      if (budget) throw_invalid(kComponent, "keep and budget both given", "both", "one of them");
      if (tokens == 0) {
        throw_invalid(kComponent, "keep without a prompt length", "keep", "prompt_tokens=T");
      }
      c.budget = budget_for(*keep, tokens, c);
      c.validate();
      return c;
    }
    CacheConfig c;
    for (const auto& [k, v] : options)
      set_cache_option(c, k.cast<std::string>(), v.cast<std::string>());
    c.validate();
    return c;
  }
  if (py::isinstance<py::dict>(config)) {
    CacheConfig c;
    for (const auto& [key, value] : config.cast<py::dict>()) {
      const std::string k = py::str(key).cast<std::string>();
      const CacheOption* o = find_cache_option(k);
      if (o == nullptr) {
        throw_invalid(kComponent, "unknown cache option", "'" + k + "'",
                      "one of " + cache_option_names());
      }
      o->set(c, option_value(*o, value));
    }
    c.validate();
    return c;
  }
  throw_invalid(kComponent, std::string(name), type_name(config),
                "a snapkv.builder(...), a 'key=value ...' string or a dict of cache options");
}

void register_options(py::module_& m) {
  m.def(
      "cache_options",
      [] {
        const CacheConfig defaults;
        py::list out;
        for (const CacheOption& o : cache_options()) {
          py::dict d;
          d["name"] = std::string(o.name);
          d["aliases"] = py::str(std::string(o.aliases)).attr("split")();
          d["flag"] = std::string(o.flag);
          d["type"] = type_text(o.type);
          d["group"] = group_text(o.group);
          d["choices"] =
              o.choices.empty() ? py::list() : py::str(std::string(o.choices)).attr("split")("|");
          d["min"] = o.min;
          d["max"] = o.max;
          d["special"] = o.has_special ? py::object(py::float_(o.special)) : py::none();
          d["help"] = std::string(o.help);
          d["default"] = to_python(o.get(defaults));
          out.append(d);
        }
        return out;
      },
      "Every cache option of the library (kv/core/spec.h) as a dict: name, aliases, flag, type,\n"
      "group, choices, min, max, special, help, default.");

  py::class_<CacheBuilder>(m, "CacheBuilder",
                           "How to build KV caches: a method, keep or budget, and cache options.\n"
                           "Made by snapkv.builder(...); pass it as cache= to generate, chat,\n"
                           "compress, or to build_caches.")
      .def(py::init<std::string, std::optional<double>, std::optional<size_t>, py::dict>(),
           py::arg("method") = "snapkv", py::arg("keep") = py::none(),
           py::arg("budget") = py::none(), py::arg("options") = py::dict())
      .def_property_readonly("method", &CacheBuilder::method)
      .def_property_readonly("keep", &CacheBuilder::keep)
      .def_property_readonly("budget", &CacheBuilder::budget)
      .def(
          "config", [](const CacheBuilder& b, size_t tokens) { return b.options(tokens); },
          py::arg("prompt_tokens") = 0,
          "Every cache option as the caches for a prompt of prompt_tokens tokens get it (keep\n"
          "needs prompt_tokens >= 1).")
      .def("__repr__", &CacheBuilder::repr);
}

}  // namespace snapkv::python

PYBIND11_MODULE(_snapkv, m) {
  namespace py = pybind11;
  m.doc() = "snapkv.cpp's C++ library (KV-cache compression and its GGUF engine) for Python.";
  m.attr("__version__") = std::string(snapkv_version());
  py::register_exception<snapkv::RuntimeError>(m, "Error", PyExc_RuntimeError);
  snapkv::python::register_options(m);
  snapkv::python::register_caches(m);
  snapkv::python::register_model(m);
}
