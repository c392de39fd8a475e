// Subcommand registry for the `snapkv` binary. Each cli/<name>_cmd.cpp registers itself with a
// static RegisterCommand; main.cpp knows none of them by name.
//
//   static snapkv::cli::RegisterCommand reg{"select", "Show which rows SnapKV keeps",
//       [](CLI::App& sub) -> snapkv::cli::Action {
//         auto opts = std::make_shared<SelectOptions>();
//         sub.add_option("--keys", opts->keys, "...")->required();
//         return [opts] { return run_select(*opts); };   // runs after parsing, returns exit code
//       }};
//
// Exit codes (README.md, "The command line"): 0 success, 1 runtime error (bad file, bad data), 2
// bad usage. Throw std::invalid_argument for bad usage/config (exit 2) and snapkv::RuntimeError or
// any other std::exception for runtime errors (exit 1); main prints "snapkv: error: <message>".
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace snapkv::cli {

using Action = std::function<int()>;
using Setup = std::function<Action(CLI::App&)>;

struct CommandSpec {
  std::string name;
  std::string help;
  Setup setup;
};

std::vector<CommandSpec>& command_registry();

struct RegisterCommand {
  RegisterCommand(std::string name, std::string help, Setup setup);
};

// The command line this process was started with, each argument shell-quoted when needed
// ("snapkv eval --model m.gguf --keep '0.1,0.2'"); recorded in result files as given.
const std::string& invocation();
void set_invocation(int argc, const char* const* argv);

// True when stderr is a terminal (progress bars are drawn only then, and never with --quiet).
bool stderr_is_tty();

}  // namespace snapkv::cli
