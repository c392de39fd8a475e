// Progress of long work on stderr: one line redrawn in place ("\r"), e.g.
//   [run] prefill 1536/8192 tokens, 812 tok/s, ETA 8.2 s
// drawn only when stderr is a terminal (--progress draws it anyway, --no-progress never), never
// on stdout, so --json output and redirected logs stay clean.
//
//   snapkv::cli::ProgressFlag flag;  add_progress_flags(sub, flag);
//   snapkv::cli::Progress p("run", flag.enabled(quiet));
//   SessionOptions so; so.progress = p.callback();   // prefill chunks and the KVzip pass
//   ...; p.done();                                   // clears the line
//   p.log("[bench] ... run 2/3: 812 tok/s");           // a log line above the progress line
//   LlamaModel m = load_model("run", path, flag.enabled(quiet));  // the weights' read, if any
// Leaves out: eval's own per-sample progress (eval_cmd.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <functional>
#include <string>

#include "snapkv/model/llama.h"
#include "snapkv/util/timer.h"

namespace snapkv::cli {

struct ProgressFlag {
  int forced = 0;  // +1 --progress, -1 --no-progress, 0 = when stderr is a terminal
  // Whether to draw: never with --quiet.
  bool enabled(bool quiet) const;
};
void add_progress_flags(CLI::App& app, ProgressFlag& flag);

class Progress {
 public:
  Progress(std::string component, bool enabled);
  ~Progress();
  // Redraws the line for `phase` (at most every 0.1 s, and always at done == total): "prefill"
  // shows tokens done/total, tok/s and the ETA; "kvzip" the pass's time; other phases their name,
  // done/total and the ETA at the rate so far.
  void update(const char* phase, size_t done, size_t total);
  std::function<void(const char*, size_t, size_t)> callback();
  // Prints `line` (and a newline) on stderr, clearing the progress line first and drawing it
  // again below; a plain print when progress is off.
  void log(const std::string& line);
  // Clears the line (once something was drawn).
  void done();

 private:
  std::string component_;
  bool enabled_;
  bool drawn_ = false;
  Timer timer_;
  double last_draw_ = -1.0;
  std::string phase_;
  std::string shown_;  // the progress line last drawn
  double phase_start_ = 0.0;
};

// LlamaModel::load(path), drawing "[component] loading model done/total MiB, MiB/s, ETA" while
// the file is read into memory (SNAPKV_WEIGHTS=huge reads it whole, util/read_progress.h); a
// mapped model (the default) opens at once and draws nothing.
LlamaModel load_model(const std::string& component, const std::string& path, bool progress);

}  // namespace snapkv::cli
