// `snapkv find-heads`: measures a model's head types (eval/head_types.h) and writes them as the
// model's sidecar GGUF, which methods with the duo- prefix need.
//
//   snapkv find-heads --model models/snapkv-tiny4.gguf     # -> models/snapkv-tiny4.heads.gguf
//
// Deterministic from --seed: the tasks' train split at each --context, full-cache prefills.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "command.h"
#include "sidecar_command.h"
#include "snapkv/eval/head_types.h"
#include "snapkv/model/head_types.h"

namespace {

struct FindHeadsOptions {
  snapkv::cli::SidecarCommandOptions sidecar;  // out "" = head_types_sidecar_path(model)
  snapkv::eval::HeadTypesOptions find;
};

int run_find_heads(const FindHeadsOptions& o) {
  using namespace snapkv;
  std::optional<HeadTypes> types;
  cli::SidecarSteps steps;
  steps.command = "find-heads";
  steps.default_out = head_types_sidecar_path;
  steps.log_every = 12;
  steps.build = [&](const LlamaModel& model, const Tokenizer& tokenizer, const auto& progress) {
    types.emplace(eval::find_head_types(model, tokenizer, o.find, progress));
    return types->to_bytes();
  };
  steps.load_back = [](LlamaModel& model, const std::string& path) { model.load_head_types(path); };
  steps.report = [&](const std::string& path, double seconds) {
    std::printf("wrote %s: head types, %zu layers x %zu KV heads, %.1f s\n", path.c_str(),
                types->n_layers(), types->n_kv_heads(), seconds);
    if (o.sidecar.quiet) return;
    for (size_t l = 0; l < types->n_layers(); ++l) {
      std::printf("layer %zu retrieval scores:", l);
      for (size_t h = 0; h < types->n_kv_heads(); ++h) {
        std::printf(" %.3f", static_cast<double>(types->scores()[l * types->n_kv_heads() + h]));
      }
      std::printf("\n");
    }
  };
  return cli::run_sidecar_command(o.sidecar, steps);
}

snapkv::cli::RegisterCommand reg{
    "find-heads", "Measure a model's retrieval and streaming heads (a sidecar GGUF beside it)",
    [](CLI::App& sub) -> snapkv::cli::Action {
      auto o = std::make_shared<FindHeadsOptions>();
      sub.footer(
          "Example:\n  snapkv find-heads --model models/snapkv-tiny4.gguf\n\n"
          "Generates prompts from --seed (the tasks' train split, --samples per task at each\n"
          "--context, each context followed by its question), runs each through a full-cache\n"
          "prefill, and scores every KV head by the attention mass its prompt's last --queries\n"
          "queries put outside the first --sinks and the last --recent positions (the largest\n"
          "over the query heads that share it). The scores go to --out (default: the model's\n"
          "path with .gguf replaced by .heads.gguf, where the duo- methods find them), keyed to\n"
          "the model's fingerprint; the methods make the lowest-scoring --duo-streaming\n"
          "fraction of the heads streaming heads.");
      snapkv::cli::add_sidecar_options(sub, o->sidecar, ".heads.gguf");
      sub.add_option("--seed", o->find.seed, "Prompt seed (train split)")->capture_default_str();
      sub.add_option("--context", o->find.contexts, "Prompt lengths in tokens, comma-separated")
          ->delimiter(',')
          ->capture_default_str();
      sub.add_option("--samples", o->find.samples_per_task, "Samples per task and context")
          ->capture_default_str();
      sub.add_option("--queries", o->find.queries, "Last queries of each prompt measured")
          ->capture_default_str();
      sub.add_option("--sinks", o->find.n_sink, "Streaming window: first positions")
          ->capture_default_str();
      sub.add_option("--recent", o->find.recent, "Streaming window: most recent positions")
          ->capture_default_str();
      sub.add_flag("--quiet", o->sidecar.quiet, "No log lines on stderr and no score table");
      return [o] { return run_find_heads(*o); };
    }};

}  // namespace
