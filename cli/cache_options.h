// The cache options every `snapkv` subcommand that builds a KV cache shares: one parser, one set
// of names, one help text, and defaults that are the library's CacheConfig defaults.
//
//   struct RunOptions { snapkv::cli::CacheOptions cache; ... };
//   auto o = std::make_shared<RunOptions>();
//   snapkv::cli::add_cache_options(sub, o->cache, {});   // or a CacheOptionSpec with fields set
//   ...  // in the action:
//   snapkv::cli::apply_threads("run", o->cache.threads);
//   CacheConfig c = o->cache.config_for(o->cache.single_method(), prompt_tokens);
//
// Flags (all optional; every default comes from CacheConfig{}; one flag per row of the cache spec,
// kv/core/spec.h, whose help, range and check they take):
//   --method NAME | --methods LIST  eval's grammar: full, snapkv, snapkv-proxy, streaming, chunkkv,
//                                   knorm, random, kivi2, kivi4, kivi2r, kivi4r,
//                                   kitty, <policy>+<codec>
//   --budget N | --keep F           rows kept per KV head, or a kept fraction of the compressed
//                                   tokens (eval-style list commands take --keep LIST)
//   --window --sinks --pool --kernel --keep-window/--no-keep-window --chunk-mode --chunkkv-size
//   --rotation-seed N --kitty-channels N   codec knobs (kivi2r/kivi4r, kitty)
//   --zip-salient F --zip-high 4|16 codec zipcache: salient fraction and its precision
//   --gear-rank R --gear-sparse F --gear-bits 2|4   codec gear
//   --prefill-chunk N               tokens per prefill forward
//   --cache-type-k/-ctk, --cache-type-v/-ctv T   llama.cpp's cache types (codec_for_cache_types)
//   --threads N                     worker threads (0 = all cores); OpenBLAS runs one thread
//                                   inside each of our tasks (ops/gemm.h)
// Also here: --json [FILE] (stdout when no FILE), and the hidden --print-cache-config that prints
// the parsed configuration as JSON and exits (tests compare it across commands).
// Leaves out: command-specific flags (--model, --seed, --max-tokens, ...).
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/util/output_file.h"

namespace snapkv::cli {

// How a command names its methods.
enum class MethodArity {
  none,  // the command picks its own methods (demo)
  one,   // --method NAME (run)
  list,  // --methods LIST (eval, bench)
};

// How a command sizes the cache.
enum class BudgetStyle {
  none,            // no budget flags (the command sizes caches itself)
  budget_or_keep,  // --budget N | --keep F (run, bench)
  keep_list,       // --keep LIST of fractions (eval)
  keep_one,        // --keep F only (demo)
};

struct CacheOptionSpec {
  MethodArity methods = MethodArity::one;
  BudgetStyle budget = BudgetStyle::budget_or_keep;
  std::string default_methods;  // for MethodArity::list (and one: empty = "snapkv")
  std::string default_keep;     // for keep_list / keep_one; empty = no default
  bool prefill_chunk = true;
  bool threads = true;
};

// The defaults of model/generation.h as specs: run and chat (the prompt holds the question):
// --method snapkv --keep 0.2; compress (question-agnostic): --method kvzip --keep 0.2. --budget N
// replaces --keep.
CacheOptionSpec query_aware_cache_spec();
CacheOptionSpec document_cache_spec();

struct CacheOptions {
  std::string methods;  // NAME or LIST (see MethodArity)
  size_t budget = CacheConfig{}.budget;
  std::string keep;  // "" = not given (budget rules)
  // Every option of the cache spec (kv/core/spec.h) given on the command line, over the
  // library's defaults; the command sets knobs.seed from its own --seed (random policy).
  CacheConfig knobs;
  // --cache-type-k / --cache-type-v (llama.cpp's -ctk / -ctv): "" = not given; see
  // codec_for_cache_types().
  std::string cache_type_k, cache_type_v;
  size_t prefill_chunk = 512;
  int threads = 0;
  bool print_config = false;
  CLI::Option* budget_option = nullptr;  // to tell "--budget given" from the default

  // Every method named (one or a list), with budget = --budget.
  std::vector<Method> parsed_methods() const;
  // The one method of a MethodArity::one command.
  Method single_method() const;
  // --keep as fractions in (0, 1] ({} when not given).
  std::vector<double> keeps() const;
  // The config of method m for a prompt whose compressed part has `tokens` tokens: budget from
  // --keep (the budget_for rule of kv/core/method.h) when given, else --budget; validated.
  CacheConfig config_for(const Method& m, size_t tokens) const;
  // The configuration every cache of the command starts from (first method, --budget), as JSON:
  // the cache spec's record plus methods, keep, prefill_chunk and threads.
  nlohmann::json to_json() const;
};

// llama.cpp's KV cache types mapped to a snapkv codec: f16/f16 -> "" (fp16, no codec), q4_0 or
// q4_1 for both -> "kivi4" (asymmetric 4-bit groups: keys per channel, values per token). Any
// other pair throws std::invalid_argument "[cli] --cache-type-k/--cache-type-v ..." naming it.
// An empty type stands for f16 (llama.cpp's default).
std::string codec_for_cache_types(const std::string& k, const std::string& v);

// Rewrites llama.cpp's two-letter single-dash options "-ctk" and "-ctv" to --cache-type-k and
// --cache-type-v (the parser reads single-dash names as one letter).
void rewrite_llama_cpp_options(std::vector<std::string>& args);

// Registers the shared flags on `app`, writing into `o` (which must outlive parsing).
void add_cache_options(CLI::App& app, CacheOptions& o, const CacheOptionSpec& spec);

// --threads: 0 = all hardware threads; 1..min(256, 4 x hardware threads) sets our worker pool (and
// pins OpenBLAS to one thread: the one pool runs matmul's tiles). Anything else throws
// std::invalid_argument "[<component>] --threads ...".
void apply_threads(const char* component, int threads);
int max_threads();

// --json [FILE]: absent = no JSON; no FILE = JSON on stdout (the command then prints nothing
// else there); FILE = written through util/output_file.h (a temporary file renamed over a regular
// file, written through to a device or FIFO, refused over a directory or socket). open() runs
// before the work starts so an unwritable path fails at once.
struct JsonOutput {
  const CLI::Option* option = nullptr;  // set by add_json_option
  std::string path;                     // "" = stdout

  bool given() const { return option != nullptr && option->count() > 0; }
  bool to_stdout() const { return given() && path.empty(); }
  bool to_file() const { return given() && !path.empty(); }
  // Creates the temporary file (checks the path is writable) after refusing a path that names
  // one of the command's inputs (util/output_file.h). No-op unless to_file().
  void open(const char* component, const std::vector<NamedPath>& inputs = {});
  // Writes j (to stdout or the file, then renames). Throws snapkv::RuntimeError on failure.
  void write(const nlohmann::json& j, const char* component, int indent = 1);
  ~JsonOutput();

 private:
  OutputFile file_;
};
void add_json_option(CLI::App& app, JsonOutput& out, const std::string& what);

// Before any work: refuses an output path (e.g. {o.out, "--out"}) that names one of the inputs,
// or that could not be written as `seek` asks (util/output_file.h OutputFile::check).
void check_output(const char* component, const NamedPath& output, Seek seek,
                  const std::vector<NamedPath>& inputs);

// Called by main after parsing: prints the parsed cache configuration of `app` when it was asked
// for with --print-cache-config; true when it did (the command then does not run).
bool print_cache_config_if_asked(const CLI::App& app);

// Rejects a leading '-' on every unsigned option of `app` and its subcommands (CLI11 would wrap
// "-1" to 2^64 - 1): "--n: a count cannot be negative, got -1"; and, on every integer option,
// anything but decimal digits (CLI11 would read "010" as octal 8 and "0x10" as 16).
// Also refuses an empty value on every option that takes one (but --text, --system, --prompt,
// --question and --json, where "" means an empty text or stdout), and an integer that does not
// fit its type (CLI11 would saturate it).
void reject_negative_unsigned(CLI::App& app);

// Upper bounds of the commands' own counts, each reflecting real work (docs/CLI.md "Numbers").
inline constexpr uint64_t kMaxSamples = 100000;          // --n: samples per task
inline constexpr uint64_t kMaxContextTokens = 1u << 20;  // --context, --max-tokens
inline constexpr uint64_t kMaxBenchLayers = 1024;        // bench --layers (random model)
inline constexpr uint64_t kMaxRepeats = 1000;            // bench --repeats

// Throws std::invalid_argument when `bytes` exceed the machine's physical memory (sizes derived
// from options, checked before they are allocated).
void check_fits_memory(const char* component, const std::string& what, size_t bytes);

// Adds an inclusive range check to an unsigned option: "--n out of range, got 10000000,
// expected 1 .. 100000 (samples per task)". Returns opt.
CLI::Option* bounded(CLI::Option* opt, uint64_t lo, uint64_t hi, const std::string& why);

// Reads a prompt/text file through util/input_file.h: "-" for standard input, a regular file, a
// pipe or a FIFO (never waiting forever); at most max_bytes bytes, not empty; throws naming the
// path otherwise.
std::string read_text_file(const char* component, const std::string& path, size_t max_bytes);
// The same, but an empty file is accepted (tokenize).
std::string read_any_text_file(const char* component, const std::string& path, size_t max_bytes);

}  // namespace snapkv::cli
