// The cache spec: every option of CacheConfig described once — its name, other accepted names,
// type, range, help and how it is read from and written to a CacheConfig.
//
// Everything that names a cache option goes through this table: the command line's flags
// (cli/cache_options.cpp registers one flag per row), the JSON configuration record that commands
// print and `.kvc` files carry, the server's request fields and the C ABI's `key=value` config
// string. A value is checked here, once, when it enters (type, range, decimal digits only, no
// overflow, no empty text); CacheConfig::validate then checks what holds between options.
//
//   CacheConfig c;
//   set_cache_option(c, "window", "64");          // or an alias: "sinks" for n_sink
//   set_cache_option_value(c, "keep_window", OptionValue{true});
//   for (const CacheOption& o : cache_options()) std::cout << o.name << ' ' << o.help << '\n';
//
// The method grammar ("ada-pyramid-snapkv+kivi2") and the keep/budget rule that turn a method
// name and a kept fraction into a CacheConfig live beside it (kv/core/method.h).
// Errors: std::invalid_argument "[kv] option 'x' ..., got Y, expected Z".
// Leaves out: how a front end spells an option (dashes on the command line, JSON types).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "snapkv/kv/core/config.h"

namespace snapkv {

// A value of one option: flag -> bool, count -> uint64_t, real -> double, choice -> the name.
using OptionValue = std::variant<bool, uint64_t, double, std::string>;

enum class OptionType { flag, count, real, choice };

// Which part of a cache an option configures (the command line groups its help by it).
enum class OptionGroup {
  method,    // set by a method name (policy, codec, query source, allocations): no CLI flag
  sizing,    // the budget: the command line takes --budget / --keep instead
  eviction,  // window, sinks, pooling, chunking, AdaKV/PyramidKV parameters
  decode,    // the decode-time budget
  codec,     // the codecs' parameters
};

struct CacheOption {
  std::string_view name;     // canonical key: JSON record, server field, C ABI key
  std::string_view aliases;  // other accepted keys, space-separated ("" = none)
  std::string_view flag;     // the command line's long flag without "--" ("" = none)
  OptionType type;
  OptionGroup group;
  // choice: the accepted names, '|'-separated; with `canonical`, the canonical ones (a codec name
  // composed by the grammar of kv/core/codec_spec.h: "codec" lists the built codecs).
  std::string_view choices;
  // count / real: the inclusive range of a value given from outside. `special` (when has_special)
  // is one more accepted value outside it, meaning "the codec's own default" (kv/core/config.h).
  double min = 0.0;
  double max = 0.0;
  bool has_special = false;
  double special = 0.0;
  std::string_view help;
  OptionValue (*get)(const CacheConfig&) = nullptr;
  void (*set)(CacheConfig&, const OptionValue&) = nullptr;  // stores a checked value
  // choice: maps every accepted name to its canonical one (one of `choices`) and refuses the
  // others with std::invalid_argument; nullptr = `choices` lists every accepted name.
  std::string (*canonical)(std::string_view) = nullptr;
};

// Every option, in the order help texts and records list them.
std::span<const CacheOption> cache_options();

// The option called `name` (its canonical name or an alias; '-' and '_' are the same); nullptr
// when there is none.
const CacheOption* find_cache_option(std::string_view name);

// Parses `text` as a value of `option`: decimal digits only for counts (no sign, no leading
// zeros, no overflow), a finite decimal number for reals, true|false|1|0 for flags, one of the
// choices for a choice; then range-checks it. Throws std::invalid_argument naming the option.
OptionValue parse_option_value(const CacheOption& option, std::string_view text);

// Range- and type-checks `value` for `option` (a count given as a double that is a whole number
// is accepted: JSON numbers). Throws std::invalid_argument naming the option.
OptionValue check_option_value(const CacheOption& option, const OptionValue& value);

// Sets option `name` (or an alias) of `config` from text or a typed value, checked as above.
// An unknown name throws std::invalid_argument listing the known ones.
void set_cache_option(CacheConfig& config, std::string_view name, std::string_view text);
void set_cache_option_value(CacheConfig& config, std::string_view name, const OptionValue& value);

// The value's text as the parsers accept it ("causal_max", "32", "0.2", "true").
std::string format_option_value(const OptionValue& value);

// Every option of `config` by canonical name, in table order. With resolved = true the codec
// defaults (kivi_residual 0, kivi_fp16_sinks and zip_salient sentinels) are replaced by the
// values the stores use (kivi_residual_of(), ...), as reports and `.kvc` records show them.
std::vector<std::pair<std::string_view, OptionValue>> config_record(const CacheConfig& config,
                                                                    bool resolved = true);

// "window sinks pool ..." — every accepted key, for error messages.
std::string cache_option_names();

}  // namespace snapkv
