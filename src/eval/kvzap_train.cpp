// KVzap's training data and fit (eval/kvzap_train.h).
#include "snapkv/eval/kvzap_train.h"

#include <algorithm>
#include <cmath>

#include "snapkv/eval/harness.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/gguf/fingerprint.h"
#include "snapkv/kv/core/fork.h"
#include "snapkv/model/kvzip.h"
#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

namespace snapkv::eval {
namespace {

constexpr const char* kComponent = "eval";
// The generic text's generator seed is the user seed xor this, apart from the tasks' streams.
constexpr uint64_t kGenericSalt = 0x6b767a6170ULL;  // "kvzap"

void check_options(const KvzapTrainOptions& o, size_t n_ctx) {
  if (o.context_tokens < 64 || o.context_tokens > n_ctx) {
    throw_invalid(kComponent, "kvzap training context", num(o.context_tokens),
                  "64 .. the model's context_length " + num(n_ctx));
  }
  if (o.samples_per_task == 0 && o.generic_prompts == 0) {
    throw_invalid(kComponent, "kvzap training prompts", "0 samples per task and 0 generic",
                  ">= 1 prompt");
  }
  if (o.teacher == KvzapTeacher::questions && o.samples_per_task == 0) {
    throw_invalid(kComponent, "kvzap training prompts for teacher questions", "0 samples per task",
                  ">= 1 (generic prompts have no question)");
  }
  if (o.seed >> 63 != 0) throw_invalid(kComponent, "kvzap training seed", num(o.seed), "< 2^63");
}

// The train split of the tasks at the training context and seed.
TaskOptions train_split(const KvzapTrainOptions& options) {
  TaskOptions to;
  to.context_tokens = options.context_tokens;
  to.seed = options.seed;
  to.split = Split::train;
  return to;
}

TokenCounter token_counter(const Tokenizer& tokenizer) {
  return [&tokenizer](std::string_view text) {
    return tokenizer.encode(std::string(text), false).size();
  };
}

}  // namespace

std::vector<std::vector<int32_t>> kvzap_training_prompts(const Tokenizer& tokenizer,
                                                         const KvzapTrainOptions& options) {
  std::vector<std::vector<int32_t>> out;
  const TokenCounter count = token_counter(tokenizer);
  const TaskOptions to = train_split(options);
  for (const Task task : all_tasks()) {
    for (size_t i = 0; i < options.samples_per_task; ++i) {
      out.push_back(tokenize_prompt(tokenizer, generate_sample(task, to, i, count)).context);
    }
  }
  TaskRng rng(options.seed ^ kGenericSalt);
  for (size_t i = 0; i < options.generic_prompts; ++i) {
    std::string text;
    std::vector<int32_t> tokens = tokenizer.encode(text, true);
    // Sentences until the budget (BOS included) is reached; the last one is cut at the budget.
    while (tokens.size() < options.context_tokens) {
      text += filler_sentence(rng);
      text += ' ';
      tokens = tokenizer.encode(text, true);
    }
    tokens.resize(options.context_tokens);
    out.push_back(std::move(tokens));
  }
  return out;
}

namespace {

// Teacher questions: each train-split sample's context + question prefilled once with the full
// cache; the question rows' attention (policy snapkv's window scores, the window = the question,
// no pooling) gives each context row but BOS its share of the question's attention on the
// context, per KV head; the features are those of the context alone (positions as a fraction of
// the context), as a question-agnostic compression computes them.
void question_rows(const LlamaModel& model, const Tokenizer& tokenizer,
                   const KvzapTrainOptions& options, const KvzapRowSink& sink,
                   const KvzapProgress& progress) {
  const LlamaConfig& c = model.config();
  const RopeParams rope = model.rope_params();
  const size_t hd = c.head_dim, f = kvzap_n_features(hd);
  const TokenCounter count = token_counter(tokenizer);
  const TaskOptions to = train_split(options);
  const size_t total = all_tasks().size() * options.samples_per_task;
  std::vector<float> keys, feat(f);
  size_t done = 0;
  for (const Task task : all_tasks()) {
    for (size_t i = 0; i < options.samples_per_task; ++i) {
      const PromptTokens prompt = tokenize_prompt(tokenizer, generate_sample(task, to, i, count));
      std::vector<int32_t> all = prompt.context;
      all.insert(all.end(), prompt.question.begin(), prompt.question.end());
      const size_t n = all.size(), n_context = prompt.context.size();
      if (n > c.n_ctx) {
        throw_invalid(kComponent, "kvzap training prompt longer than the context", num(n),
                      "<= " + num(c.n_ctx));
      }
      CacheConfig attend;  // every row but one scored by the question's queries
      attend.policy = PolicyKind::snapkv;
      attend.window = prompt.question.size();
      attend.pool = PoolKind::none;
      attend.kernel = 1;
      attend.budget = n - 1;
      CacheConfig full = attend;
      full.policy = PolicyKind::full;
      LlamaSession base(model, fork_base_config(attend, n),
                        SessionOptions{options.prefill_chunk, {}});
      base.prefill_shared(all);
      const LlamaSession keep_all = base.fork(full);
      const LlamaSession scored = base.fork(attend);
      for (size_t l = 0; l < c.n_layers; ++l) {
        const LayerCache& cache = keep_all.caches()[l];
        keys.resize(cache.size() * hd);
        for (size_t h = 0; h < c.n_kv_heads; ++h) {
          const std::span<const int64_t> pos = cache.positions(h);
          const std::span<const float> s = scored.caches()[l].last_scores(h);
          SNAPKV_CHECK(s.size() == n && pos.size() == n);
          cache.read_keys(h, keys.data());
          kvzap_unrotate(keys.data(), pos.data(), n, hd, rope);
          double sum = 0.0;
          for (size_t r = 1; r < n_context; ++r) sum += std::max(static_cast<double>(s[r]), 0.0);
          for (size_t r = 1; r < n_context; ++r) {
            kvzap_features(feat.data(), keys.data() + r * hd, pos[r], n_context, hd);
            const double share = sum > 0.0 ? std::max(static_cast<double>(s[r]), 0.0) / sum : 0.0;
            const double target = std::clamp(std::log(std::max(share, 1e-30)), kKvzapLogFloor, 0.0);
            sink(l, h, feat.data(), target);
          }
        }
      }
      if (progress) progress(++done, total);
    }
  }
}

}  // namespace

void kvzap_training_rows(const LlamaModel& model, const Tokenizer& tokenizer,
                         const KvzapTrainOptions& options, const KvzapRowSink& sink,
                         const KvzapProgress& progress) {
  const LlamaConfig& c = model.config();
  check_options(options, c.n_ctx);
  if (options.teacher == KvzapTeacher::questions) {
    question_rows(model, tokenizer, options, sink, progress);
    return;
  }
  const std::vector<std::vector<int32_t>> prompts = kvzap_training_prompts(tokenizer, options);
  const RopeParams rope = model.rope_params();
  const size_t hd = c.head_dim, f = kvzap_n_features(hd);
  SessionOptions so{options.prefill_chunk, ReconstructionOptions{kvzip_repeat_prompt(tokenizer)}};
  CacheConfig full;  // policy full: keeps every row; the pass scores them all
  std::vector<float> keys, feat(f);
  for (size_t p = 0; p < prompts.size(); ++p) {
    const std::vector<int32_t>& tokens = prompts[p];
    if (tokens.size() > c.n_ctx) {
      throw_invalid(kComponent, "kvzap training prompt " + num(p) + " longer than the context",
                    num(tokens.size()), "<= " + num(c.n_ctx));
    }
    LlamaSession session(model, full, so);
    session.prefill(tokens);
    const ReconstructionScores scores =
        session.reconstruction_scores(options.teacher == KvzapTeacher::kvzip_plus);
    for (size_t l = 0; l < c.n_layers; ++l) {
      const LayerCache& cache = session.caches()[l];
      const size_t n_rows = cache.size();
      const size_t n_positions = std::max<size_t>(cache.offset(), 1);
      keys.resize(n_rows * hd);
      for (size_t h = 0; h < c.n_kv_heads; ++h) {
        const std::span<const int64_t> pos = cache.positions(h);
        cache.read_keys(h, keys.data());
        kvzap_unrotate(keys.data(), pos.data(), n_rows, hd, rope);
        const float* s = scores.layers[l].data() + h * n_rows;
        for (size_t r = 0; r < n_rows; ++r) {
          if (pos[r] == 0) continue;  // BOS: a sink in every policy
          kvzap_features(feat.data(), keys.data() + r * hd, pos[r], n_positions, hd);
          const double target =
              std::clamp(std::log(std::max(static_cast<double>(s[r]), 1e-30)), kKvzapLogFloor, 0.0);
          sink(l, h, feat.data(), target);
        }
      }
    }
    if (progress) progress(p + 1, prompts.size());
  }
}

KvzapScorer train_kvzap(const LlamaModel& model, const Tokenizer& tokenizer,
                        const KvzapTrainOptions& options, const KvzapProgress& progress) {
  KvzapFit fit(model.kvzap_dims());
  kvzap_training_rows(
      model, tokenizer, options,
      [&](size_t l, size_t h, const float* features, double target) {
        fit.add(l, h, features, target);
      },
      progress);
  return fit.solve(options.ridge, gguf::fingerprint(model.file()));
}

}  // namespace snapkv::eval
