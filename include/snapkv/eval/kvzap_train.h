// Training KVzap's scorer (model/kvzap.h) on the model it serves: the training prompts come from
// the tasks' train split (eval/tasks.h: the context a question-agnostic run compresses) and from
// generic text (filler sentences), each run through a full-cache prefill and KVzip's
// reconstruction pass (model/kvzip.h); every cached row but the first (BOS, a sink everywhere)
// gives one example per (layer, KV head): its features and the log of its teacher's score
// (KVzip's, or KVzip+'s normalised one).
//
// Promises: deterministic — the same model, tokenizer and options give the same rows in the same
// order (the sink sees them one prompt, layer, head and row at a time), hence the same weights.
// Leaves out: writing the sidecar (the caller: KvzapScorer::to_bytes through util/output_file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "snapkv/model/kvzap.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"

namespace snapkv::eval {

// Whose scores the scorer learns: KVzip's reconstruction pass (policy kvzip), the same pass
// with KVzip+'s normalisation (policy kvzip_plus), or the attention of each train-split sample's
// own question on its context (questions: each context row's share of it, per KV head; the
// generic prompts have no question and are not used).
enum class KvzapTeacher { kvzip, kvzip_plus, questions };

struct KvzapTrainOptions {
  uint64_t seed = 0;             // tasks' train-split seed (< 2^63) and the generic text's
  size_t context_tokens = 1024;  // tokens per training prompt (<= the model's context)
  size_t samples_per_task = 16;  // train-split samples of each of the six tasks
  size_t generic_prompts = 8;    // prompts of generic text
  double ridge = 1e-3;           // KvzapFit::solve's ridge
  size_t prefill_chunk = 512;    // tokens per prefill forward
  KvzapTeacher teacher = KvzapTeacher::kvzip;
};

// The training prompts, token ids with BOS: samples_per_task of each task (in eval/tasks.h's
// order), then generic_prompts of filler text.
std::vector<std::vector<int32_t>> kvzap_training_prompts(const Tokenizer& tokenizer,
                                                         const KvzapTrainOptions& options);

// One training row: layer, KV head, features [kvzap_n_features(head_dim)], target.
using KvzapRowSink =
    std::function<void(size_t layer, size_t kv_head, const float* features, double target)>;
// Called after each prompt with (prompts done, prompts in all).
using KvzapProgress = std::function<void(size_t done, size_t total)>;

// Runs every training prompt (full cache, then KVzip's pass, normalised for teacher kvzip_plus)
// and hands each row to `sink`.
void kvzap_training_rows(const LlamaModel& model, const Tokenizer& tokenizer,
                         const KvzapTrainOptions& options, const KvzapRowSink& sink,
                         const KvzapProgress& progress = {});

// kvzap_training_rows into a KvzapFit, solved with options.ridge, keyed to the model's
// fingerprint.
KvzapScorer train_kvzap(const LlamaModel& model, const Tokenizer& tokenizer,
                        const KvzapTrainOptions& options, const KvzapProgress& progress = {});

}  // namespace snapkv::eval
