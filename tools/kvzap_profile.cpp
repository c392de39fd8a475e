// kvzap_profile: how method kvzap's learned scores and their teacher, KVzip's reconstruction
// scores, rank one task sample's context by position, per layer and KV head (docs/RESULTS.md,
// "Quality at 8K tokens"). Question-agnostic: the context alone is prefilled with the full cache.
//   kvzap_profile <model.gguf> <task> <context> <seed> <index> [--no-teacher]
// The scorer is the model's sidecar or the file SNAPKV_KVZAP names. Prints, per layer and KV
// head, the mean rank percentile (100 = the highest score of the context) of the rows in each
// eighth of the context, for kvzap and for the teacher, and the rank percentile of the rows that
// hold the answer's digits (single-answer tasks: niah_single, passkey). A diagnostic: nothing the
// tests check.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "snapkv/eval/harness.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/kv/core/config.h"
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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr,
                 "usage: kvzap_profile <model.gguf> <task> <context> <seed> <index> "
                 "[--no-teacher]\n");
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

    const TokenCounter counter = [&tok](std::string_view t) { return tok.encode(t, false).size(); };
    const Sample sample = generate_sample(task, options, index, counter);
    const std::vector<int32_t> context = tokenize_prompt(tok, sample).context;
    const size_t n = context.size();

    // Rows whose token holds a digit of the first answer (its first occurrence in the context).
    std::string text;
    std::vector<size_t> offset(n + 1, 0);
    for (size_t i = 0; i < n; ++i) {
      offset[i] = text.size();
      if (i > 0) text += tok.token_to_piece(context[i]);
    }
    offset[n] = text.size();
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
