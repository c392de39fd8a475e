// The cache level of the Python module: snapkv.build_caches(shape, config) -> Caches (one
// LayerCache per layer) fed with numpy float32 arrays [n_kv_heads, S, head_dim], and
// snapkv.select(keys, queries=None, ...), the computation of `snapkv select`.
//
// Promises: arrays are read in place (C-contiguous float32 only, else ValueError naming the
// argument, the shape or dtype got and the one expected); outputs are new arrays (one copy out);
// the GIL is released while the library computes; one mutex per Caches object serialises the
// calls that touch its layers, so Python threads sharing it cannot race.
// Leaves out: the model (model.cpp).
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "common.h"
#include "snapkv/kv/core/builder.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

namespace snapkv::python {
namespace {

constexpr std::string_view kComponent = "python";

struct Caches {
  ModelDims dims;
  std::vector<LayerCache> layers;
  mutable std::mutex mutex;
};

// One layer of a Caches object (keeps it alive).
struct Layer {
  std::shared_ptr<Caches> owner;
  size_t index = 0;
  LayerCache& cache() const { return owner->layers[index]; }
};

py::array_t<float> new_array(const std::vector<size_t>& shape) {
  std::vector<ssize_t> s(shape.begin(), shape.end());
  return py::array_t<float>(s);
}

void update(const Layer& l, const py::handle& k_obj, const py::handle& v_obj,
            const py::handle& q_obj, const std::string& kind) {
  const ModelDims& d = l.owner->dims;
  const F32Array k =
      f32_array(k_obj, "k", {d.n_kv_heads, 0, d.head_dim}, {"n_kv_heads", "S", "head_dim"});
  const F32Array v = f32_array(v_obj, "v", {d.n_kv_heads, k.shape[1], d.head_dim},
                               {"n_kv_heads", "S", "head_dim"});
  std::optional<F32Array> q;
  if (!q_obj.is_none()) {
    q = f32_array(q_obj, "q_window", {d.n_heads, 0, d.head_dim}, {"n_heads", "W", "head_dim"});
  }
  UpdateKind uk = UpdateKind::automatic;
  if (kind == "prefill") {
    uk = UpdateKind::prefill;
  } else if (kind == "decode") {
    uk = UpdateKind::decode;
  } else if (kind != "auto") {
    throw_invalid(kComponent, "kind", "'" + kind + "'", "'auto', 'prefill' or 'decode'");
  }
  const Tensor3 kt{k.data, d.n_kv_heads, k.shape[1], d.head_dim};
  const Tensor3 vt{v.data, d.n_kv_heads, v.shape[1], d.head_dim};
  std::optional<Tensor3> qt;
  if (q) qt = Tensor3{q->data, d.n_heads, q->shape[1], d.head_dim};
  py::gil_scoped_release release;
  std::lock_guard<std::mutex> lock(l.owner->mutex);
  l.cache().update(kt, vt, qt ? &*qt : nullptr, uk);
}

py::array_t<float> attend(const Layer& l, const py::handle& q_obj, const py::handle& k_obj,
                          const py::handle& v_obj) {
  const ModelDims& d = l.owner->dims;
  const F32Array q =
      f32_array(q_obj, "q", {d.n_heads, 0, d.head_dim}, {"n_heads", "S", "head_dim"});
  const size_t s = q.shape[1];
  const F32Array k =
      f32_array(k_obj, "k", {d.n_kv_heads, s, d.head_dim}, {"n_kv_heads", "S", "head_dim"});
  const F32Array v =
      f32_array(v_obj, "v", {d.n_kv_heads, s, d.head_dim}, {"n_kv_heads", "S", "head_dim"});
  if (s == 0) throw_invalid(kComponent, "q: S", "0 tokens", ">= 1 token");
  py::array_t<float> out = new_array({d.n_heads, s, d.head_dim});
  float* o = out.mutable_data();
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(l.owner->mutex);
    l.cache().attend(o, Tensor3{q.data, d.n_heads, s, d.head_dim},
                     Tensor3{k.data, d.n_kv_heads, s, d.head_dim},
                     Tensor3{v.data, d.n_kv_heads, s, d.head_dim});
  }
  return out;
}

py::array_t<int64_t> kept_positions(const Layer& l, size_t head) {
  std::lock_guard<std::mutex> lock(l.owner->mutex);
  if (head >= l.owner->dims.n_kv_heads) {
    throw_invalid(kComponent, "head", num(head), "< n_kv_heads = " + num(l.owner->dims.n_kv_heads));
  }
  const auto pos = l.cache().positions(head);
  py::array_t<int64_t> out(static_cast<ssize_t>(pos.size()));
  std::copy(pos.begin(), pos.end(), out.mutable_data());
  return out;
}

// Decoded keys or values of one head: [rows, head_dim].
py::array_t<float> read_rows(const Layer& l, size_t head, bool values) {
  std::lock_guard<std::mutex> lock(l.owner->mutex);
  const ModelDims& d = l.owner->dims;
  if (head >= d.n_kv_heads) {
    throw_invalid(kComponent, "head", num(head), "< n_kv_heads = " + num(d.n_kv_heads));
  }
  const size_t rows = l.cache().positions(head).size();
  py::array_t<float> out = new_array({rows, d.head_dim});
  if (values) {
    l.cache().read_values(head, out.mutable_data());
  } else {
    l.cache().read_keys(head, out.mutable_data());
  }
  return out;
}

std::shared_ptr<Caches> build(const py::tuple& shape, const py::handle& config,
                              size_t prompt_tokens) {
  if (shape.size() != 4) {
    throw_invalid(kComponent, "shape", py::repr(shape).cast<std::string>(),
                  "(n_layers, n_heads, n_kv_heads, head_dim)");
  }
  ModelDims d;
  size_t* fields[] = {&d.n_layers, &d.n_heads, &d.n_kv_heads, &d.head_dim};
  for (size_t i = 0; i < 4; ++i) {
    if (!py::isinstance<py::int_>(shape[i]) || py::isinstance<py::bool_>(shape[i]) ||
        shape[i].cast<py::int_>() < py::int_(1)) {
      throw_invalid(kComponent, "shape", py::repr(shape).cast<std::string>(),
                    "(n_layers, n_heads, n_kv_heads, head_dim), ints >= 1");
    }
    *fields[i] = shape[i].cast<size_t>();
  }
  const CacheConfig c = config_from(config, prompt_tokens, "config");
  auto caches = std::make_shared<Caches>();
  caches->dims = d;
  caches->layers = build_caches(d, c);
  return caches;
}

// `snapkv select` on arrays (cli/select_cmd.cpp): the kept positions per KV head and the scores
// of the compressing update (a twin cache with budget S - 1 scores when the budget holds all).
py::dict select(const py::handle& keys_obj, const py::handle& queries_obj,
                std::optional<size_t> budget, std::optional<double> keep, const py::dict& options,
                bool causal, std::optional<size_t> heads) {
  const F32Array k = f32_array(keys_obj, "keys", {0, 0, 0}, {"n_kv_heads", "S", "head_dim"});
  const size_t n_kv = k.shape[0], seq = k.shape[1], hd = k.shape[2];
  if (n_kv == 0 || seq == 0 || hd == 0) {
    throw_invalid(kComponent, "keys: empty", shape_text(k.shape),
                  "(n_kv_heads >= 1, S >= 1, head_dim >= 1)");
  }
  std::optional<F32Array> q;
  size_t n_heads = heads.value_or(n_kv);
  if (heads && *heads == 0) throw_invalid(kComponent, "heads", "0", ">= 1");
  py::dict opts = options;
  if (!queries_obj.is_none()) {
    q = f32_array(queries_obj, "queries", {0, 0, hd}, {"n_heads", "W", "head_dim"});
    if (q->shape[0] == 0 || q->shape[1] == 0 || q->shape[0] % n_kv != 0 || q->shape[1] > seq) {
      throw_invalid(kComponent, "queries: shape", shape_text(q->shape),
                    "(n_heads = a multiple of " + num(n_kv) + ", 1 <= W <= " + num(seq) + ", " +
                        num(hd) + ")");
    }
    if (heads && *heads != q->shape[0]) {
      throw_invalid(kComponent, "heads disagrees with queries", num(*heads),
                    num(q->shape[0]) + " (its first dimension)");
    }
    if (opts.contains("window") && !py::int_(opts["window"]).equal(py::int_(q->shape[1]))) {
      throw_invalid(kComponent, "window disagrees with the rows of queries",
                    py::str(opts["window"]).cast<std::string>(), num(q->shape[1]));
    }
    n_heads = q->shape[0];
    opts["window"] = q->shape[1];
  }
  if (n_heads % n_kv != 0) {
    throw_invalid(kComponent, "heads", num(n_heads), "a multiple of n_kv_heads = " + num(n_kv));
  }
  opts["causal"] = causal;
  opts["query_source"] = q ? "queries" : "keys";
  // snapkv-proxy without queries: the same window and kernel defaults as `snapkv select`.
  const CacheBuilder builder(q ? "snapkv" : "snapkv-proxy", keep, budget, opts);
  const CacheConfig config = builder.config_for(seq);
  const std::vector<float> values(k.shape[0] * seq * hd, 0.0f);
  const Tensor3 kt{k.data, n_kv, seq, hd};
  const Tensor3 vt{values.data(), n_kv, seq, hd};
  std::optional<Tensor3> qt;
  if (q) qt = Tensor3{q->data, q->shape[0], q->shape[1], hd};
  std::optional<LayerCache> cache, twin;
  {
    py::gil_scoped_release release;
    cache.emplace(CacheDims{n_heads, n_kv, hd}, config);
    cache->update(kt, vt, qt ? &*qt : nullptr, UpdateKind::prefill);
    cache->end_prompt();
    if (cache->compressions() == 0 && seq >= 2) {
      CacheConfig twin_config = config;
      twin_config.budget = seq - 1;
      twin_config.n_sink = std::min(config.n_sink, seq - 1);
      twin_config.keep_window = false;
      twin.emplace(CacheDims{n_heads, n_kv, hd}, twin_config);
      twin->update(kt, vt, qt ? &*qt : nullptr, UpdateKind::prefill);
      twin->end_prompt();
    }
  }
  const LayerCache& scored = twin ? *twin : *cache;
  py::list kept, scores;
  for (size_t h = 0; h < n_kv; ++h) {
    const auto pos = cache->positions(h);
    py::array_t<int64_t> p(static_cast<ssize_t>(pos.size()));
    std::copy(pos.begin(), pos.end(), p.mutable_data());
    kept.append(p);
    const auto s = scored.last_scores(h);
    py::array_t<float> a(static_cast<ssize_t>(s.size()));
    std::copy(s.begin(), s.end(), a.mutable_data());
    scores.append(a);
  }
  py::dict out;
  out["kept"] = kept;
  out["scores"] = scores;
  out["budget"] = config.budget;
  return out;
}

}  // namespace

void register_caches(py::module_& m) {
  py::class_<Caches, std::shared_ptr<Caches>>(
      m, "Caches",
      "One KV cache per layer of a model (snapkv.build_caches). caches[l] is layer l's cache;\n"
      "len(caches) is n_layers.")
      .def("__len__", [](const Caches& c) { return c.layers.size(); })
      .def(
          "__getitem__",
          [](const std::shared_ptr<Caches>& c, long i) {
            const long n = static_cast<long>(c->layers.size());
            if (i < 0) i += n;
            if (i < 0 || i >= n) throw py::index_error("[python] layer index out of range");
            return Layer{c, static_cast<size_t>(i)};
          },
          py::arg("layer"))
      .def_property_readonly(
          "shape",
          [](const Caches& c) {
            return py::make_tuple(c.dims.n_layers, c.dims.n_heads, c.dims.n_kv_heads,
                                  c.dims.head_dim);
          },
          "(n_layers, n_heads, n_kv_heads, head_dim)")
      .def(
          "end_prompt",
          [](Caches& c) {
            py::gil_scoped_release release;
            std::lock_guard<std::mutex> lock(c.mutex);
            for (LayerCache& l : c.layers) l.end_prompt();
          },
          "The prompt is complete: every layer compresses now (chunk_mode end_of_prompt).")
      .def(
          "stats",
          [](const Caches& c) {
            std::lock_guard<std::mutex> lock(c.mutex);
            return stats_dict(total_stats(c.layers));
          },
          "Accounting over every layer: tokens_seen, tokens_kept (mean rows per KV head),\n"
          "rows_kept, mean_kept, bytes_stored, bytes_full_fp16, eviction_ratio, keep_rate.");

  py::class_<Layer>(
      m, "LayerCache",
      "The KV cache of one layer. Arrays are float32, C-contiguous:\n"
      "  k, v      [n_kv_heads, S, head_dim]  rotated by RoPE at positions offset...\n"
      "  q         [n_heads, S, head_dim]\n"
      "  q_window  [n_heads, W, head_dim]     the chunk's last W rotated queries")
      .def("update", &update, py::arg("k"), py::arg("v"), py::arg("q_window") = py::none(),
           py::arg("kind") = "auto",
           "Adds S tokens. q_window None: the policy uses the last `window` keys as proxy\n"
           "queries. kind: 'auto' (S > 1 prefill, S == 1 decode), 'prefill' or 'decode'.")
      .def("attend", &attend, py::arg("q"), py::arg("k"), py::arg("v"),
           "Attention of the chunk's queries over the kept rows plus the chunk's own rows\n"
           "(causal inside the chunk); call before update() with the same k, v. Returns a new\n"
           "array [n_heads, S, head_dim].")
      .def(
          "end_prompt",
          [](const Layer& l) {
            py::gil_scoped_release release;
            std::lock_guard<std::mutex> lock(l.owner->mutex);
            l.cache().end_prompt();
          },
          "The prompt is complete: compress now (chunk_mode end_of_prompt).")
      .def("kept_positions", &kept_positions, py::arg("head"),
           "Original positions of the rows kept for one KV head, increasing (int64 array).")
      .def(
          "keys", [](const Layer& l, size_t h) { return read_rows(l, h, false); }, py::arg("head"),
          "Decoded kept keys of one KV head [rows, head_dim] (codec-rounded).")
      .def(
          "values", [](const Layer& l, size_t h) { return read_rows(l, h, true); }, py::arg("head"),
          "Decoded kept values of one KV head [rows, head_dim] (codec-rounded).")
      .def_property_readonly(
          "offset",
          [](const Layer& l) {
            std::lock_guard<std::mutex> lock(l.owner->mutex);
            return l.cache().offset();
          },
          "Tokens seen: the next token's absolute position.")
      .def(
          "stats",
          [](const Layer& l) {
            std::lock_guard<std::mutex> lock(l.owner->mutex);
            return stats_dict(l.cache().stats());
          },
          "Accounting of this layer (see Caches.stats).");

  m.def("build_caches", &build, py::arg("shape"), py::arg("config"), py::arg("prompt_tokens") = 0,
        "Caches for a model of shape (n_layers, n_heads, n_kv_heads, head_dim). config: a\n"
        "snapkv.builder(...), a 'key=value ...' string (the C ABI's) or a dict of cache options.\n"
        "A builder with keep= needs prompt_tokens (the budget is keep x prompt_tokens).");
  m.def("select", &select, py::arg("keys"), py::arg("queries") = py::none(),
        py::arg("budget") = py::none(), py::arg("keep") = py::none(),
        py::arg("options") = py::dict(), py::arg("causal") = true, py::arg("heads") = py::none(),
        "`snapkv select` on arrays: keys [n_kv_heads, S, head_dim], queries [n_heads, W,\n"
        "head_dim] or None (the last `window` keys are proxy queries). Returns {'kept': [int64\n"
        "array per KV head], 'scores': [float32 array per KV head], 'budget': int}.");
}

}  // namespace snapkv::python
