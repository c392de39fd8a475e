// `snapkv find-heads`: measures a model's head types (eval/head_types.h) and writes them as the
// model's sidecar GGUF, which methods with the duo- prefix need.
//
//   snapkv find-heads --model models/snapkv-tiny4.gguf     # -> models/snapkv-tiny4.heads.gguf
//
// Deterministic from --seed: the tasks' train split at each --context, full-cache prefills.
#include <cstdio>
#include <memory>
#include <string>

#include "cache_options.h"
#include "command.h"
#include "snapkv/eval/head_types.h"
#include "snapkv/model/head_types.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/util/output_file.h"
#include "snapkv/util/timer.h"

namespace {

struct FindHeadsOptions {
  std::string model;
  std::string out;  // "" = head_types_sidecar_path(model)
  snapkv::eval::HeadTypesOptions find;
  bool quiet = false;
};

int run_find_heads(FindHeadsOptions o) {
  using namespace snapkv;
  if (o.out.empty()) o.out = head_types_sidecar_path(o.model);
  cli::check_output("find-heads", {o.out, "--out"}, Seek::required, {{o.model, "--model"}});
  Timer timer;
  LlamaModel model = LlamaModel::load(o.model);
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  const bool log = !o.quiet;
  const HeadTypes types =
      eval::find_head_types(model, tokenizer, o.find, [&](size_t done, size_t total) {
        if (log && (done % 12 == 0 || done == total)) {
          std::fprintf(stderr, "[find-heads] prompt %zu/%zu, %.1f s\n", done, total,
                       timer.seconds());
        }
      });
  const std::vector<uint8_t> bytes = types.to_bytes();
  OutputFile file = OutputFile::open(o.out, "find-heads", "--out file", Seek::required);
  file.write(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  file.commit();
  model.load_head_types(o.out);  // what was written must load for this model
  std::printf("wrote %s: head types, %zu layers x %zu KV heads, %.1f s\n", o.out.c_str(),
              types.n_layers(), types.n_kv_heads(), timer.seconds());
  if (log) {
    for (size_t l = 0; l < types.n_layers(); ++l) {
      std::printf("layer %zu retrieval scores:", l);
      for (size_t h = 0; h < types.n_kv_heads(); ++h) {
        std::printf(" %.3f", static_cast<double>(types.scores()[l * types.n_kv_heads() + h]));
      }
      std::printf("\n");
    }
  }
  return 0;
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
      sub.add_option("--model", o->model, "Model GGUF")->required();
      sub.add_option("-o,--out", o->out, "Output sidecar (default: <model>.heads.gguf)");
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
      sub.add_flag("--quiet", o->quiet, "No log lines on stderr and no score table");
      return [o] { return run_find_heads(*o); };
    }};

}  // namespace
