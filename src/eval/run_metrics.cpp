// Sums of the per-run cache figures (eval/run_metrics.h).
#include "snapkv/eval/run_metrics.h"

namespace snapkv::eval {

void RunMetrics::add(size_t budget_rows, const CacheStats& after_prompt, const CacheStats& end,
                     double prefill_s, size_t prompt_tokens) {
  ++runs;
  budget += static_cast<double>(budget_rows);
  kept += static_cast<double>(after_prompt.tokens_kept);
  bytes += static_cast<double>(end.bytes_stored);
  bytes_full += static_cast<double>(end.bytes_full_fp16);
  bytes_prompt += static_cast<double>(after_prompt.bytes_stored);
  bytes_full_prompt += static_cast<double>(after_prompt.bytes_full_fp16);
  prefill_seconds += prefill_s;
  prefill_tokens += prompt_tokens;
}

}  // namespace snapkv::eval
