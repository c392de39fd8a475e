// KVzap's training data and fit (eval/kvzap_train.h).
#include "snapkv/eval/kvzap_train.h"

#include <algorithm>
#include <cmath>

#include "snapkv/eval/harness.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/gguf/fingerprint.h"
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
  if (o.seed >> 63 != 0) throw_invalid(kComponent, "kvzap training seed", num(o.seed), "< 2^63");
}

}  // namespace

std::vector<std::vector<int32_t>> kvzap_training_prompts(const Tokenizer& tokenizer,
                                                         const KvzapTrainOptions& options) {
  std::vector<std::vector<int32_t>> out;
  const TokenCounter count = [&](std::string_view text) {
    return tokenizer.encode(std::string(text), false).size();
  };
  TaskOptions to;
  to.context_tokens = options.context_tokens;
  to.seed = options.seed;
  to.split = Split::train;
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

void kvzap_training_rows(const LlamaModel& model, const Tokenizer& tokenizer,
                         const KvzapTrainOptions& options, const KvzapRowSink& sink,
                         const KvzapProgress& progress) {
  const LlamaConfig& c = model.config();
  check_options(options, c.n_ctx);
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
