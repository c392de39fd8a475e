// `snapkv select`: which rows does SnapKV keep? Reads K (and optionally the window's Q) from .npy,
// runs the snapkv policy through a LayerCache on one prefill chunk and prints, per KV head, the
// kept positions and the scores (after pooling, before selection) as JSON on stdout.
//
//   snapkv select --keys K.npy [--queries Q.npy] --budget 256 --window 32 --sinks 4 --pool max
//
// Not here: the math (kv/snapkv_score.h, the policy) and the file format (util/npy.h).
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "command.h"
#include "snapkv/kv/config.h"
#include "snapkv/kv/layer_cache.h"
#include "snapkv/kv/snapkv_score.h"
#include "snapkv/util/error.h"
#include "snapkv/util/fp16.h"
#include "snapkv/util/npy.h"

namespace {

struct SelectOptions {
  std::string keys;
  std::string queries;
  size_t budget = 512;
  size_t window = 32;
  size_t sinks = 4;
  std::string pool = "none";
  size_t kernel = 0;  // 0: 7 when pooling, else 1
  bool keep_window = false;
  bool no_causal = false;
  size_t heads = 0;  // 0: implied by Q, else n_kv_heads
  bool json = false;
  bool table = false;
  // Which flags were given explicitly (set after parsing).
  bool window_given = false;
};

std::string num(size_t v) {
  return std::to_string(v);
}

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

// Shortest decimal text that reads back as the same float.
void append_float(std::string& out, float x) {
  char buf[32];
  const auto res = std::to_chars(buf, buf + sizeof(buf), x);
  out.append(buf, res.ptr);
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

int run_select(SelectOptions opts) {
  using namespace snapkv;
  if (opts.json && opts.table) {
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
    if (opts.window_given && opts.window != q->shape[1]) {
      throw_invalid("select", "--window disagrees with the rows of " + opts.queries,
                    num(opts.window), num(q->shape[1]));
    }
    check_finite_file(*q, opts.queries, false);
    n_heads = q->shape[0];
    opts.window = q->shape[1];
  }

  CacheConfig config;
  config.policy = PolicyKind::snapkv;
  config.budget = opts.budget;
  config.window = opts.window;
  config.n_sink = opts.sinks;
  config.pool = parse_pool(opts.pool);
  config.kernel = opts.kernel != 0 ? opts.kernel : (config.pool == PoolKind::none ? 1 : 7);
  config.keep_window = opts.keep_window;
  config.causal = !opts.no_causal;
  config.query_source = q ? QuerySource::queries : QuerySource::keys;
  config.validate();

  LayerCache cache(CacheDims{n_heads, n_kv_heads, head_dim}, config);
  const std::vector<float> values(k.data.size(), 0.0f);
  const Tensor3 kt{k.data.data(), n_kv_heads, seq_len, head_dim};
  const Tensor3 vt{values.data(), n_kv_heads, seq_len, head_dim};
  std::optional<Tensor3> qt;
  if (q) qt = Tensor3{q->data.data(), q->shape[0], q->shape[1], head_dim};
  cache.update(kt, vt, qt ? &*qt : nullptr, UpdateKind::prefill);

  // Scores: from the policy when it ran; when budget >= S nothing is evicted and the policy is not
  // called, so the same scoring function runs here on the same inputs the cache would give it
  // (keys rounded to fp16 as the store holds them, the true queries of the head's group).
  std::vector<std::vector<float>> scores(n_kv_heads);
  const size_t n_group = n_heads / n_kv_heads;
  for (size_t h = 0; h < n_kv_heads; ++h) {
    const auto last = cache.last_scores(h);
    if (cache.compressions() > 0 && last.size() == seq_len) {
      scores[h].assign(last.begin(), last.end());
      continue;
    }
    std::vector<float> keys(seq_len * head_dim);  // [S][head_dim]
    for (size_t i = 0; i < keys.size(); ++i) {
      keys[i] = fp16_to_fp32(fp32_to_fp16(k.data[h * seq_len * head_dim + i]));
    }
    std::vector<int64_t> positions(seq_len);
    for (size_t i = 0; i < seq_len; ++i) positions[i] = static_cast<int64_t>(i);
    SelectionInput in;
    in.kv_head = h;
    in.head_dim = head_dim;
    in.n_rows = seq_len;
    in.keys = keys.data();
    in.positions = positions.data();
    if (q) {
      in.queries = q->data.data() + h * n_group * q->shape[1] * head_dim;
      in.n_group = n_group;
      in.n_window = q->shape[1];
    }
    scores[h] = snapkv_candidate_scores(in, config);
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
    out.reserve(n_kv_heads * seq_len * 16);
    out += "{\"kept\": [";
    for (size_t h = 0; h < n_kv_heads; ++h) {
      out += h ? ", [" : "[";
      const auto pos = cache.positions(h);
      for (size_t i = 0; i < pos.size(); ++i) {
        if (i) out += ", ";
        out += std::to_string(pos[i]);
      }
      out += "]";
    }
    out += "], \"scores\": [";
    for (size_t h = 0; h < n_kv_heads; ++h) {
      out += h ? ", [" : "[";
      for (size_t i = 0; i < scores[h].size(); ++i) {
        if (i) out += ", ";
        append_float(out, scores[h][i]);
      }
      out += "]";
    }
    out += "]}\n";
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
      sub.add_option("--queries", opts->queries,
                     "Q.npy: float32 [n_heads][W][head_dim], the queries of the last W positions "
                     "(paper mode); without it the last --window keys are proxy queries");
      sub.add_option("--budget", opts->budget, "rows kept per KV head")->capture_default_str();
      auto* window = sub.add_option("--window", opts->window,
                                    "observation window (defaults to W when --queries is given)")
                         ->capture_default_str();
      sub.add_option("--sinks", opts->sinks, "first positions always kept")->capture_default_str();
      sub.add_option("--pool", opts->pool, "score pooling: none | max | avg")
          ->check(CLI::IsMember({"none", "max", "avg"}))
          ->capture_default_str();
      sub.add_option("--kernel", opts->kernel,
                     "pooling kernel, odd (default 7 when pooling, else 1)");
      sub.add_flag("--keep-window", opts->keep_window, "always keep the window's own rows (paper)");
      sub.add_flag("--no-causal", opts->no_causal,
                   "no causal mask inside the window (as SnapKV's reference code)");
      sub.add_option("--heads", opts->heads,
                     "query heads (implied by Q's first dimension; default n_kv_heads)");
      sub.add_flag("--json", opts->json, "JSON on stdout (the default output)");
      sub.add_flag("--table", opts->table, "a readable summary instead of JSON");
      sub.footer(
          "Output (stdout): {\"kept\": [[positions of kv head 0], ...], \"scores\": [[score of "
          "every "
          "position of kv head 0], ...]}.\n"
          "Scores are the window's mean attention per position (averaged over window rows and the "
          "GQA group's query heads), after pooling, before selection. Keys are scored as the cache "
          "stores them (rounded to fp16). With --budget >= S nothing is evicted: \"kept\" lists "
          "every position and \"scores\" still holds the scores the policy would have used.\n"
          "Exit codes: 0 ok, 1 bad file or data, 2 bad usage.\n"
          "Example:\n  snapkv select --keys K.npy --queries Q.npy --budget 256 --sinks 4 --pool "
          "max "
          "--kernel 7 --keep-window");
      return [opts, window] {
        opts->window_given = window->count() > 0;
        return run_select(*opts);
      };
    }};

}  // namespace
