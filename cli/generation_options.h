// The generation options `snapkv run`, `ask` and `chat` share: one parser, one set of names (the
// long ones canonical, llama.cpp's spellings as aliases), and defaults that are
// GenerationConfig{}'s (model/generation.h), so every --help prints the same values.
//
//   struct RunOptions { snapkv::cli::GenerationOptions gen; ... };
//   snapkv::cli::add_generation_options(sub, o->gen);
//   ...  // in the action:
//   const snapkv::GenerationConfig g = o->gen.config();   // validated
//
// Flags: --max-tokens/-n/--n-predict, --temperature/--temp, --top-k, --top-p, --min-p,
// --repeat-penalty, --repeat-last-n, --ctx-size/-c, --presence-penalty, --frequency-penalty, --stop
// TEXT (repeatable; \n \t \r \\ escapes are read as the characters), --ignore-eos,
// --logit-bias/-l ID(+|-)BIAS (repeatable; ID-inf bans a token), --seed/-s, and
// the hidden --print-generation-config that prints the parsed GenerationConfig as JSON and exits
// (tests compare aliases with their long forms through it).
// Leaves out: log-probabilities (the server's), the cache options (cli/cache_options.h).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "snapkv/model/generation.h"

namespace snapkv::cli {

struct GenerationOptions {
  GenerationConfig parsed;              // the flags land here
  std::vector<std::string> stop;        // as typed (escapes not yet read)
  std::vector<std::string> logit_bias;  // as typed: ID+BIAS, ID-BIAS or ID-inf
  size_t ctx_size = 0;                  // --ctx-size/-c: 0 = the model's context_length
  bool print_config = false;

  // The GenerationConfig the flags describe; throws std::invalid_argument "[generation] ..." or
  // "[sampler] ..." on a bad value.
  GenerationConfig config() const;
  // The context the command may use: --ctx-size, or the model's when 0. A value above the model's
  // trained context throws std::invalid_argument "[<component>] --ctx-size ..." naming both.
  size_t context_limit(const char* component, size_t model_ctx, const char* arch) const;
};

// Registers the flags on `app`, writing into `o` (which must outlive parsing). `max_tokens_help`
// says what one generation is ("Tokens to generate", "Tokens per answer").
void add_generation_options(CLI::App& app, GenerationOptions& o,
                            const std::string& max_tokens_help = "Tokens to generate");

// llama.cpp's logit bias spelling: "15043+1.5", "15043-1", "2-inf" -> (id, bias). Throws
// std::invalid_argument "[generation] ..." naming the text otherwise.
std::pair<int32_t, float> parse_logit_bias(const std::string& text);

// "\\n" -> newline, "\\t" -> tab, "\\r", "\\\\" -> backslash; any other backslash is kept.
std::string unescape(const std::string& text);

// A GenerationConfig as JSON (field names of docs/JSON.md's "config.generation").
nlohmann::json to_json(const GenerationConfig& g);

// Called by main after parsing: prints the parsed generation configuration of `app` when it was
// asked for with --print-generation-config; true when it did (the command then does not run).
bool print_generation_config_if_asked(const CLI::App& app);

}  // namespace snapkv::cli
