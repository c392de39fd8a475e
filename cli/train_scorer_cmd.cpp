// `snapkv train-scorer`: fits policy kvzap's learned scorer (model/kvzap.h) for one model and
// writes it as the model's sidecar GGUF.
//
//   snapkv train-scorer --model models/snapkv-tiny4.gguf     # -> models/snapkv-tiny4.kvzap.gguf
//
// The training data (eval/kvzap_train.h) is generated here, deterministically from --seed: the
// tasks' train split and generic text, each prompt scored by KVzip's reconstruction pass.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "command.h"
#include "sidecar_command.h"
#include "snapkv/eval/kvzap_train.h"
#include "snapkv/model/kvzap.h"

namespace {

struct TrainScorerOptions {
  snapkv::cli::SidecarCommandOptions sidecar;  // out "" = kvzap_sidecar_path(model)
  snapkv::eval::KvzapTrainOptions train;
  std::string teacher = "kvzip";  // --teacher: kvzip | kvzip_plus | questions
};

int run_train_scorer(const TrainScorerOptions& o) {
  using namespace snapkv;
  eval::KvzapTrainOptions train = o.train;
  train.teacher = o.teacher == "kvzip_plus"  ? eval::KvzapTeacher::kvzip_plus
                  : o.teacher == "questions" ? eval::KvzapTeacher::questions
                                             : eval::KvzapTeacher::kvzip;
  std::optional<KvzapScorer> scorer;
  cli::SidecarSteps steps;
  steps.command = "train-scorer";
  steps.default_out = kvzap_sidecar_path;
  steps.build = [&](const LlamaModel& model, const Tokenizer& tokenizer, const auto& progress) {
    scorer.emplace(eval::train_kvzap(model, tokenizer, train, progress));
    return scorer->to_bytes();
  };
  steps.load_back = [](LlamaModel& model, const std::string& path) { model.load_kvzap(path); };
  steps.report = [&](const std::string& path, double seconds) {
    std::printf("wrote %s: kvzap scorer, %zu layers x %zu KV heads x %zu features, %.1f s\n",
                path.c_str(), scorer->dims().n_layers, scorer->dims().n_kv_heads,
                kvzap_n_features(scorer->dims().head_dim), seconds);
  };
  return cli::run_sidecar_command(o.sidecar, steps);
}

snapkv::cli::RegisterCommand reg{
    "train-scorer", "Train the learned kvzap scorer of a model (a sidecar GGUF beside it)",
    [](CLI::App& sub) -> snapkv::cli::Action {
      auto o = std::make_shared<TrainScorerOptions>();
      sub.footer(
          "Example:\n  snapkv train-scorer --model models/snapkv-tiny4.gguf\n\n"
          "Generates its training prompts from --seed (the tasks' train split, --samples per\n"
          "task, and --generic prompts of filler text, --context tokens each), runs each through\n"
          "a full-cache prefill and KVzip's reconstruction pass, and fits per layer and KV head\n"
          "a ridge regression from each cached key (RoPE undone, its squares, its position) to\n"
          "the log of its KVzip score (--teacher kvzip_plus: KVzip+'s). --teacher questions\n"
          "learns instead each context row's share of the attention its sample's own question\n"
          "pays the context (one prefill per sample, no reconstruction pass; the generic prompts\n"
          "are not used). The weights go to --out (default: the model's path with\n"
          ".gguf replaced by .kvzap.gguf, where method kvzap finds them), keyed to the model's\n"
          "fingerprint: another model refuses them.");
      snapkv::cli::add_sidecar_options(sub, o->sidecar, ".kvzap.gguf");
      sub.add_option("--seed", o->train.seed, "Training-data seed")->capture_default_str();
      sub.add_option("--context", o->train.context_tokens, "Tokens per training prompt")
          ->capture_default_str();
      sub.add_option("--samples", o->train.samples_per_task, "Train-split samples per task")
          ->capture_default_str();
      sub.add_option("--generic", o->train.generic_prompts, "Prompts of generic text")
          ->capture_default_str();
      sub.add_option("--ridge", o->train.ridge, "Ridge, relative to the mean feature energy")
          ->capture_default_str();
      sub.add_option("--teacher", o->teacher,
                     "Scores to learn: kvzip, kvzip_plus (KVzip+'s normalised scores), or "
                     "questions (the train-split questions' attention on their contexts)")
          ->check(CLI::IsMember({"kvzip", "kvzip_plus", "questions"}))
          ->capture_default_str();
      sub.add_flag("--quiet", o->sidecar.quiet, "No log lines on stderr");
      return [o] { return run_train_scorer(*o); };
    }};

}  // namespace
