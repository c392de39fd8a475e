// The skeleton of the commands that write a model's sidecar GGUF (find-heads, train-scorer):
// options --model and --out (default: the sidecar path beside the model), the output path checked
// before any work, the model and its tokenizer loaded, progress lines "[<command>] prompt D/T,
// S s" on stderr unless --quiet, the sidecar written atomically, then loaded back by the model
// (what was written must load for it) before the command reports.
// Leaves out: what is measured or trained (the command's build step) and what it prints.
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"

namespace snapkv::cli {

struct SidecarCommandOptions {
  std::string model;
  std::string out;  // "" = Sidecar::default_out(model)
  bool quiet = false;
};

struct SidecarSteps {
  const char* command = "";                                    // "find-heads"
  std::function<std::string(const std::string&)> default_out;  // model path -> sidecar path
  size_t log_every = 1;  // a progress line every this many prompts, and after the last one
  // The sidecar's bytes; calls progress(done, total) after each prompt.
  std::function<std::vector<uint8_t>(const LlamaModel&, const Tokenizer&,
                                     const std::function<void(size_t, size_t)>& progress)>
      build;
  // Reads the written sidecar back into the model; throws when it does not load.
  std::function<void(LlamaModel&, const std::string& path)> load_back;
  // Prints the result on stdout once the sidecar is written and loads: its path and the seconds
  // since the start.
  std::function<void(const std::string& path, double seconds)> report;
};

// Adds --model (required) and -o,--out ("Output sidecar (default: <model><suffix>)").
void add_sidecar_options(CLI::App& sub, SidecarCommandOptions& o, const std::string& suffix);

// Runs the steps; returns the exit code (0). Errors are thrown as the other commands' are.
int run_sidecar_command(SidecarCommandOptions o, const SidecarSteps& steps);

}  // namespace snapkv::cli
