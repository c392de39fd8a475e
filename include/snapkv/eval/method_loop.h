// The method x keep loop that `snapkv eval` runs on every item (a task sample or a perplexity
// window), shared by run_eval (harness.h) and run_perplexity (perplexity.h).
//
// Promises:
//  - every method runs at every keep, in options order (method, then keep); a method that ignores
//    keep (policy full) runs once, at keep index 0;
//  - the budget rule: budget_for(keep, compressed tokens, config) for methods that use keep,
//    max(compressed tokens, config.budget) for the others (the recorded budget is then every
//    compressed token);
//  - the shared-prefill decision: with share_prefill, the runs whose config has a fork key
//    (kv/core/fork.h) that more than one run of the item shares fork one SharedPrefill per key,
//    built by the caller's factory at the key's first run; every other run gets none (a dedicated
//    run).
// Leaves out: what a run does and what it measures (the callback), the averages (run_metrics.h).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "snapkv/eval/harness.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/method.h"

namespace snapkv::eval {

// Builds the shared prefill for the first run of a fork key (its config, budget set).
using SharedPrefillFactory = std::function<std::unique_ptr<SharedPrefill>(const CacheConfig&)>;

// One run: method index m, keep index k (0 for keep-independent methods), the method's config
// with its budget set, and the shared prefill to fork (null: run a dedicated session).
using MethodRunFn =
    std::function<void(size_t m, size_t k, const CacheConfig& config, const SharedPrefill* shared)>;

// Runs per item: keeps.size() for each method that uses keep, 1 for the others.
size_t runs_per_item(const std::vector<Method>& methods, size_t n_keeps);

// The loop of the file comment over one item whose compressed part has `compressed_tokens`
// tokens.
void for_each_method_run(const std::vector<Method>& methods, const std::vector<double>& keeps,
                         size_t compressed_tokens, bool share_prefill,
                         const SharedPrefillFactory& make_shared, const MethodRunFn& run);

// Index of the method named "full" (the last one when several are), nullopt when none is.
std::optional<size_t> full_method_index(const std::vector<Method>& methods);

}  // namespace snapkv::eval
