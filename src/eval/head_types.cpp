// Measuring head types from the model's attention (eval/head_types.h).
#include "snapkv/eval/head_types.h"

#include <algorithm>
#include <cmath>

#include "snapkv/eval/harness.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/gguf/fingerprint.h"
#include "snapkv/kv/core/head_types.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"
#include "snapkv/util/text.h"

namespace snapkv::eval {
namespace {

constexpr const char* kComponent = "eval";

void check_options(const HeadTypesOptions& o, size_t n_ctx) {
  if (o.contexts.empty()) throw_invalid(kComponent, "head types contexts", "none", ">= 1");
  for (const size_t c : o.contexts) {
    if (c < 128 || c > n_ctx) {
      throw_invalid(kComponent, "head types context", num(c),
                    "128 .. the model's context_length " + num(n_ctx));
    }
  }
  if (o.samples_per_task == 0) {
    throw_invalid(kComponent, "head types samples per task", "0", ">= 1");
  }
  if (o.queries == 0 || o.queries > 1024) {
    throw_invalid(kComponent, "head types queries", num(o.queries), "1 .. 1024");
  }
  if (o.recent == 0) throw_invalid(kComponent, "head types recent rows", "0", ">= 1");
  if (o.seed >> 63 != 0) throw_invalid(kComponent, "head types seed", num(o.seed), "< 2^63");
}

}  // namespace

std::vector<std::vector<int32_t>> head_types_prompts(const Tokenizer& tokenizer,
                                                     const HeadTypesOptions& options) {
  std::vector<std::vector<int32_t>> out;
  const TokenCounter count = [&](std::string_view text) {
    return tokenizer.encode(std::string(text), false).size();
  };
  for (const size_t context : options.contexts) {
    TaskOptions to;
    to.context_tokens = context;
    to.seed = options.seed;
    to.split = Split::train;
    for (const Task task : all_tasks()) {
      for (size_t i = 0; i < options.samples_per_task; ++i) {
        PromptTokens p = tokenize_prompt(tokenizer, generate_sample(task, to, i, count));
        p.context.insert(p.context.end(), p.question.begin(), p.question.end());
        out.push_back(std::move(p.context));
      }
    }
  }
  return out;
}

std::vector<double> layer_outside_mass(const LayerCache& cache, size_t n_sink, size_t recent) {
  const CacheDims& d = cache.dims();
  const size_t n_group = d.n_heads / d.n_kv_heads, hd = d.head_dim;
  const size_t w = cache.pending_window();
  const std::span<const float> queries = cache.pending_queries();  // [n_heads][w][hd]
  if (w == 0 || queries.size() != d.n_heads * w * hd) {
    throw_invalid(kComponent, "head types need the prompt's window queries",
                  num(w) + " pending rows", ">= 1 (an open prompt of a query-keeping policy)");
  }
  std::vector<double> out(d.n_heads, 0.0);
  parallel_for(d.n_kv_heads, [&](size_t h) {
    const size_t n = cache.size(h);
    const std::span<const int64_t> pos = cache.positions(h);
    for (size_t i = 0; i < n; ++i) SNAPKV_CHECK(pos[i] == static_cast<int64_t>(i));
    std::vector<float> keys(n * hd), probs;
    std::vector<double> logits;
    cache.read_keys(h, keys.data());
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    for (size_t g = 0; g < n_group; ++g) {
      const size_t qh = h * n_group + g;
      double sum = 0.0;
      for (size_t r = 0; r < w; ++r) {
        const size_t p = n - w + r;  // the query's position: it sees rows 0..p
        const float* q = queries.data() + (qh * w + r) * hd;
        logits.assign(p + 1, 0.0);
        double top = -INFINITY;
        for (size_t j = 0; j <= p; ++j) {
          double s = 0.0;
          for (size_t c = 0; c < hd; ++c) s += static_cast<double>(q[c]) * keys[j * hd + c];
          logits[j] = s * scale;
          top = std::max(top, logits[j]);
        }
        double z = 0.0;
        for (double& v : logits) {
          v = std::exp(v - top);
          z += v;
        }
        probs.resize(p + 1);
        for (size_t j = 0; j <= p; ++j) probs[j] = static_cast<float>(logits[j] / z);
        sum += mass_outside_window(probs, n_sink, recent);
      }
      out[qh] = sum / static_cast<double>(w);
    }
  });
  return out;
}

HeadTypes find_head_types(const LlamaModel& model, const Tokenizer& tokenizer,
                          const HeadTypesOptions& options, const HeadTypesProgress& progress) {
  const LlamaConfig& c = model.config();
  check_options(options, c.n_ctx);
  const std::vector<std::vector<int32_t>> prompts = head_types_prompts(tokenizer, options);
  CacheConfig keep;  // snapkv with real queries: the prefill keeps the window's queries pending
  keep.policy = PolicyKind::snapkv;
  keep.query_source = QuerySource::queries;
  keep.window = options.queries;
  keep.budget = std::max<size_t>(keep.budget, keep.n_sink + keep.window);
  SessionOptions so;
  so.prefill_chunk = options.prefill_chunk;
  std::vector<double> sums(c.n_layers * c.n_heads, 0.0);
  for (size_t p = 0; p < prompts.size(); ++p) {
    const std::vector<int32_t>& tokens = prompts[p];
    if (tokens.size() > c.n_ctx || tokens.size() <= options.queries) {
      throw_invalid(kComponent, "head types prompt " + num(p) + " length", num(tokens.size()),
                    "> " + num(options.queries) + " queries and <= " + num(c.n_ctx));
    }
    LlamaSession session(model, keep, so);
    session.prefill_shared(tokens);  // the prompt stays open: every row and the window's queries
    for (size_t l = 0; l < c.n_layers; ++l) {
      const std::vector<double> m =
          layer_outside_mass(session.caches()[l], options.n_sink, options.recent);
      for (size_t qh = 0; qh < c.n_heads; ++qh) sums[l * c.n_heads + qh] += m[qh];
    }
    if (progress) progress(p + 1, prompts.size());
  }
  const size_t n_group = c.n_heads / c.n_kv_heads;
  std::vector<float> scores(c.n_layers * c.n_kv_heads, 0.0f);
  for (size_t l = 0; l < c.n_layers; ++l) {
    for (size_t h = 0; h < c.n_kv_heads; ++h) {
      double best = 0.0;
      for (size_t g = 0; g < n_group; ++g) {
        best = std::max(best, sums[l * c.n_heads + h * n_group + g]);
      }
      const double mean = best / static_cast<double>(prompts.size());
      scores[l * c.n_kv_heads + h] = static_cast<float>(std::clamp(mean, 0.0, 1.0));
    }
  }
  return HeadTypes(c.n_layers, c.n_kv_heads, gguf::fingerprint(model.file()), std::move(scores),
                   options.n_sink, options.recent);
}

}  // namespace snapkv::eval
