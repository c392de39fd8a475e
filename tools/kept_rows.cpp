// kept_rows: what SnapKV keeps of one task sample's needle, per layer and KV head, and what the
// model answers with it (docs/RESULTS.md, "Where the unmet goals lose"). Single-answer tasks
// (niah_single, passkey): the needle is the sentence that holds the answer's digits.
//   kept_rows <model.gguf> <task> <context> <seed> <index> <keep> [window]
// Prints, for the default CacheConfig (window overridable): the needle's and the question's token
// positions; per layer and KV head the kept rows split into sinks, needle, window, other question
// rows and the rest, with the needle's digits kept; the full cache's answer and its smallest logit
// margin over the answer's digit tokens; snapkv's answer; and the answers of forced selections,
// each SnapKV's own pooled scores with some rows ranked first (kept through policy kvzip's
// given-scores fork, pooling off, the same budget): the needle sentence in every head
// ("needle-all"), in every head but one ("needle-all-but-LxHy"), the needle with 64 rows either
// side, and one ranking per layer shared by its KV heads (the sum of each head's max-normalised
// scores: "layer-shared"). With --layer-shared it runs that last selection over the six tasks
// (samples 0 .. n-1 of a seed) beside snapkv and prints the means (docs/TUNING.md). A diagnostic:
// nothing the tests check.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "sample_tools.h"
#include "snapkv/eval/harness.h"
#include "snapkv/eval/scoring.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/model/kvzip.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/sampler.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/util/parallel.h"

namespace {

using namespace snapkv;
using namespace snapkv::eval;

using tools::greedy_answer;

struct Span {
  size_t begin = 0, end = 0;
};

// --layer-shared: the six tasks' means of snapkv and of one ranking per layer shared by its KV
// heads (each head's pooled scores max-normalised, `mix` of the layer's sum blended into the
// head's own: 1 = shared outright), at keeps 0.05 / 0.1 / 0.2, through the same forks as above.
int layer_shared_means(const LlamaModel& model, const Tokenizer& tok, size_t context, uint64_t seed,
                       size_t n_samples, double mix) {
  TaskOptions options;
  options.context_tokens = context;
  options.seed = seed;
  const std::vector<double> keeps = {0.05, 0.1, 0.2};
  const size_t n_kv = model.config().n_kv_heads;
  std::vector<double> mean(7, 0.0);  // full, snapkv x 3 keeps, shared x 3 keeps
  for (const Task task : all_tasks()) {
    std::vector<double> acc(7, 0.0);
    for (size_t i = 0; i < n_samples; ++i) {
      const tools::TaskPrompt task_prompt = tools::task_prompt(tok, task, options, i);
      const Sample& sample = task_prompt.sample;
      const PromptTokens& prompt = task_prompt.prompt;
      std::vector<int32_t> all = prompt.context;
      all.insert(all.end(), prompt.question.begin(), prompt.question.end());
      const size_t n = all.size();
      const size_t max_new = std::min(tok.encode(reference_completion(sample), false).size() + 4,
                                      model.config().n_ctx - n);
      const CacheConfig cfg;
      LlamaSession base(model, fork_base_config(cfg, n), SessionOptions{});
      const std::vector<float> logits = base.prefill_shared(all);
      CacheConfig full = cfg;
      full.policy = PolicyKind::full;
      LlamaSession fs = base.fork(full);
      acc[0] += string_match_all(greedy_answer(fs, logits, tok, max_new), sample.answers);
      for (size_t k = 0; k < keeps.size(); ++k) {
        CacheConfig c = cfg;
        c.budget = std::max(static_cast<size_t>(std::ceil(keeps[k] * static_cast<double>(n))),
                            c.n_sink + 1);
        LlamaSession snap = base.fork(c);
        ReconstructionScores rs;
        rs.n_rows = n;
        for (size_t l = 0; l < snap.caches().size(); ++l) {
          std::vector<std::vector<float>> own(n_kv, std::vector<float>(n));
          std::vector<float> sum(n, 0.0f);
          for (size_t h = 0; h < n_kv; ++h) {
            const std::span<const float> sc = snap.caches()[l].last_scores(h);
            const float top = std::max(*std::max_element(sc.begin(), sc.end()), 1e-30f);
            for (size_t p = 0; p < n; ++p) {
              own[h][p] = sc[p] / top;
              sum[p] += own[h][p];
            }
          }
          const float top = std::max(*std::max_element(sum.begin(), sum.end()), 1e-30f);
          std::vector<float> v(n_kv * n);
          for (size_t h = 0; h < n_kv; ++h) {
            for (size_t p = 0; p < n; ++p) {
              const double blended = (1.0 - mix) * own[h][p] + mix * sum[p] / top;
              v[h * n + p] = p < c.n_sink ? 1.0f : static_cast<float>(0.5 * blended);
            }
          }
          rs.layers.push_back(std::move(v));
        }
        acc[1 + k] += string_match_all(greedy_answer(snap, logits, tok, max_new), sample.answers);
        CacheConfig shared = c;
        shared.policy = PolicyKind::kvzip;
        shared.pool = PoolKind::none;
        shared.kernel = 1;
        LlamaSession ss = base.fork(shared, &rs);
        acc[4 + k] += string_match_all(greedy_answer(ss, logits, tok, max_new), sample.answers);
      }
    }
    const auto pct = [&](size_t j) { return 100.0 * acc[j] / static_cast<double>(n_samples); };
    std::printf("%-16s full %5.1f | snapkv %5.1f %5.1f %5.1f | layer-shared %5.1f %5.1f %5.1f\n",
                std::string(task_name(task)).c_str(), pct(0), pct(1), pct(2), pct(3), pct(4),
                pct(5), pct(6));
    for (size_t j = 0; j < mean.size(); ++j) mean[j] += pct(j) / 6.0;
  }
  std::printf("%-16s full %5.1f | snapkv %5.1f %5.1f %5.1f | layer-shared %5.1f %5.1f %5.1f\n",
              "mean", mean[0], mean[1], mean[2], mean[3], mean[4], mean[5], mean[6]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 6 && std::string(argv[1]) == "--layer-shared") {
    try {
      set_num_threads(1);
      const LlamaModel model = LlamaModel::load(argv[2]);
      const Tokenizer tok = Tokenizer::from_gguf(model.file());
      return layer_shared_means(
          model, tok, std::strtoul(argv[3], nullptr, 10), std::strtoull(argv[4], nullptr, 10),
          std::strtoul(argv[5], nullptr, 10), argc > 6 ? std::strtod(argv[6], nullptr) : 1.0);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kept_rows: %s\n", e.what());
      return 1;
    }
  }
  if (argc < 7) {
    std::fprintf(stderr,
                 "usage: kept_rows <model.gguf> <task> <context> <seed> <index> <keep> [window]\n"
                 "       kept_rows --layer-shared <model.gguf> <context> <seed> <n> [mix]\n");
    return 2;
  }
  try {
    set_num_threads(1);
    const LlamaModel model = LlamaModel::load(argv[1]);
    const Tokenizer tok = Tokenizer::from_gguf(model.file());
    const Task task = parse_task(argv[2]);
    TaskOptions options;
    options.context_tokens = std::strtoul(argv[3], nullptr, 10);
    options.seed = std::strtoull(argv[4], nullptr, 10);
    const size_t index = std::strtoul(argv[5], nullptr, 10);
    const double keep = std::strtod(argv[6], nullptr);
    CacheConfig cfg;
    if (argc > 7) cfg.window = std::strtoul(argv[7], nullptr, 10);

    const tools::TaskPrompt task_prompt = tools::task_prompt(tok, task, options, index);
    const Sample& sample = task_prompt.sample;
    const PromptTokens& prompt = task_prompt.prompt;
    std::vector<int32_t> all = prompt.context;
    all.insert(all.end(), prompt.question.begin(), prompt.question.end());
    const size_t n = all.size(), n_context = prompt.context.size();

    // Character offsets of the tokens (BOS has none), to find the needle sentence and its digits.
    const tools::TokenText token_text = tools::token_text(tok, all);
    const std::string& text = token_text.text;
    const std::vector<size_t>& offset = token_text.offset;
    const std::string& ref = sample.answers.front();
    const size_t at = text.find(ref);
    if (at == std::string::npos || at == 0 || at >= offset[n_context]) {
      std::fprintf(stderr, "kept_rows: the answer %s is not in the context\n", ref.c_str());
      return 1;
    }
    size_t from = text.find_last_of(".\n", at - 1);
    from = from == std::string::npos ? 0 : from + 1;
    const size_t to = at + ref.size() + 1;  // the full stop after the value
    Span needle{0, 0}, digits{0, 0};
    for (size_t i = 1; i < n; ++i) {
      if (needle.begin == 0 && offset[i + 1] > from) needle.begin = i;
      if (offset[i] < to) needle.end = i + 1;
      if (digits.begin == 0 && offset[i + 1] > at) digits.begin = i;
      if (offset[i] < at + ref.size()) digits.end = i + 1;
    }
    cfg.budget =
        std::max(static_cast<size_t>(std::ceil(keep * static_cast<double>(n))), cfg.n_sink + 1);
    const size_t max_new = std::min(tok.encode(reference_completion(sample), false).size() + 4,
                                    model.config().n_ctx - n);
    std::printf("%s %zu: %zu tokens (question and answer prefix %zu), budget %zu, window %zu\n",
                argv[2], index, n, n - n_context, cfg.budget, cfg.window);
    std::printf("needle [%zu, %zu), digits [%zu, %zu):", needle.begin, needle.end, digits.begin,
                digits.end);
    for (size_t i = needle.begin; i < needle.end; ++i) {
      std::printf(" '%s'", tok.token_to_piece(all[i]).c_str());
    }
    std::printf("\n");

    LlamaSession base(model, fork_base_config(cfg, n), SessionOptions{});
    const std::vector<float> logits = base.prefill_shared(all);
    {
      CacheConfig full = cfg;
      full.policy = PolicyKind::full;
      LlamaSession s = base.fork(full);
      float margin = INFINITY;
      const std::string a = greedy_answer(s, logits, tok, max_new, &margin);
      std::printf("full: '%s' (reference %s), smallest digit margin %.2f\n", a.c_str(), ref.c_str(),
                  static_cast<double>(margin));
    }
    LlamaSession snap = base.fork(cfg);
    const size_t n_layers = snap.caches().size(), n_kv = model.config().n_kv_heads;
    for (size_t l = 0; l < n_layers; ++l) {
      for (size_t h = 0; h < n_kv; ++h) {
        size_t sink = 0, in_needle = 0, in_digits = 0, window = 0, question = 0, rest = 0;
        for (const int64_t signed_p : snap.caches()[l].positions(h)) {
          const size_t p = static_cast<size_t>(signed_p);
          if (p >= digits.begin && p < digits.end) ++in_digits;
          if (p < cfg.n_sink) {
            ++sink;
          } else if (p >= needle.begin && p < needle.end) {
            ++in_needle;
          } else if (p + cfg.window >= n) {
            ++window;
          } else if (p >= n_context) {
            ++question;
          } else {
            ++rest;
          }
        }
        std::printf(
            "L%zu H%zu: %zu rows = sinks %zu + needle %zu/%zu (digits %zu/%zu) + window %zu + "
            "question before the window %zu + other %zu\n",
            l, h, snap.caches()[l].positions(h).size(), sink, in_needle, needle.end - needle.begin,
            in_digits, digits.end - digits.begin, window, question, rest);
      }
    }
    std::printf("snapkv: '%s'\n", greedy_answer(snap, logits, tok, max_new).c_str());

    // Forced selections through kvzip's given scores: SnapKV's pooled scores of each head scaled
    // into [0, 0.5], the forced rows (and the sinks) at 1.
    const auto own = [&](size_t l, size_t h) {
      const std::span<const float> s = snap.caches()[l].last_scores(h);
      const float top = std::max(*std::max_element(s.begin(), s.end()), 1e-30f);
      std::vector<float> v(n);
      for (size_t p = 0; p < n; ++p) v[p] = s[p] / top;
      return v;
    };
    const auto run_forced = [&](const std::string& name, const auto& score_of) {
      ReconstructionScores rs;
      rs.n_rows = n;
      for (size_t l = 0; l < n_layers; ++l) {
        std::vector<float> v(n_kv * n);
        for (size_t h = 0; h < n_kv; ++h) {
          const std::vector<float> s = score_of(l, h);
          for (size_t p = 0; p < n; ++p) v[h * n + p] = p < cfg.n_sink ? 1.0f : s[p];
        }
        rs.layers.push_back(std::move(v));
      }
      CacheConfig forced = cfg;
      forced.policy = PolicyKind::kvzip;
      forced.pool = PoolKind::none;
      forced.kernel = 1;
      LlamaSession s = base.fork(forced, &rs);
      std::printf("%s: '%s'\n", name.c_str(), greedy_answer(s, logits, tok, max_new).c_str());
    };
    const auto forcing = [&](Span span, size_t skip_l, size_t skip_h) {
      return [&, span, skip_l, skip_h](size_t l, size_t h) {
        std::vector<float> v = own(l, h);
        for (float& x : v) x *= 0.5f;
        if (l != skip_l || h != skip_h) {
          for (size_t p = span.begin; p < span.end; ++p) v[p] = 1.0f;
        }
        return v;
      };
    };
    run_forced("needle-all", forcing(needle, n_layers, 0));
    for (size_t l = 0; l < n_layers; ++l) {
      for (size_t h = 0; h < n_kv; ++h) {
        run_forced("needle-all-but-L" + std::to_string(l) + "H" + std::to_string(h),
                   forcing(needle, l, h));
      }
    }
    const Span wide{needle.begin > 64 ? needle.begin - 64 : 0,
                    std::min(needle.end + 64, n_context)};
    run_forced("needle+-64-all", forcing(wide, n_layers, 0));
    run_forced("layer-shared", [&](size_t l, size_t) {
      std::vector<float> sum(n, 0.0f);
      for (size_t h = 0; h < n_kv; ++h) {
        const std::vector<float> v = own(l, h);
        for (size_t p = 0; p < n; ++p) sum[p] += v[p];
      }
      const float top = std::max(*std::max_element(sum.begin(), sum.end()), 1e-30f);
      for (float& x : sum) x = 0.5f * x / top;
      return sum;
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kept_rows: %s\n", e.what());
    return 1;
  }
  return 0;
}
