// The skeleton of the sidecar-writing commands (sidecar_command.h).
#include "sidecar_command.h"

#include <cstdio>
#include <string_view>

#include "cache_options.h"
#include "snapkv/util/output_file.h"
#include "snapkv/util/timer.h"

namespace snapkv::cli {

void add_sidecar_options(CLI::App& sub, SidecarCommandOptions& o, const std::string& suffix) {
  sub.add_option("--model", o.model, "Model GGUF")->required();
  sub.add_option("-o,--out", o.out, "Output sidecar (default: <model>" + suffix + ")");
}

int run_sidecar_command(SidecarCommandOptions o, const SidecarSteps& steps) {
  if (o.out.empty()) o.out = steps.default_out(o.model);
  check_output(steps.command, {o.out, "--out"}, Seek::required, {{o.model, "--model"}});
  Timer timer;
  LlamaModel model = LlamaModel::load(o.model);
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  const bool log = !o.quiet;
  const std::vector<uint8_t> bytes = steps.build(model, tokenizer, [&](size_t done, size_t total) {
    if (log && (done % steps.log_every == 0 || done == total)) {
      std::fprintf(stderr, "[%s] prompt %zu/%zu, %.1f s\n", steps.command, done, total,
                   timer.seconds());
    }
  });
  OutputFile file = OutputFile::open(o.out, steps.command, "--out file", Seek::required);
  file.write(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  file.commit();
  steps.load_back(model, o.out);  // what was written must load for this model
  steps.report(o.out, timer.seconds());
  return 0;
}

}  // namespace snapkv::cli
