// RULER-style task generators (niah_*, vt) and the passkey task, with token-budget length control.
// Templates follow RULER (NVIDIA/RULER scripts/data/synthetic) and landmark attention's passkey
// prompt; the haystack is our own varied filler (filler.cpp), not repeated noise sentences.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "eval/tasks_internal.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/util/error.h"

namespace snapkv::eval {

namespace {

constexpr uint64_t kEvalBit = 1ULL << 63;

struct TaskInfo {
  Task task;
  std::string_view name;
};
constexpr TaskInfo kTasks[] = {{Task::niah_single, "niah_single"},
                               {Task::niah_multikey, "niah_multikey"},
                               {Task::niah_multivalue, "niah_multivalue"},
                               {Task::niah_multiquery, "niah_multiquery"},
                               {Task::vt, "vt"},
                               {Task::passkey, "passkey"}};

// The parts of a sample before the haystack is laid out.
struct Spec {
  std::string header;                // instruction, ends with "\n"
  std::vector<std::string> needles;  // sentences to hide, in chain order for vt
  bool keep_needle_order = false;    // vt: needles must appear in order
  std::string question;
  std::string answer_prefix;
  std::vector<std::string> answers;
};

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ULL + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::string join(const std::vector<std::string>& items, std::string_view sep,
                 std::string_view last_sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += (i + 1 == items.size()) ? last_sep : sep;
    out += items[i];
  }
  return out;
}

std::vector<std::string> distinct_keys(TaskRng& rng, size_t n) {
  std::vector<std::string> keys;
  std::unordered_set<std::string> seen;
  while (keys.size() < n) {
    std::string key = needle_key(rng);
    if (seen.insert(key).second) keys.push_back(std::move(key));
  }
  return keys;
}

std::vector<std::string> distinct_numbers(TaskRng& rng, size_t n, size_t n_digits) {
  std::vector<std::string> values;
  std::unordered_set<std::string> seen;
  while (values.size() < n) {
    std::string value = std::to_string(rng.digits(n_digits));
    if (seen.insert(value).second) values.push_back(std::move(value));
  }
  return values;
}

const char* kNiahHeader =
    "Some special magic numbers are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the numbers afterwards.\n";

std::string magic_needle(const std::string& key, const std::string& value) {
  return "One of the special magic numbers for " + key + " is: " + value + ".";
}

Spec make_spec(Task task, const TaskOptions& options, TaskRng& rng) {
  Spec spec;
  const size_t n = options.n_needles;
  switch (task) {
    case Task::niah_single:
    case Task::niah_multikey: {
      const size_t n_keys = task == Task::niah_single ? 1 : n;
      const auto keys = distinct_keys(rng, n_keys);
      const auto values = distinct_numbers(rng, n_keys, 7);
      for (size_t i = 0; i < n_keys; ++i) spec.needles.push_back(magic_needle(keys[i], values[i]));
      const size_t asked = rng.below(n_keys);
      spec.header = kNiahHeader;
      spec.question = "\nWhat is the special magic number for " + keys[asked] +
                      " mentioned in the provided text?";
      spec.answer_prefix =
          " The special magic number for " + keys[asked] + " mentioned in the provided text is";
      spec.answers = {values[asked]};
      break;
    }
    case Task::niah_multivalue: {
      const std::string key = distinct_keys(rng, 1)[0];
      const auto values = distinct_numbers(rng, n, 7);
      for (const auto& value : values) spec.needles.push_back(magic_needle(key, value));
      spec.header = kNiahHeader;
      spec.question = "\nWhat are all the special magic numbers for " + key +
                      " mentioned in the provided text?";
      spec.answer_prefix =
          " The special magic numbers for " + key + " mentioned in the provided text are";
      spec.answers = values;
      break;
    }
    case Task::niah_multiquery: {
      const auto keys = distinct_keys(rng, n);
      const auto values = distinct_numbers(rng, n, 7);
      for (size_t i = 0; i < n; ++i) spec.needles.push_back(magic_needle(keys[i], values[i]));
      const std::string key_list = join(keys, ", ", " and ");
      spec.header = kNiahHeader;
      spec.question = "\nWhat are all the special magic numbers for " + key_list +
                      " mentioned in the provided text?";
      spec.answer_prefix =
          " The special magic numbers for " + key_list + " mentioned in the provided text are";
      spec.answers = values;
      break;
    }
    case Task::vt: {
      const size_t n_names = options.vt_hops + 1;
      std::vector<std::string> names;
      std::unordered_set<std::string> seen;
      while (names.size() < n_names) {
        std::string name;
        for (int c = 0; c < 5; ++c) name += static_cast<char>('A' + rng.below(26));
        if (seen.insert(name).second) names.push_back(std::move(name));
      }
      const std::string value = std::to_string(rng.digits(5));
      spec.needles.push_back("VAR " + names[0] + " = " + value + ".");
      for (size_t i = 1; i < n_names; ++i) {
        spec.needles.push_back("VAR " + names[i] + " = VAR " + names[i - 1] + ".");
      }
      spec.keep_needle_order = true;
      spec.header =
          "Memorize and track the chain(s) of variable assignment hidden in the following "
          "text.\n";
      spec.question = "\nQuestion: Find all variables that are assigned the value " + value +
                      " in the text above.";
      spec.answer_prefix =
          " Answer: According to the chain(s) of variable assignment in the text above, " +
          std::to_string(n_names) + " variables are assigned the value " + value + ", they are:";
      spec.answers = names;
      break;
    }
    case Task::passkey: {
      const std::string key = std::to_string(rng.digits(5));
      spec.header =
          "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
          "them. I will quiz you about the important information there.\n";
      spec.needles = {"The pass key is " + key + ". Remember it. " + key + " is the pass key."};
      spec.question = "\nWhat is the pass key?";
      spec.answer_prefix = " The pass key is";
      spec.answers = {key};
      break;
    }
  }
  return spec;
}

// Lays out header + filler sentences with needles inserted at gaps round(depth * n_filler).
struct Layout {
  std::vector<std::string> filler;
  std::vector<double> drawn_depths;  // per needle, in [0, 1)
};

Sample assemble(const Spec& spec, const Layout& layout, bool remove_needles) {
  const size_t n_filler = layout.filler.size();
  // gap g in [0, n_filler]: needles placed in gap g come before filler sentence g.
  std::vector<std::vector<size_t>> at_gap(n_filler + 1);
  std::vector<double> depths(spec.needles.size());
  for (size_t i = 0; i < spec.needles.size(); ++i) {
    const auto gap = static_cast<size_t>(std::lround(layout.drawn_depths[i] * double(n_filler)));
    at_gap[std::min(gap, n_filler)].push_back(i);
    depths[i] = n_filler == 0 ? 0.0 : double(std::min(gap, n_filler)) / double(n_filler);
  }
  Sample sample;
  sample.context = spec.header;
  bool first = true;
  auto append = [&](const std::string& sentence) {
    if (!first) sample.context += ' ';
    sample.context += sentence;
    first = false;
  };
  for (size_t g = 0; g <= n_filler; ++g) {
    if (!remove_needles) {
      for (size_t needle : at_gap[g]) append(spec.needles[needle]);
    }
    if (g < n_filler) append(layout.filler[g]);
  }
  sample.context += '\n';
  sample.question = spec.question;
  sample.answer_prefix = spec.answer_prefix;
  sample.answers = spec.answers;
  sample.depths = std::move(depths);
  return sample;
}

size_t count_all(const Sample& sample, const TokenCounter& count_tokens) {
  return count_tokens(full_prompt(sample) + reference_completion(sample));
}

}  // namespace

Task parse_task(std::string_view name) {
  for (const auto& info : kTasks) {
    if (info.name == name) return info.task;
  }
  std::string valid;
  for (const auto& info : kTasks) valid += (valid.empty() ? "" : "|") + std::string{info.name};
  throw_invalid("tasks", "unknown task", name, valid);
}

std::string_view task_name(Task task) {
  for (const auto& info : kTasks) {
    if (info.task == task) return info.name;
  }
  SNAPKV_CHECK(false);
  return {};
}

const std::vector<Task>& all_tasks() {
  static const std::vector<Task> tasks = [] {
    std::vector<Task> out;
    for (const auto& info : kTasks) out.push_back(info.task);
    return out;
  }();
  return tasks;
}

Split parse_split(std::string_view name) {
  if (name == "train") return Split::train;
  if (name == "eval") return Split::eval;
  throw_invalid("tasks", "unknown split", name, "train|eval");
}

size_t approx_token_count(std::string_view text) {
  size_t tokens = 0;
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      size_t run = 0;
      while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) {
        ++run;
        ++i;
      }
      tokens += 1 + (run > 8 ? (run - 1) / 8 : 0);
      continue;
    }
    if (c != ' ') ++tokens;  // digits, punctuation, newlines, bytes of non-ASCII text
    ++i;
  }
  return tokens;
}

std::string full_prompt(const Sample& sample) {
  return sample.context + sample.question + sample.answer_prefix;
}

std::string reference_completion(const Sample& sample) {
  return " " + join(sample.answers, ", ", ", ") + ".";
}

Sample generate_sample(Task task, const TaskOptions& options, size_t index,
                       const TokenCounter& count_tokens) {
  if (options.seed & kEvalBit) {
    throw_invalid("tasks", "seed has bit 63 set (reserved to tell eval from train)",
                  std::to_string(options.seed), "< 2^63");
  }
  if (options.n_needles == 0 || options.n_needles > kMaxNeedles) {
    throw_invalid("tasks", "n_needles out of range", std::to_string(options.n_needles),
                  "1.." + std::to_string(kMaxNeedles));
  }
  if (options.vt_hops == 0 || options.vt_hops > kMaxVtHops) {
    throw_invalid("tasks", "vt_hops out of range", std::to_string(options.vt_hops),
                  "1.." + std::to_string(kMaxVtHops));
  }
  if (!count_tokens) throw_invalid("tasks", "token counter is empty", "null", "a function");
  const uint64_t stream = options.split == Split::eval ? (options.seed | kEvalBit) : options.seed;
  uint64_t seed = mix(stream, static_cast<uint64_t>(task) + 1);
  seed = mix(seed, options.context_tokens);
  TaskRng rng(mix(seed, index));

  const Spec spec = make_spec(task, options, rng);
  Layout layout;
  for (size_t i = 0; i < spec.needles.size(); ++i) layout.drawn_depths.push_back(rng.uniform());
  if (spec.keep_needle_order) std::sort(layout.drawn_depths.begin(), layout.drawn_depths.end());

  const size_t budget = options.context_tokens;
  const size_t fixed = count_all(assemble(spec, layout, false), count_tokens);
  if (fixed > budget) {
    throw_invalid("tasks", "context too small for the task's instruction, needles and question",
                  std::to_string(budget) + " tokens", ">= " + std::to_string(fixed) + " tokens");
  }
  // Grow with per-sentence estimates (sentences are joined by one space, so counts add up to
  // within a token or so each), then correct with exact counts of the whole prompt.
  size_t estimate = fixed;
  for (;;) {
    std::string sentence = filler_sentence(rng);
    const size_t cost = count_tokens(" " + sentence);
    if (estimate + cost > budget) break;
    estimate += cost;
    layout.filler.push_back(std::move(sentence));
  }
  size_t total = count_all(assemble(spec, layout, false), count_tokens);
  while (total > budget && !layout.filler.empty()) {
    layout.filler.pop_back();
    total = count_all(assemble(spec, layout, false), count_tokens);
  }
  for (int tries = 0; tries < 64; ++tries) {  // top up if the estimates were pessimistic
    std::string sentence = filler_sentence(rng);
    layout.filler.push_back(std::move(sentence));
    const size_t grown = count_all(assemble(spec, layout, false), count_tokens);
    if (grown > budget) {
      layout.filler.pop_back();
      break;
    }
    total = grown;
  }
  SNAPKV_CHECK(total <= budget);
  Sample sample = assemble(spec, layout, options.remove_needles);
  sample.prompt_tokens = count_tokens(full_prompt(sample));
  return sample;
}

std::vector<Sample> generate_samples(Task task, const TaskOptions& options, size_t n,
                                     const TokenCounter& count_tokens) {
  std::vector<Sample> samples;
  samples.reserve(n);
  for (size_t i = 0; i < n; ++i) samples.push_back(generate_sample(task, options, i, count_tokens));
  return samples;
}

std::string sample_to_json(Task task, size_t index, const Sample& sample) {
  nlohmann::json j;
  j["task"] = task_name(task);
  j["index"] = index;
  j["context"] = sample.context;
  j["question"] = sample.question;
  j["answer_prefix"] = sample.answer_prefix;
  j["answers"] = sample.answers;
  j["depths"] = sample.depths;
  j["prompt_tokens"] = sample.prompt_tokens;
  return j.dump();
}

}  // namespace snapkv::eval
