// `snapkv select`: which rows does SnapKV keep? Reads K (and optionally the window's Q) from .npy,
// runs the snapkv policy through a LayerCache on one prefill chunk and prints, per KV head, the
// kept positions and the scores (after pooling, before selection) as JSON on stdout.
//
//   snapkv select --keys K.npy [--queries Q.npy] --budget 256 --window 32 --sinks 4 --pool max
//
// Not here: the math (kv/core/snapkv_score.h, the policy) and the file format (util/npy.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache_options.h"
#include "command.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/util/error.h"
#include "snapkv/util/fp16.h"
#include "snapkv/util/npy.h"
#include "snapkv/util/text.h"

namespace {

struct SelectOptions {
  std::string keys;
  std::string queries;
  snapkv::cli::CacheOptions cache;  // --budget | --keep, window, sinks, pool, kernel, keep-window
  bool no_causal = false;
  size_t heads = 0;  // 0 = not given: implied by Q, else n_kv_heads
  const CLI::Option* heads_option = nullptr;
  snapkv::cli::JsonOutput json;
  bool table = false;
  // Which flags were given explicitly (set after parsing).
  bool window_given = false;
};

using snapkv::num;

std::string shape_string(const snapkv::NpyArray& a) {
  std::string s = "[";
  for (size_t i = 0; i < a.shape.size(); ++i) s += (i ? "][" : "") + num(a.shape[i]);
  return s + "]";
}

// Bad data in a file is a runtime error (exit 1), named by file and index. Keys are stored by the
// cache in fp16, so they follow the cache's rule (|x| <= 65504, LayerCache::update) here too.
void check_finite_file(const snapkv::NpyArray& a, const std::string& path, bool stored_in_fp16) {
  const float limit = stored_in_fp16 ? snapkv::kFp16Max : std::numeric_limits<float>::max();
  for (size_t i = 0; i < a.data.size(); ++i) {
    if (!(std::fabs(a.data[i]) <= limit)) {
      const size_t d2 = a.shape[2], d1 = a.shape[1];
      const bool finite = std::isfinite(a.data[i]);
      snapkv::throw_runtime(
          "select",
          path + (finite ? ": value outside the fp16 range" : ": non-finite value") + " at [" +
              num(i / (d1 * d2)) + "][" + num(i / d2 % d1) + "][" + num(i % d2) + "]",
          std::to_string(a.data[i]),
          stored_in_fp16 ? "finite values with |x| <= 65504 (keys are stored in fp16)"
                         : "finite float32 values");
    }
  }
}

// "0-3, 17, 40-45"
std::string ranges(std::span<const int64_t> pos) {
  std::string s;
  for (size_t i = 0; i < pos.size();) {
    size_t j = i;
    while (j + 1 < pos.size() && pos[j + 1] == pos[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += std::to_string(pos[i]);
    if (j > i) s += "-" + std::to_string(pos[j]);
    i = j + 1;
  }
  return s;
}

int run_select(SelectOptions& opts) {
  using namespace snapkv;
  if (opts.heads_option->count() > 0 && opts.heads == 0) {
    throw_invalid("select", "--heads", "0", ">= 1 query heads (a multiple of n_kv_heads)");
  }
  if (opts.json.given() && opts.table) {
    throw_invalid("select", "--json and --table both given", "both", "at most one output format");
  }
  const NpyArray k = read_npy(opts.keys, 3);  // [n_kv_heads][S][head_dim]
  const size_t n_kv_heads = k.shape[0], seq_len = k.shape[1], head_dim = k.shape[2];
  if (n_kv_heads == 0 || seq_len == 0 || head_dim == 0) {
    throw_runtime("select", opts.keys + ": empty keys tensor", "shape " + shape_string(k),
                  "[n_kv_heads >= 1][S >= 1][head_dim >= 1]");
  }
  check_finite_file(k, opts.keys, true);

  std::optional<NpyArray> q;
  size_t n_heads = opts.heads != 0 ? opts.heads : n_kv_heads;
  if (!opts.queries.empty()) {
    q = read_npy(opts.queries, 3);  // [n_heads][W][head_dim]
    if (q->shape[2] != head_dim) {
      throw_runtime("select", opts.queries + ": head_dim differs from the keys'",
                    "shape " + shape_string(*q), "[n_heads][W][" + num(head_dim) + "]");
    }
    if (q->shape[0] == 0 || q->shape[1] == 0) {
      throw_runtime("select", opts.queries + ": empty queries tensor", "shape " + shape_string(*q),
                    "[n_heads >= 1][W >= 1][head_dim]");
    }
    if (q->shape[0] % n_kv_heads != 0) {
      throw_runtime("select", opts.queries + ": query head count is not a multiple of the keys'",
                    num(q->shape[0]) + " heads", "a multiple of n_kv_heads = " + num(n_kv_heads));
    }
    if (q->shape[1] > seq_len) {
      throw_runtime("select", opts.queries + ": more window rows than keys",
                    num(q->shape[1]) + " rows", "at most S = " + num(seq_len));
    }
    if (opts.heads != 0 && opts.heads != q->shape[0]) {
      throw_invalid("select", "--heads disagrees with " + opts.queries, num(opts.heads),
                    num(q->shape[0]) + " (its first dimension)");
    }
    if (opts.window_given && opts.cache.knobs.window != q->shape[1]) {
      throw_invalid("select", "--window disagrees with the rows of " + opts.queries,
                    num(opts.cache.knobs.window), num(q->shape[1]));
    }
    check_finite_file(*q, opts.queries, false);
    n_heads = q->shape[0];
    opts.cache.knobs.window = q->shape[1];
    opts.cache.knobs.window_given = true;  // the file's rows, whatever the method's default
  }

  Method method = parse_method(q ? "snapkv" : "snapkv-proxy", opts.cache.knobs);
  method.config.budget = opts.cache.budget;
  method.config.causal = !opts.no_causal;
  method.config.query_source = q ? QuerySource::queries : QuerySource::keys;
  const CacheConfig config = opts.cache.config_for(method, seq_len);
  opts.json.open("select", {{opts.keys, "--keys"}, {opts.queries, "--queries"}});

  LayerCache cache(CacheDims{n_heads, n_kv_heads, head_dim}, config);
  const std::vector<float> values(k.data.size(), 0.0f);
  const Tensor3 kt{k.data.data(), n_kv_heads, seq_len, head_dim};
  const Tensor3 vt{values.data(), n_kv_heads, seq_len, head_dim};
  std::optional<Tensor3> qt;
  if (q) qt = Tensor3{q->data.data(), q->shape[0], q->shape[1], head_dim};
  cache.update(kt, vt, qt ? &*qt : nullptr, UpdateKind::prefill);
  cache.end_prompt();

  // Scores: the cache's own, from its compressing update. When the budget holds all S rows the
  // policy never runs, so a twin cache with budget S - 1 (sinks capped, window not forced: neither
  // changes the scores) scores the same rows through the same path.
  const LayerCache* scored = &cache;
  std::optional<LayerCache> twin;
  if (cache.compressions() == 0 && seq_len >= 2) {
    CacheConfig twin_config = config;
    twin_config.budget = seq_len - 1;
    twin_config.n_sink = std::min(config.n_sink, seq_len - 1);
    twin_config.keep_window = false;
    twin.emplace(CacheDims{n_heads, n_kv_heads, head_dim}, twin_config);
    twin->update(kt, vt, qt ? &*qt : nullptr, UpdateKind::prefill);
    twin->end_prompt();
    scored = &*twin;
  }
  std::vector<std::vector<float>> scores(n_kv_heads);  // [n_kv_heads][S]; empty when S == 1
  for (size_t h = 0; h < n_kv_heads; ++h) {
    const auto last = scored->last_scores(h);
    scores[h].assign(last.begin(), last.end());
  }

  std::string out;
  if (opts.table) {
    out += "snapkv select: S " + num(seq_len) + ", n_kv_heads " + num(n_kv_heads) + ", n_heads " +
           num(n_heads) + ", head_dim " + num(head_dim) + ", budget " + num(config.budget) +
           ", window " + num(config.window) + ", sinks " + num(config.n_sink) + ", pool " +
           std::string(to_string(config.pool)) + " (kernel " + num(config.kernel) + "), " +
           (q ? "true queries" : "proxy keys") + (config.causal ? ", causal" : ", not causal") +
           (config.keep_window ? ", window kept" : "") + "\n";
    for (size_t h = 0; h < n_kv_heads; ++h) {
      const auto pos = cache.positions(h);
      double kept_mass = 0.0, total = 0.0;
      for (float s : scores[h]) total += s;
      for (int64_t p : pos) kept_mass += scores[h][static_cast<size_t>(p)];
      char line[160];
      std::snprintf(line, sizeof(line),
                    "kv head %zu: kept %zu of %zu, score mass kept %.4f of %.4f\n", h, pos.size(),
                    seq_len, kept_mass, total);
      out += line;
      out += "  positions: " + ranges(pos) + "\n";
    }
  } else {
    nlohmann::json j;
    j["kept"] = nlohmann::json::array();
    for (size_t h = 0; h < n_kv_heads; ++h) {
      const auto pos = cache.positions(h);
      j["kept"].push_back(std::vector<int64_t>(pos.begin(), pos.end()));
    }
    j["scores"] = scores;
    if (opts.json.to_file()) {
      opts.json.write(j, "select", -1);
      return 0;
    }
    out = j.dump() + "\n";
  }
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) {
    throw_runtime("select", "write to stdout failed", "a short write", "the whole output");
  }
  return 0;
}

snapkv::cli::RegisterCommand reg{
    "select", "Show which rows SnapKV keeps for keys (and queries) from .npy files",
    [](CLI::App& sub) -> snapkv::cli::Action {
      auto opts = std::make_shared<SelectOptions>();
      sub.add_option("--keys", opts->keys, "K.npy: float32 [n_kv_heads][S][head_dim], rotated keys")
          ->required();
      sub.add_option(
          "--queries", opts->queries,
          "Q.npy: float32 [n_heads][W][head_dim], the queries of the last W positions "
          "(paper mode); without it the last --window keys are proxy queries over the keys "
          "before the window");
      snapkv::cli::CacheOptionSpec spec;
      spec.methods = snapkv::cli::MethodArity::none;
      spec.prefill_chunk = false;
      spec.threads = false;
      snapkv::cli::add_cache_options(sub, opts->cache, spec);
      sub.add_flag("--no-causal", opts->no_causal,
                   "no causal mask inside the window (as SnapKV's reference code)");
      opts->heads_option =
          sub.add_option("--heads", opts->heads,
                         "query heads (implied by Q's first dimension; default n_kv_heads)");
      snapkv::cli::add_json_option(sub, opts->json,
                                   "kept positions and scores (the default output)");
      sub.add_flag("--table", opts->table, "a readable summary instead of JSON");
      sub.footer(
          "Output (stdout, or --json FILE): {\"kept\": [[positions of kv head 0], ...], "
          "\"scores\": [[score of "
          "every "
          "position of kv head 0], ...]}.\n"
          "Scores are the window's mean attention per position (averaged over window rows and the "
          "GQA group's query heads), after pooling, before selection. Keys are scored as the cache "
          "stores them (rounded to fp16). With --budget >= S nothing is evicted: \"kept\" lists "
          "every position and \"scores\" still holds the scores the policy would have used.\n"
          "Exit codes: 0 ok, 1 bad file or data, 2 bad usage.\n"
          "Cache options default to the library's CacheConfig (as in run, eval, bench).\n"
          "Example:\n  snapkv select --keys K.npy --queries Q.npy --budget 256 --sinks 4 --pool "
          "max --kernel 7 --keep-window");
      const CLI::Option* window = sub.get_option("--window");
      return [opts, window] {
        opts->window_given = window->count() > 0;
        return run_select(*opts);
      };
    }};

}  // namespace
