// kvzap_profile: how method kvzap's learned scores and their teacher, KVzip's reconstruction
// scores, rank one task sample's context by position, per layer and KV head (docs/RESULTS.md,
// "Quality at 8K tokens"). Question-agnostic: the context alone is prefilled with the full cache.
//   kvzap_profile <model.gguf> <task> <context> <seed> <index> [--no-teacher | --force KEEP]
// The scorer is the model's sidecar or the file SNAPKV_KVZAP names. Prints, per layer and KV
// head, the mean rank percentile (100 = the highest score of the context) of the rows in each
// eighth of the context, for kvzap and for the teacher, and the rank percentile of the rows that
// hold the answer's digits (single-answer tasks: niah_single, passkey). With --force KEEP it
// instead compresses the context to KEEP with kvzap's scores (each head's own ranking, as method
// kvzap), appends the question and prints the answer, then the same with rows forced into every
// head: the answer's digits, its sentence, and the sentence with 64 or 512 rows either side; and
// one ranking shared by every head, each row's best rank percentile over all layers and heads. A
// diagnostic: nothing the tests check.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "sample_tools.h"
#include "snapkv/eval/harness.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/fork.h"
#include "snapkv/model/kvzip.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/util/parallel.h"

namespace {

using namespace snapkv;
using namespace snapkv::eval;

constexpr size_t kBins = 8;

// Rank percentile of every value of s[0..n): 100 for the largest, 0 for the smallest.
std::vector<double> percentiles(const float* s, size_t n) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [s](size_t a, size_t b) { return s[a] < s[b]; });
  std::vector<double> pct(n, 0.0);
  for (size_t r = 0; r < n; ++r) {
    pct[order[r]] = n > 1 ? 100.0 * static_cast<double>(r) / static_cast<double>(n - 1) : 100.0;
  }
  return pct;
}

void print_row(const char* what, const std::vector<double>& pct,
               const std::vector<size_t>& digits) {
  const size_t n = pct.size();
  std::printf("  %-7s", what);
  for (size_t b = 0; b < kBins; ++b) {
    const size_t lo = b * n / kBins, hi = (b + 1) * n / kBins;
    double sum = 0.0;
    for (size_t r = lo; r < hi; ++r) sum += pct[r];
    std::printf(" %5.1f", hi > lo ? sum / static_cast<double>(hi - lo) : 0.0);
  }
  double d = 0.0;
  for (const size_t r : digits) d += pct[r];
  std::printf("  | digits %5.1f\n", digits.empty() ? 0.0 : d / static_cast<double>(digits.size()));
}

struct Span {
  size_t begin = 0, end = 0;
};

// --force: kvzap's ranking of the context, with `forced` rows first in every head, through policy
// kvzip's given-scores fork; the question appended uncompressed; the greedy answer.
std::string forced_answer(const LlamaModel& model, LlamaSession& base, const Tokenizer& tok,
                          const std::vector<std::vector<float>>& zap, const CacheConfig& cfg,
                          Span forced, const std::vector<int32_t>& question, size_t max_new) {
  const size_t n = base.caches()[0].size(), n_kv = model.config().n_kv_heads;
  ReconstructionScores rs;
  rs.n_rows = n;
  for (const std::vector<float>& layer : zap) {
    std::vector<float> v(n_kv * n);
    for (size_t h = 0; h < n_kv; ++h) {
      const float* s = layer.data() + h * n;
      const float top = std::max(*std::max_element(s, s + n), 1e-30f);
      for (size_t p = 0; p < n; ++p) {
        const bool first = p < cfg.n_sink || (p >= forced.begin && p < forced.end);
        v[h * n + p] = first ? 1.0f : 0.5f * s[p] / top;
      }
    }
    rs.layers.push_back(std::move(v));
  }
  LlamaSession s = base.fork(cfg, &rs);
  return tools::greedy_answer(s, s.extend(question), tok, max_new);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr,
                 "usage: kvzap_profile <model.gguf> <task> <context> <seed> <index> "
                 "[--no-teacher | --force KEEP]\n");
    return 2;
  }
  try {
    set_num_threads(1);
    const LlamaModel model = LlamaModel::load(argv[1]);
    if (model.kvzap() == nullptr) {
      std::fprintf(stderr, "kvzap_profile: no scorer: %s\n", model.kvzap_status().c_str());
      return 1;
    }
    const Tokenizer tok = Tokenizer::from_gguf(model.file());
    const Task task = parse_task(argv[2]);
    TaskOptions options;
    options.context_tokens = std::strtoul(argv[3], nullptr, 10);
    options.seed = std::strtoull(argv[4], nullptr, 10);
    const size_t index = std::strtoul(argv[5], nullptr, 10);
    const bool teacher = !(argc > 6 && std::string(argv[6]) == "--no-teacher");
    const double force_keep =
        argc > 7 && std::string(argv[6]) == "--force" ? std::strtod(argv[7], nullptr) : 0.0;

    const tools::TaskPrompt task_prompt = tools::task_prompt(tok, task, options, index);
    const Sample& sample = task_prompt.sample;
    const PromptTokens& prompt = task_prompt.prompt;
    const std::vector<int32_t>& context = prompt.context;
    const size_t n = context.size();

    // Rows whose token holds a digit of the first answer (its first occurrence in the context).
    const tools::TokenText token_text = tools::token_text(tok, context);
    const std::string& text = token_text.text;
    const std::vector<size_t>& offset = token_text.offset;
    std::vector<size_t> digits;
    const std::string& ref = sample.answers.front();
    const size_t at = text.find(ref);
    if (at != std::string::npos) {
      for (size_t i = 1; i < n; ++i) {
        if (offset[i + 1] > at && offset[i] < at + ref.size()) digits.push_back(i);
      }
    }
    std::printf(
        "%s %s, context %zu tokens, answer %s at rows %zu..%zu (depth %.2f)\n", argv[2], argv[5], n,
        ref.c_str(), digits.empty() ? 0 : digits.front(), digits.empty() ? 0 : digits.back(),
        digits.empty() ? 0.0 : static_cast<double>(digits.front()) / static_cast<double>(n));
    if (force_keep > 0.0) {
      if (digits.empty()) throw std::invalid_argument("--force needs the answer in the context");
      CacheConfig cfg;
      cfg.policy = PolicyKind::kvzip;  // ranks with the scores handed to fork()
      cfg.pool = PoolKind::none;
      cfg.kernel = 1;
      cfg.budget = std::max(static_cast<size_t>(std::ceil(force_keep * static_cast<double>(n))),
                            cfg.n_sink + 1);
      LlamaSession base(model, fork_base_config(cfg, n), SessionOptions{});
      base.prefill_shared(context);
      const std::vector<std::vector<float>> zap =
          model.kvzap()->score_caches(base.caches(), model.rope_params());
      const size_t max_new = std::min(tok.encode(reference_completion(sample), false).size() + 4,
                                      model.config().n_ctx - prompt.size());
      // The answer's sentence: from the previous full stop or newline to the one after it.
      size_t begin = digits.front(), end = digits.back() + 1;
      while (
          begin > 1 &&
          text.substr(offset[begin - 1], offset[begin] - offset[begin - 1]).find_first_of(".\n") ==
              std::string::npos) {
        --begin;
      }
      while (end < n &&
             text.substr(offset[end], offset[end + 1] - offset[end]).find_first_of(".\n") ==
                 std::string::npos) {
        ++end;
      }
      end = std::min(end + 1, n);
      std::printf("keep %.3f: budget %zu rows per KV head, the answer's sentence rows %zu..%zu\n",
                  force_keep, cfg.budget, begin, end - 1);
      const auto widen = [&](size_t by) {
        return Span{begin > by ? begin - by : 1, std::min(end + by, n)};
      };
      const std::pair<const char*, Span> runs[] = {
          {"kvzap", Span{}},
          {"digits forced", Span{digits.front(), digits.back() + 1}},
          {"sentence forced", Span{begin, end}},
          {"sentence +-64 forced", widen(64)},
          {"sentence +-512 forced", widen(512)}};
      for (const auto& [name, span] : runs) {
        std::printf(
            "%-22s '%s'\n", name,
            forced_answer(model, base, tok, zap, cfg, span, prompt.question, max_new).c_str());
      }
      // One ranking for every head: each row's best rank percentile over all layers and heads.
      std::vector<double> best(n, 0.0);
      for (const std::vector<float>& layer : zap) {
        for (size_t h = 0; h < model.config().n_kv_heads; ++h) {
          const std::vector<double> pct = percentiles(layer.data() + h * n, n);
          for (size_t r = 0; r < n; ++r) best[r] = std::max(best[r], pct[r]);
        }
      }
      std::vector<std::vector<float>> shared(zap.size());
      for (auto& layer : shared) {
        layer.resize(model.config().n_kv_heads * n);
        for (size_t i = 0; i < layer.size(); ++i) layer[i] = static_cast<float>(best[i % n]);
      }
      std::printf(
          "%-22s '%s'\n", "one ranking, best head",
          forced_answer(model, base, tok, shared, cfg, Span{}, prompt.question, max_new).c_str());
      return 0;
    }
    std::printf("mean rank percentile per eighth of the context (100 = top score)\n");

    CacheConfig full;
    full.policy = PolicyKind::full;
    SessionOptions so;
    so.reconstruction.prompt = kvzip_repeat_prompt(tok);
    LlamaSession session(model, full, so);
    session.prefill(context);
    const std::vector<std::vector<float>> zap =
        model.kvzap()->score_caches(session.caches(), model.rope_params());
    ReconstructionScores rs;
    if (teacher) rs = session.reconstruction_scores(false);
    const size_t n_kv = model.config().n_kv_heads;
    for (size_t l = 0; l < zap.size(); ++l) {
      const size_t rows = session.caches()[l].size();
      for (size_t h = 0; h < n_kv; ++h) {
        std::printf("layer %zu head %zu\n", l, h);
        print_row("kvzap", percentiles(zap[l].data() + h * rows, rows), digits);
        if (teacher) print_row("kvzip", percentiles(rs.layers[l].data() + h * rows, rows), digits);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvzap_profile: %s\n", e.what());
    return 1;
  }
}
