// The method x keep loop shared by run_eval and run_perplexity (eval/method_loop.h).
#include "snapkv/eval/method_loop.h"

#include <algorithm>
#include <map>

#include "snapkv/kv/core/fork.h"

namespace snapkv::eval {

size_t runs_per_item(const std::vector<Method>& methods, size_t n_keeps) {
  size_t runs = 0;
  for (const Method& m : methods) runs += m.uses_keep ? n_keeps : 1;
  return runs;
}

void for_each_method_run(const std::vector<Method>& methods, const std::vector<double>& keeps,
                         size_t compressed_tokens, bool share_prefill,
                         const SharedPrefillFactory& make_shared, const MethodRunFn& run) {
  const std::map<ForkKey, size_t> runs_per_key =
      shared_prefill_runs(methods, keeps.size(), share_prefill);
  std::map<ForkKey, std::unique_ptr<SharedPrefill>> shared;
  for (size_t m = 0; m < methods.size(); ++m) {
    const Method& method = methods[m];
    const size_t n_keeps = method.uses_keep ? keeps.size() : 1;
    for (size_t k = 0; k < n_keeps; ++k) {
      CacheConfig config = method.config;
      // Policy full ignores the budget; the recorded budget is then every compressed token.
      config.budget = method.uses_keep ? budget_for(keeps[k], compressed_tokens, config)
                                       : std::max(compressed_tokens, config.budget);
      const SharedPrefill* base = nullptr;
      if (const std::optional<ForkKey> key = fork_key(config)) {
        const auto it = runs_per_key.find(*key);
        if (it != runs_per_key.end() && it->second > 1) {
          std::unique_ptr<SharedPrefill>& slot = shared[*key];
          if (!slot) slot = make_shared(config);
          base = slot.get();
        }
      }
      run(m, k, config, base);
    }
  }
}

std::optional<size_t> full_method_index(const std::vector<Method>& methods) {
  std::optional<size_t> full;
  for (size_t m = 0; m < methods.size(); ++m) {
    if (methods[m].name == "full") full = m;
  }
  return full;
}

}  // namespace snapkv::eval
