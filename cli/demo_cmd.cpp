// `snapkv demo`: one long passkey (or NIAH) prompt answered with the full cache, SnapKV at 10%,
// StreamingLLM at 10% and SnapKV + KIVI-2bit at 10%, side by side: answers, correctness, KV bytes
// and tokens/s. The shipped model models/snapkv-tiny4.gguf is the default (else the first
// models/*.gguf under the current directory) when --model is not given.
//
//   snapkv demo [--model models/<name>.gguf] [--context 1024] [--task passkey] [--seed 7]
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache_options.h"
#include "command.h"
#include "snapkv/eval/harness.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"

namespace {

using namespace snapkv;
using namespace snapkv::eval;
namespace fs = std::filesystem;

struct DemoOptions {
  std::string model;
  size_t context = 1024;  // the shipped model was trained up to 1024 tokens
  std::string task = "passkey";
  uint64_t seed = 7;
  snapkv::cli::CacheOptions cache;  // --keep (default 0.1), window, pool, kernel, threads...
  snapkv::cli::JsonOutput json;
};

// printf to stdout unless the JSON goes there.
bool g_text = true;
void say(const char* format, ...) __attribute__((format(printf, 1, 2)));
void say(const char* format, ...) {
  if (!g_text) return;
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
}

// The shipped model, models/snapkv-tiny4.gguf (see models/README.md), under the current directory;
// when that file is absent, the first (by name) models/*.gguf.
constexpr const char* kShippedModel = "models/snapkv-tiny4.gguf";

std::string default_model() {
  std::error_code ec;
  if (fs::is_regular_file(kShippedModel, ec)) return kShippedModel;
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator("models", ec)) {
    if (entry.is_regular_file() && entry.path().extension() == ".gguf") {
      found.push_back(entry.path().string());
    }
  }
  if (found.empty()) {
    throw_invalid("demo", "no --model given and no shipped model found",
                  "no models/*.gguf under " + fs::current_path().string(),
                  "--model PATH.gguf, or run from the repository root");
  }
  std::sort(found.begin(), found.end());
  return found.front();
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

int run_demo(DemoOptions& o) {
  g_text = !o.json.to_stdout();
  o.json.open("demo");
  cli::apply_threads("demo", o.cache.threads);
  const std::vector<double> keeps = o.cache.keeps();
  if (keeps.size() != 1) throw_invalid("demo", "--keep", o.cache.keep, "one fraction in (0, 1]");
  const double keep = keeps.front();
  const CacheConfig defaults = o.cache.knobs;
  const std::string path = o.model.empty() ? default_model() : o.model;
  const LlamaModel model = LlamaModel::load(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  if (o.context >= model.config().n_ctx) {  // context + 1 (BOS) tokens must fit
    throw_invalid("demo", "--context does not fit the model", std::to_string(o.context),
                  "<= llama.context_length - 1 = " + std::to_string(model.config().n_ctx - 1));
  }
  TaskOptions task_options;
  task_options.context_tokens = o.context;
  task_options.seed = o.seed;
  const TokenCounter counter = [&tokenizer](std::string_view text) {
    return tokenizer.encode(text, false).size();
  };
  const Sample sample = generate_sample(parse_task(o.task), task_options, 0, counter);
  const PromptTokens prompt = tokenize_prompt(tokenizer, sample);
  RunSettings settings;
  settings.max_new_tokens = tokenizer.encode(reference_completion(sample), false).size() + 4;

  std::string answers;
  for (const std::string& a : sample.answers) {
    if (!answers.empty()) answers += ", ";
    answers += a;
  }
  say("model %s (%s, %zu layers, %zu KV heads x %zu)\n", path.c_str(), model.config().name.c_str(),
      model.config().n_layers, model.config().n_kv_heads, model.config().head_dim);
  say("task %s, %zu prompt tokens, needle depth %.0f%%, expected: %s\n", o.task.c_str(),
      prompt.size(), sample.depths.empty() ? 0.0 : 100.0 * sample.depths.front(), answers.c_str());
  std::string question = sample.question + sample.answer_prefix;
  question.erase(0, question.find_first_not_of(" \n"));
  for (char& c : question) c = c == '\n' ? ' ' : c;
  say("question: %s\n\n", question.c_str());

  const std::string keep_pct = fixed(100.0 * keep, 0) + "%";
  struct Row {
    std::string label, method;
  };
  const std::vector<Row> rows = {{"full cache", "full"},
                                 {"SnapKV " + keep_pct, "snapkv"},
                                 {"StreamingLLM " + keep_pct, "streaming"},
                                 {"SnapKV+KIVI-2 " + keep_pct, "snapkv+kivi2"}};
  say("%-20s %7s %-24s %-7s %9s %6s %11s %10s\n", "method", "kept", "answer", "correct", "KV KiB",
      "KV%", "prefill t/s", "decode t/s");
  nlohmann::json results = nlohmann::json::array();
  for (const Row& row : rows) {
    const Method method = parse_method(row.method, defaults);
    const CacheConfig config = o.cache.config_for(method, prompt.size());
    const SampleRun run = run_sample(model, tokenizer, prompt, sample.answers, config, settings);
    std::string answer = run.prediction;
    if (answer.size() > 24) answer = answer.substr(0, 21) + "...";
    const CacheStats& s = run.after_prompt;
    const double prefill_tps = static_cast<double>(run.prompt_tokens) / run.prefill_seconds;
    const double decode_tps =
        run.decode_seconds > 0 ? static_cast<double>(run.decode_steps) / run.decode_seconds : 0.0;
    say("%-20s %7zu %-24s %-7s %9s %6s %11.0f %10.1f\n", row.label.c_str(), s.tokens_kept,
        answer.c_str(), run.score >= 1.0 ? "yes" : (run.score > 0 ? "partly" : "no"),
        fixed(static_cast<double>(s.bytes_stored) / 1024.0, 1).c_str(),
        fixed(100.0 * static_cast<double>(s.bytes_stored) /
                  static_cast<double>(std::max<size_t>(1, s.bytes_full_fp16)),
              1)
            .c_str(),
        prefill_tps, decode_tps);
    std::fflush(stdout);
    const double kv_ratio = static_cast<double>(s.bytes_stored) /
                            static_cast<double>(std::max<size_t>(1, s.bytes_full_fp16));
    results.push_back(
        {{"method", row.method},
         {"label", row.label},
         {"text", run.prediction},
         {"tokens", run.generated},
         {"generated_tokens", run.generated.size()},
         {"score", run.score},
         {"correct", run.score >= 1.0},
         {"prompt_tokens", run.prompt_tokens},
         {"budget", config.budget},
         // The demo's methods keep the same rows in every head: min = max.
         {"kept_rows", {{"min", s.tokens_kept}, {"mean", s.mean_kept()}, {"max", s.tokens_kept}}},
         {"kv_bytes", s.bytes_stored},
         {"kv_bytes_full_fp16", s.bytes_full_fp16},
         {"kv_ratio", kv_ratio},
         {"prefill_s", run.prefill_seconds},
         {"decode_s", run.decode_seconds},
         {"decode_steps", run.decode_steps},
         {"prefill_tokens_per_s", prefill_tps},
         {"decode_tokens_per_s", decode_tps}});
  }
  say("\nkept = rows per KV head after the prompt; KV%% = bytes vs a full fp16 cache.\n");
  if (o.json.given()) {
    nlohmann::json j;
    j["model"] = path;
    j["task"] = o.task;
    j["prompt_tokens"] = prompt.size();
    j["expected"] = sample.answers;
    j["keep"] = keep;
    j["results"] = results;
    o.json.write(j, "demo");
  }
  return 0;
}

snapkv::cli::RegisterCommand reg{
    "demo", "One long prompt answered with full, SnapKV, StreamingLLM and SnapKV+KIVI-2 caches",
    [](CLI::App& sub) -> snapkv::cli::Action {
      sub.footer(
          "Example: snapkv demo --context 1024 --task niah_single\n"
          "Generates one passkey (or --task niah_single, ...) prompt of --context tokens and\n"
          "answers it greedily with each cache; budget = keep x prompt tokens. Without --model\n"
          "models/snapkv-tiny4.gguf (else the first models/*.gguf) under the current directory\n"
          "is used.");
      auto o = std::make_shared<DemoOptions>();
      sub.add_option("--model,-m", o->model, "GGUF model (default: models/snapkv-tiny4.gguf)");
      snapkv::cli::bounded(sub.add_option("--context", o->context, "Tokens of prompt + answer"), 1,
                           snapkv::cli::kMaxContextTokens, "tokens; also < the model's context")
          ->capture_default_str();
      sub.add_option("--task", o->task, "passkey, niah_single, niah_multikey, vt, ...")
          ->capture_default_str();
      sub.add_option("--seed,-s", o->seed, "Sample seed")->capture_default_str();
      snapkv::cli::CacheOptionSpec spec;
      spec.methods = snapkv::cli::MethodArity::none;
      spec.budget = snapkv::cli::BudgetStyle::keep_one;
      spec.default_keep = "0.1";
      snapkv::cli::add_cache_options(sub, o->cache, spec);
      snapkv::cli::add_json_option(sub, o->json, "each method's answer, KV bytes and speed");
      return [o] { return run_demo(*o); };
    }};

}  // namespace
