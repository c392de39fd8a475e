// The `snapkv` command: parses the subcommand and its flags, runs it, maps errors to exit codes.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>

#include "cache_options.h"
#include "command.h"
#include "generation_options.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/cpu.h"
#include "snapkv/util/error.h"
#include "snapkv/util/mapped_file.h"
#include "snapkv/util/output_file.h"

namespace snapkv::cli {

std::vector<CommandSpec>& command_registry() {
  static std::vector<CommandSpec> registry;
  return registry;
}

RegisterCommand::RegisterCommand(std::string name, std::string help, Setup setup) {
  command_registry().push_back({std::move(name), std::move(help), std::move(setup)});
}

namespace {
std::string& invocation_storage() {
  static std::string s;
  return s;
}

std::string shell_quote(const std::string& a) {
  if (!a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789-_./=,:+@%") == std::string::npos) {
    return a;
  }
  std::string q = "'";
  for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

const std::string& invocation() {
  return invocation_storage();
}

void set_invocation(int argc, const char* const* argv) {
  std::string& s = invocation_storage();
  s = "snapkv";
  for (int i = 1; i < argc; ++i) s += " " + shell_quote(argv[i]);
}

bool stderr_is_tty() {
  return isatty(STDERR_FILENO) == 1;
}

}  // namespace snapkv::cli

namespace {
// Standard output must take everything the command printed (a full disk, /dev/full): otherwise
// the command fails with exit 1 and a message, even when the command itself succeeded.
int finish(int rc) {
  const std::string problem = snapkv::flush_stdout();
  if (problem.empty()) return rc;
  std::fprintf(stderr,
               "snapkv: error: [cli] cannot write standard output, got %s, expected standard "
               "output that takes the whole output\n",
               problem.c_str());
  return rc == 0 ? 1 : rc;
}

// Runs before the constructors of the shared libraries (the executable's .preinit_array): under
// an address-space limit (ulimit -v, prlimit --as) OpenBLAS, when it loads, starts worker threads
// that each map a 128 MiB buffer and retry forever when they cannot, or raises SIGINT when a
// thread cannot be created. One thread avoids both, and OpenBLAS reads OPENBLAS_NUM_THREADS only
// when it loads; libc resets the environment after this function, so setenv() here would be lost:
// the process re-executes itself at once with the variable added (execve needs no allocation).
constexpr size_t kMaxEnv = 4096;
char* g_env[kMaxEnv + 2];
char g_one_thread[] = "OPENBLAS_NUM_THREADS=1";

void one_blas_thread_under_limit(int, char** argv, char** envp) {
  rlimit lim{};
  if (argv == nullptr || envp == nullptr || ::getrlimit(RLIMIT_AS, &lim) != 0 ||
      lim.rlim_cur == RLIM_INFINITY) {
    return;
  }
  constexpr char kName[] = "OPENBLAS_NUM_THREADS=";
  size_t n = 0;
  for (; envp[n] != nullptr; ++n) {
    if (std::strncmp(envp[n], kName, sizeof kName - 1) == 0 || n >= kMaxEnv) return;
    g_env[n] = envp[n];
  }
  g_env[n] = g_one_thread;
  g_env[n + 1] = nullptr;
  ::execve("/proc/self/exe", argv, g_env);  // returns only on failure: carry on as we are
}
__attribute__((section(".preinit_array"),
               used)) void (*const g_preinit)(int, char**, char**) = &one_blas_thread_under_limit;

int run_main(int argc, char** argv) {
  using namespace snapkv::cli;
  // The same, should the loader not have run .preinit_array: re-execute once with the variable
  // set (OpenBLAS reads it only when it loads).
  if (!snapkv::blas_allowed() && std::getenv("OPENBLAS_NUM_THREADS") == nullptr) {
    ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
    ::execv("/proc/self/exe", argv);  // returns only on failure: carry on as we are
  }
  // A model file truncated while mapped becomes a named error and exit 1, not a bus error.
  snapkv::install_mapped_file_fault_handler();
  set_invocation(argc, argv);
  CLI::App app{"snapkv: SnapKV KV-cache compression and a small GGUF Llama engine"};
  app.name("snapkv");
  app.require_subcommand(1);
  // The SIMD level the kernels run at (snapkv/util/cpu.h): a bad SNAPKV_ISA is a usage error
  // before any work starts, and --version names the level.
  std::string simd;
  try {
    simd = snapkv::to_string(snapkv::isa_level());
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "snapkv: error: %s\n", e.what());
    return 2;
  }
  app.set_version_flag("--version", "snapkv 0.1.0 (SIMD kernels: " + simd + ", best on this CPU: " +
                                        snapkv::to_string(snapkv::best_isa_level()) + ")");

  auto& registry = command_registry();
  std::sort(registry.begin(), registry.end(),
            [](const CommandSpec& a, const CommandSpec& b) { return a.name < b.name; });
  std::vector<std::pair<CLI::App*, Action>> actions;
  for (auto& spec : registry) {
    CLI::App* sub = app.add_subcommand(spec.name, spec.help);
    actions.emplace_back(sub, spec.setup(*sub));
  }
  reject_negative_unsigned(app);

  // llama.cpp's -ctk / -ctv: two-letter names the parser would read as -c tk.
  std::vector<std::string> args(argv + 1, argv + argc);
  rewrite_llama_cpp_options(args);
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "snapkv: error: %s\n", e.what());
    std::fprintf(stderr, "run 'snapkv --help' or 'snapkv <command> --help' for usage\n");
    return 2;
  }

  for (auto& [sub, action] : actions) {
    if (!sub->parsed()) continue;
    try {
      if (print_cache_config_if_asked(*sub)) return 0;
      if (print_generation_config_if_asked(*sub)) return 0;
      return action();
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "snapkv: error: %s\n", e.what());
      return 2;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr,
                   "snapkv: error: [cli] out of memory, got a failed allocation, expected the "
                   "address space the command needs (docs/RELIABILITY.md: minimum address "
                   "space)\n");
      return 1;
    } catch (const std::system_error& e) {
      std::fprintf(stderr,
                   "snapkv: error: [cli] system resource exhausted, got %s, expected "
                   "threads and memory for the command (docs/RELIABILITY.md)\n",
                   e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "snapkv: error: %s\n", e.what());
      return 1;
    }
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  return finish(run_main(argc, argv));
}
