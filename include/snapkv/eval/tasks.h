// RULER-style synthetic long-context tasks: the one source of truth for training data (Python
// calls `snapkv tasks gen --split train`) and for evaluation (`--split eval`, the default).
//
// Promises:
//  - deterministic: the same (task, n, context, seed, split, options) gives the same samples, on
//    every platform (own RNG and integer sampling; no std:: distributions);
//  - train and eval streams are disjoint by construction: the generator's internal seed is the
//    user seed with bit 63 cleared (train) or set (eval); user seeds must be < 2^63;
//  - length control: prompt + reference_completion fits in `context_tokens` tokens as measured by
//  the
//    caller's TokenCounter, and lands within one filler sentence of it;
//  - needles sit between filler sentences at uniformly drawn depths (fraction of the haystack
//    sentences before them), reported per sample.
// Leaves out: tokenization itself (the counter is injected), running a model, scoring (scoring.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace snapkv::eval {

enum class Task { niah_single, niah_multikey, niah_multivalue, niah_multiquery, vt, passkey };
enum class Split { train, eval };

// "niah_single" <-> Task::niah_single; throws std::invalid_argument naming the valid tasks.
Task parse_task(std::string_view name);
std::string_view task_name(Task task);
const std::vector<Task>& all_tasks();
Split parse_split(std::string_view name);  // "train" | "eval"

// Counts the tokens of a string as the target model would (without BOS).
using TokenCounter = std::function<size_t(std::string_view)>;

// Documented estimate for when no tokenizer is at hand, tuned to the word-level SentencePiece
// vocabularies this project trains (training/README.md): one token per run of letters (plus one
// per 8 letters beyond the first 8), one per digit, one per other non-space character, one per
// newline. Within about 15% of the shipped model's tokenizer on task text.
size_t approx_token_count(std::string_view text);

inline constexpr size_t kMaxNeedles = 64;
inline constexpr size_t kMaxVtHops = 64;

struct TaskOptions {
  size_t context_tokens = 1024;  // budget for prompt + reference completion, in tokens
  uint64_t seed = 0;             // user seed, < 2^63
  Split split = Split::eval;
  bool remove_needles = false;  // control: same haystack and question, needles left out
  size_t n_needles = 4;         // multikey: needles (1 asked); multivalue: values; multiquery: keys
                                // (1 .. kMaxNeedles)
  size_t vt_hops = 4;           // vt: chain `VAR A = n`, then hops `VAR B = VAR A` (hops+1 names)
                                // (1 .. kMaxVtHops)
};

struct Sample {
  std::string context;               // instruction + haystack with needles, ends with "\n"
  std::string question;              // e.g. "What is the special magic number for quiet-river ...?"
  std::string answer_prefix;         // e.g. " The special magic number for quiet-river ... is"
  std::vector<std::string> answers;  // every reference string (RULER string_match_all)
  std::vector<double> depths;        // per needle: fraction of filler sentences before it
  size_t prompt_tokens = 0;          // counter(full_prompt(sample))
};

// The text a model is fed: context + question + answer_prefix (each carries its own separators).
std::string full_prompt(const Sample& sample);

// The completion a perfect model writes after the prompt: " " + answers joined by ", " + ".".
// Training uses it as the target; the length budget counts prompt + completion.
std::string reference_completion(const Sample& sample);

// Sample `index` of the stream (task, options). Independent of every other index, so samples can
// be generated in any order or in parallel. Throws std::invalid_argument on bad options (seed with
// bit 63 set, a context too small to hold the question and needles, zero needles).
Sample generate_sample(Task task, const TaskOptions& options, size_t index,
                       const TokenCounter& count_tokens);

// Samples [0, n) of the stream.
std::vector<Sample> generate_samples(Task task, const TaskOptions& options, size_t n,
                                     const TokenCounter& count_tokens);

// One JSON object per line: {"task","index","context","question","answer_prefix","answers",
// "depths","prompt_tokens"}.
std::string sample_to_json(Task task, size_t index, const Sample& sample);

// ---- pieces exposed for tests and for the training tool's natural-text mix ----

// Deterministic splitmix64-seeded xoshiro256** generator; below(n) is unbiased (rejection).
class TaskRng {
 public:
  explicit TaskRng(uint64_t seed);
  uint64_t next();
  uint64_t below(uint64_t n);        // uniform in [0, n), n > 0
  double uniform();                  // uniform in [0, 1)
  uint64_t digits(size_t n_digits);  // uniform n-digit number (no leading zero)

 private:
  uint64_t s_[4];
};

// One varied filler sentence ("The quiet farmer carried a heavy basket across the old bridge.").
std::string filler_sentence(TaskRng& rng);

}  // namespace snapkv::eval
