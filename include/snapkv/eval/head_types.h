// Measuring a model's head types (model/head_types.h, kv/core/head_types.h) from its own
// attention: prompts of the tasks' train split (eval/tasks.h, all six tasks, the context and its
// question, at each of `contexts`) go through a full-cache prefill; for every query head, each of
// the prompt's last `queries` queries (the question's, which fetch the answer) gives the
// attention mass it puts outside the first n_sink and its last `recent` positions
// (mass_outside_window), i.e. what a streaming head would lose. A KV head's retrieval score is the
// mean of that mass over the queries and prompts, the largest over the query heads that share
// the KV head (its rows serve them all). Streaming heads are the lowest-scoring ones.
//
// Promises: deterministic (the same model, tokenizer and options give the same scores, summed in
// a fixed order in double). Leaves out: writing the sidecar (the caller: HeadTypes::to_bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "snapkv/model/head_types.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"

namespace snapkv::eval {

struct HeadTypesOptions {
  uint64_t seed = 0;                            // tasks' train-split seed (< 2^63)
  std::vector<size_t> contexts = {1024, 2047};  // prompt lengths (each <= the model's context)
  size_t samples_per_task = 8;                  // train-split samples per task and context
  size_t queries = 32;                          // the prompt's last queries measured
  size_t n_sink = 4;                            // the streaming window: first positions ...
  size_t recent = 32;                           // ... and the most recent ones
  size_t prefill_chunk = 512;                   // tokens per prefill forward
};

// The prompts, token ids with BOS: for each context in order, samples_per_task of each task
// (eval/tasks.h's order), the context followed by its question.
std::vector<std::vector<int32_t>> head_types_prompts(const Tokenizer& tokenizer,
                                                     const HeadTypesOptions& options);

// Per prompt, per layer and query head: the mean over the prompt's last min(queries, n) queries
// of mass_outside_window. cache is a layer's cache holding every row of the prompt 0..n-1 with its
// window queries pending (LayerCache::pending_queries). Returns [n_heads].
std::vector<double> layer_outside_mass(const LayerCache& cache, size_t n_sink, size_t recent);

using HeadTypesProgress = std::function<void(size_t done, size_t total)>;

// The retrieval scores [n_layers][n_kv_heads] (see above), keyed to the model's fingerprint.
HeadTypes find_head_types(const LlamaModel& model, const Tokenizer& tokenizer,
                          const HeadTypesOptions& options, const HeadTypesProgress& progress = {});

}  // namespace snapkv::eval
