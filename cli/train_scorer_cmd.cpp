// `snapkv train-scorer`: fits policy kvzap's learned scorer (model/kvzap.h) for one model and
// writes it as the model's sidecar GGUF.
//
//   snapkv train-scorer --model models/snapkv-tiny4.gguf     # -> models/snapkv-tiny4.kvzap.gguf
//
// The training data (eval/kvzap_train.h) is generated here, deterministically from --seed: the
// tasks' train split and generic text, each prompt scored by KVzip's reconstruction pass.
#include <cstdio>
#include <memory>
#include <string>

#include "cache_options.h"
#include "command.h"
#include "snapkv/eval/kvzap_train.h"
#include "snapkv/model/kvzap.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/util/output_file.h"
#include "snapkv/util/timer.h"

namespace {

struct TrainScorerOptions {
  std::string model;
  std::string out;  // "" = kvzap_sidecar_path(model)
  snapkv::eval::KvzapTrainOptions train;
  bool quiet = false;
};

int run_train_scorer(TrainScorerOptions o) {
  using namespace snapkv;
  if (o.out.empty()) o.out = kvzap_sidecar_path(o.model);
  cli::check_output("train-scorer", {o.out, "--out"}, Seek::required, {{o.model, "--model"}});
  Timer timer;
  LlamaModel model = LlamaModel::load(o.model);
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  const bool log = !o.quiet;
  const KvzapScorer scorer =
      eval::train_kvzap(model, tokenizer, o.train, [&](size_t done, size_t total) {
        if (log) {
          std::fprintf(stderr, "[train-scorer] prompt %zu/%zu, %.1f s\n", done, total,
                       timer.seconds());
        }
      });
  const std::vector<uint8_t> bytes = scorer.to_bytes();
  OutputFile file = OutputFile::open(o.out, "train-scorer", "--out file", Seek::required);
  file.write(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  file.commit();
  model.load_kvzap(o.out);  // what was written must load for this model
  std::printf("wrote %s: kvzap scorer, %zu layers x %zu KV heads x %zu features, %.1f s\n",
              o.out.c_str(), scorer.dims().n_layers, scorer.dims().n_kv_heads,
              kvzap_n_features(scorer.dims().head_dim), timer.seconds());
  return 0;
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
          "the log of its KVzip score. The weights go to --out (default: the model's path with\n"
          ".gguf replaced by .kvzap.gguf, where method kvzap finds them), keyed to the model's\n"
          "fingerprint: another model refuses them.");
      sub.add_option("--model", o->model, "Model GGUF")->required();
      sub.add_option("-o,--out", o->out, "Output sidecar (default: <model>.kvzap.gguf)");
      sub.add_option("--seed", o->train.seed, "Training-data seed")->capture_default_str();
      sub.add_option("--context", o->train.context_tokens, "Tokens per training prompt")
          ->capture_default_str();
      sub.add_option("--samples", o->train.samples_per_task, "Train-split samples per task")
          ->capture_default_str();
      sub.add_option("--generic", o->train.generic_prompts, "Prompts of generic text")
          ->capture_default_str();
      sub.add_option("--ridge", o->train.ridge, "Ridge, relative to the mean feature energy")
          ->capture_default_str();
      sub.add_flag("--quiet", o->quiet, "No log lines on stderr");
      return [o] { return run_train_scorer(*o); };
    }};

}  // namespace
