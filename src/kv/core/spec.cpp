// The cache spec (kv/core/spec.h): the table of every CacheConfig option, and the one parser and
// range check every front end uses.
#include "snapkv/kv/core/spec.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "snapkv/util/error.h"

namespace snapkv {
namespace {

constexpr double kMaxRows = 1099511627776.0;  // 2^40: row counts, budgets, windows
constexpr double kMaxSeed = 18446744073709551615.0;

double as_real(const OptionValue& v) {
  return std::get<double>(v);
}
size_t as_size(const OptionValue& v) {
  return static_cast<size_t>(std::get<uint64_t>(v));
}

// A count option whose value may be the codec's sentinel: the sentinel reads back as -1.0.
OptionValue count_or_default(size_t v, size_t sentinel) {
  if (v == sentinel) return OptionValue{-1.0};
  return OptionValue{static_cast<uint64_t>(v)};
}

#define SNAPKV_COUNT_FIELD(field)                                                   \
  [](const CacheConfig& c) { return OptionValue{static_cast<uint64_t>(c.field)}; }, \
      [](CacheConfig& c, const OptionValue& v) { c.field = as_size(v); }
#define SNAPKV_REAL_FIELD(field)                             \
  [](const CacheConfig& c) { return OptionValue{c.field}; }, \
      [](CacheConfig& c, const OptionValue& v) { c.field = as_real(v); }
#define SNAPKV_FLAG_FIELD(field)                             \
  [](const CacheConfig& c) { return OptionValue{c.field}; }, \
      [](CacheConfig& c, const OptionValue& v) { c.field = std::get<bool>(v); }
#define SNAPKV_CHOICE_FIELD(field, parse)                                            \
  [](const CacheConfig& c) { return OptionValue{std::string(to_string(c.field))}; }, \
      [](CacheConfig& c, const OptionValue& v) { c.field = parse(std::get<std::string>(v)); }

using T = OptionType;
using G = OptionGroup;

const CacheOption kOptions[] = {
    {"policy", "", "", T::choice, G::method,
     "full|snapkv|streaming|random|knorm|chunkkv|keydiff|expected_attention|kvzip|kvzip_plus|"
     "kvzap|kvzap_snapkv",
     0, 0, false, 0, "Which rows survive (a method name sets it)",
     SNAPKV_CHOICE_FIELD(policy, parse_policy)},
    {"codec", "", "", T::choice, G::method,
     "fp16|kivi2|kivi4|kivi2r|kivi4r|kitty|zipcache|gear|zipcacher|kivi42|kivi24|kivi42r|kivi32|"
     "kivimix",
     0, 0, false, 0,
     "How kept rows are stored (a method name sets it): a built codec, named by the codec "
     "grammar (kivi<K>[<V>][r|rk|rv|rkv], ...; kivi44 is kivi4)",
     SNAPKV_CHOICE_FIELD(codec, parse_codec),
     [](std::string_view s) { return std::string(to_string(parse_codec(s))); }},
    {"query_source", "", "", T::choice, G::method, "auto|queries|keys", 0, 0, false, 0,
     "Where the window's queries come from: the real queries, the last keys (proxy) or auto",
     SNAPKV_CHOICE_FIELD(query_source, parse_query_source)},
    {"head_allocation", "", "", T::choice, G::method, "uniform|ada|duo|duo_ada", 0, 0, false, 0,
     "How a layer's rows are shared among its KV heads (ada- prefix: AdaKV; duo- prefix: head "
     "types, streaming heads keep sinks + recent rows and the retrieval heads get the rest)",
     SNAPKV_CHOICE_FIELD(head_allocation, parse_head_allocation)},
    {"layer_allocation", "", "", T::choice, G::method, "uniform|pyramid", 0, 0, false, 0,
     "How the model's rows are shared among layers (pyramid- prefix: PyramidKV)",
     SNAPKV_CHOICE_FIELD(layer_allocation, parse_layer_allocation)},
    {"budget", "", "", T::count, G::sizing, "", 0, kMaxRows, false, 0,
     "Rows kept per KV head after prefill", SNAPKV_COUNT_FIELD(budget)},
    {"window", "", "window", T::count, G::eviction, "", 1, kMaxRows, false, 0,
     "Observation window (rows of queries or proxy keys; method snapkv: 24)",
     [](const CacheConfig& c) { return OptionValue{static_cast<uint64_t>(c.window)}; },
     [](CacheConfig& c, const OptionValue& v) {
       c.window = as_size(v);
       c.window_given = true;
     }},
    {"n_sink", "sinks", "sinks", T::count, G::eviction, "", 0, kMaxRows, false, 0,
     "First positions always kept", SNAPKV_COUNT_FIELD(n_sink)},
    {"pool", "", "pool", T::choice, G::eviction, "none|max|avg|causal_max", 0, 0, false, 0,
     "Score pooling: none | max | avg (centred kernel) | causal_max (a row takes the largest "
     "score of itself and the kernel - 1 rows before it)",
     SNAPKV_CHOICE_FIELD(pool, parse_pool)},
    {"kernel", "", "kernel", T::count, G::eviction, "", 1, 1048575, false, 0,
     "Pooling kernel, odd (1 = no pooling; method snapkv: 13)",
     [](const CacheConfig& c) { return OptionValue{static_cast<uint64_t>(c.kernel)}; },
     [](CacheConfig& c, const OptionValue& v) {
       c.kernel = as_size(v);
       c.kernel_given = true;
     }},
    {"keep_window", "", "keep-window", T::flag, G::eviction, "", 0, 0, false, 0,
     "Always keep the window's own rows (paper), or let them compete",
     SNAPKV_FLAG_FIELD(keep_window)},
    {"causal", "", "", T::flag, G::eviction, "", 0, 0, false, 0,
     "Causal mask inside the window (false: SnapKV's reference code)", SNAPKV_FLAG_FIELD(causal)},
    {"chunk_mode", "", "chunk-mode", T::choice, G::eviction, "end_of_prompt|every_chunk", 0, 0,
     false, 0, "end_of_prompt (compress once, after the prompt) | every_chunk",
     SNAPKV_CHOICE_FIELD(chunk_mode, parse_chunk_mode)},
    {"chunk_size", "chunkkv_size", "chunkkv-size", T::count, G::eviction, "", 1, kMaxRows, false, 0,
     "chunkkv: positions per chunk", SNAPKV_COUNT_FIELD(chunk_size)},
    {"ada_floor", "", "ada-floor", T::real, G::eviction, "", 0, 1, false, 0,
     "AdaKV: fraction of the budget every head keeps at least", SNAPKV_REAL_FIELD(ada_floor)},
    {"pyramid_beta", "", "pyramid-beta", T::real, G::eviction, "", 1, 1e6, false, 0,
     "PyramidKV: the last layer gets budget / beta", SNAPKV_REAL_FIELD(pyramid_beta)},
    {"duo_streaming", "", "duo-streaming", T::real, G::eviction, "", 0, 1, false, 0,
     "duo-: fraction of the model's KV heads that stream (lowest retrieval score first)",
     SNAPKV_REAL_FIELD(duo_streaming)},
    {"duo_recent", "", "duo-recent", T::count, G::eviction, "", 1, kMaxRows, false, 0,
     "duo-: recent rows a streaming head keeps after the sinks (capped by the budget)",
     SNAPKV_COUNT_FIELD(duo_recent)},
    {"prior_weight", "", "prior-weight", T::real, G::eviction, "", 0, 1, false, 0,
     "kvzap-snapkv / kvzap-proxy: weight in [0, 1] of kvzap's learned prior in its mixture with "
     "the window's attention (0 = the window alone, 1 = the prior alone)",
     SNAPKV_REAL_FIELD(prior_weight)},
    {"seed", "", "", T::count, G::eviction, "", 0, kMaxSeed, false, 0,
     "Seed of the random policy (commands set it from their --seed)", SNAPKV_COUNT_FIELD(seed)},
    {"decode_budget", "", "decode-budget", T::count, G::decode, "", 0, kMaxRows, false, 0,
     "Rows per KV head kept during generation, re-selected every --decode-interval steps with "
     "the newest queries (0 = decode steps never evict; eval applies it to evicting methods "
     "only: full and codec-only methods keep every row)",
     SNAPKV_COUNT_FIELD(decode_budget)},
    {"decode_interval", "", "decode-interval", T::count, G::decode, "", 1, kMaxRows, false, 0,
     "Decode steps between re-selections under --decode-budget",
     SNAPKV_COUNT_FIELD(decode_interval)},
    {"kivi_group", "", "kivi-group", T::count, G::codec, "", 1, 65536, false, 0,
     "KIVI-family codecs: group size G (key rows per block sharing a channel's scale; value "
     "channels per group); the residual must be a multiple of it",
     SNAPKV_COUNT_FIELD(kivi_group)},
    {"kivi_residual", "", "kivi-residual", T::count, G::codec, "", 0, kMaxRows, false, 0,
     "KIVI-family codecs: rows kept fp16 before packing, a multiple of the group; "
     "zipcache/zipcacher: rows per quantized segment; 0 = the codec's default (32 for "
     "zipcacher/kivi42/kivi42r/kivi24/kivi32/kivimix, 128 otherwise)",
     SNAPKV_COUNT_FIELD(kivi_residual)},
    {"kivi_fp16_sinks", "", "kivi-fp16-sinks", T::count, G::codec, "", 0, kMaxRows, true, -1,
     "KIVI-family codecs: the first rows ever appended that stay fp16 for good (KIVI-Sink; 0 = "
     "none; -1 = the codec's default: 4 for kivi42/kivi32/kivimix, 0 otherwise)",
     [](const CacheConfig& c) { return count_or_default(c.kivi_fp16_sinks, kCodecDefaultCount); },
     [](CacheConfig& c, const OptionValue& v) {
       c.kivi_fp16_sinks = std::holds_alternative<double>(v) ? kCodecDefaultCount : as_size(v);
     }},
    {"rotation_seed", "", "rotation-seed", T::count, G::codec, "", 0, kMaxSeed, false, 0,
     "kivi2r/kivi4r/zipcacher/kivi42r: seed of the Hadamard rotation's random signs",
     SNAPKV_COUNT_FIELD(rotation_seed)},
    {"kitty_channels", "", "kitty-channels", T::count, G::codec, "", 0, 65535, false, 0,
     "kitty: key channels per block kept fp16 (1 .. head_dim - 1)",
     SNAPKV_COUNT_FIELD(kitty_channels)},
    {"zip_salient", "", "zip-salient", T::real, G::codec, "", 0, 1, true, -1,
     "zipcache/zipcacher: fraction in [0, 1] of the prompt's rows, by the policy's scores, kept "
     "at --zip-high precision (the rest 2-bit); -1 = the codec's default (zipcacher 0.7, "
     "zipcache 0.2)",
     SNAPKV_REAL_FIELD(zip_salient)},
    {"zip_high_bits", "zip_high", "zip-high", T::count, G::codec, "", 4, 16, false, 0,
     "zipcache/zipcacher: precision of the salient rows, 4 | 16 (fp16)",
     SNAPKV_COUNT_FIELD(zip_high_bits)},
    {"gear_bits", "", "gear-bits", T::count, G::codec, "", 2, 4, false, 0,
     "gear: KIVI bits under the corrections, 2 | 4", SNAPKV_COUNT_FIELD(gear_bits)},
    {"gear_rank", "", "gear-rank", T::count, G::codec, "", 0, 64, false, 0,
     "gear: rank of the low-rank error term per flushed segment (< head_dim)",
     SNAPKV_COUNT_FIELD(gear_rank)},
    {"gear_sparse", "", "gear-sparse", T::real, G::codec, "", 0, 1, false, 0,
     "gear: fraction in [0, 1] of entries, by largest remaining error, kept in fp16",
     SNAPKV_REAL_FIELD(gear_sparse)},
};

#undef SNAPKV_COUNT_FIELD
#undef SNAPKV_REAL_FIELD
#undef SNAPKV_FLAG_FIELD
#undef SNAPKV_CHOICE_FIELD

// '-' and '_' compare equal, so "keep-window" and "keep_window" name the same option.
bool same_name(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i] == '-' ? '_' : a[i], y = b[i] == '-' ? '_' : b[i];
    if (x != y) return false;
  }
  return true;
}

bool has_alias(const CacheOption& o, std::string_view name) {
  std::string_view rest = o.aliases;
  while (!rest.empty()) {
    const size_t space = rest.find(' ');
    if (same_name(rest.substr(0, space), name)) return true;
    if (space == std::string_view::npos) break;
    rest.remove_prefix(space + 1);
  }
  return false;
}

std::string quoted(std::string_view s) {
  std::string out(1, '\'');  // appended: GCC 12 misfires -Wrestrict on "'" + string
  out += s;
  out += '\'';
  return out;
}

[[noreturn]] void bad_value(const CacheOption& o, std::string_view got, const std::string& want) {
  throw_invalid("kv", "option " + quoted(o.name) + " has a bad value", quoted(got), want);
}

std::string range_text(const CacheOption& o) {
  auto fmt = [&](double v) {
    if (o.type == OptionType::count) {
      // 2^64 as a double (an unbounded count's max) is past uint64_t: the largest count then.
      constexpr double kTwoTo64 = 18446744073709551616.0;
      const uint64_t n = v >= kTwoTo64 ? UINT64_MAX : static_cast<uint64_t>(v);
      return format_option_value(OptionValue{n});
    }
    return format_option_value(OptionValue{v});
  };
  std::string r = o.type == OptionType::count ? "an integer in " : "a number in ";
  r += "[" + fmt(o.min) + ", " + fmt(o.max) + "]";
  if (o.has_special)
    r += " or " + format_option_value(OptionValue{o.special}) + " (the codec's default)";
  return r;
}

bool is_choice(const CacheOption& o, std::string_view s) {
  std::string_view rest = o.choices;
  while (true) {
    const size_t bar = rest.find('|');
    if (rest.substr(0, bar) == s) return true;
    if (bar == std::string_view::npos) return false;
    rest.remove_prefix(bar + 1);
  }
}

}  // namespace

std::span<const CacheOption> cache_options() {
  return kOptions;
}

const CacheOption* find_cache_option(std::string_view name) {
  for (const CacheOption& o : kOptions) {
    if (same_name(o.name, name) || has_alias(o, name)) return &o;
  }
  return nullptr;
}

std::string cache_option_names() {
  std::string out;
  for (const CacheOption& o : kOptions) {
    if (!out.empty()) out += ' ';
    out += o.name;
  }
  return out;
}

std::string format_option_value(const OptionValue& value) {
  if (const bool* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (const uint64_t* n = std::get_if<uint64_t>(&value)) return std::to_string(*n);
  if (const std::string* s = std::get_if<std::string>(&value)) return *s;
  const double d = std::get<double>(value);
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, d);  // shortest text that reads back as d
  return std::string(buf, r.ptr);
}

OptionValue check_option_value(const CacheOption& o, const OptionValue& value) {
  const std::string got = format_option_value(value);
  switch (o.type) {
    case OptionType::flag:
      if (!std::holds_alternative<bool>(value)) bad_value(o, got, "true or false");
      return value;
    case OptionType::choice: {
      const std::string* s = std::get_if<std::string>(&value);
      if (s != nullptr && o.canonical != nullptr) return OptionValue{o.canonical(*s)};
      if (s == nullptr || !is_choice(o, *s)) bad_value(o, got, "one of " + std::string(o.choices));
      return value;
    }
    case OptionType::count: {
      if (const uint64_t* n = std::get_if<uint64_t>(&value)) {
        const double d = static_cast<double>(*n);
        if (d < o.min || d > o.max) bad_value(o, got, range_text(o));
        return value;
      }
      const double* d = std::get_if<double>(&value);
      if (d == nullptr) bad_value(o, got, range_text(o));
      if (o.has_special && *d == o.special) return value;
      if (!(std::isfinite(*d) && *d == std::floor(*d) && *d >= o.min && *d <= o.max &&
            *d < kMaxSeed)) {
        bad_value(o, got, range_text(o));
      }
      return OptionValue{static_cast<uint64_t>(*d)};
    }
    case OptionType::real: {
      double d = 0.0;
      if (const uint64_t* n = std::get_if<uint64_t>(&value)) {
        d = static_cast<double>(*n);
      } else if (const double* p = std::get_if<double>(&value)) {
        d = *p;
      } else {
        bad_value(o, got, range_text(o));
      }
      if (o.has_special && d == o.special) return OptionValue{d};
      if (!(std::isfinite(d) && d >= o.min && d <= o.max)) bad_value(o, got, range_text(o));
      return OptionValue{d};
    }
  }
  bad_value(o, got, "a known option type");
}

OptionValue parse_option_value(const CacheOption& o, std::string_view text) {
  if (text.empty()) bad_value(o, text, "a value (empty text is not one)");
  switch (o.type) {
    case OptionType::flag:
      if (text == "true" || text == "1") return OptionValue{true};
      if (text == "false" || text == "0") return OptionValue{false};
      bad_value(o, text, "true|false|1|0");
    case OptionType::choice:
      return check_option_value(o, OptionValue{std::string(text)});
    case OptionType::count: {
      if (o.has_special && text == format_option_value(OptionValue{o.special})) {
        return OptionValue{o.special};
      }
      if (text.find_first_not_of("0123456789") != std::string_view::npos) {
        bad_value(o, text, "decimal digits only (" + range_text(o) + ")");
      }
      if (text.size() > 1 && text[0] == '0') bad_value(o, text, "no leading zeros");
      uint64_t n = 0;
      const auto r = std::from_chars(text.data(), text.data() + text.size(), n);
      if (r.ec != std::errc() || r.ptr != text.data() + text.size()) {
        bad_value(o, text, range_text(o));  // overflow: refused, never saturated
      }
      return check_option_value(o, OptionValue{n});
    }
    case OptionType::real: {
      const std::string s(text);
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (end != s.c_str() + s.size() || s.find_first_of("xXpPnN") != std::string::npos) {
        bad_value(o, text, "a decimal number (" + range_text(o) + ")");
      }
      return check_option_value(o, OptionValue{d});
    }
  }
  bad_value(o, text, "a known option type");
}

void set_cache_option(CacheConfig& config, std::string_view name, std::string_view text) {
  const CacheOption* o = find_cache_option(name);
  if (o == nullptr) throw_invalid("kv", "unknown cache option", quoted(name), cache_option_names());
  o->set(config, parse_option_value(*o, text));
}

void set_cache_option_value(CacheConfig& config, std::string_view name, const OptionValue& value) {
  const CacheOption* o = find_cache_option(name);
  if (o == nullptr) throw_invalid("kv", "unknown cache option", quoted(name), cache_option_names());
  o->set(config, check_option_value(*o, value));
}

std::vector<std::pair<std::string_view, OptionValue>> config_record(const CacheConfig& config,
                                                                    bool resolved) {
  std::vector<std::pair<std::string_view, OptionValue>> out;
  out.reserve(std::size(kOptions));
  for (const CacheOption& o : kOptions) {
    OptionValue v = o.get(config);
    if (resolved) {
      if (o.name == "kivi_residual") v = OptionValue{uint64_t{kivi_residual_of(config)}};
      if (o.name == "kivi_fp16_sinks") v = OptionValue{uint64_t{kivi_fp16_sinks_of(config)}};
      if (o.name == "zip_salient") v = OptionValue{zip_salient_of(config)};
    }
    out.emplace_back(o.name, std::move(v));
  }
  return out;
}

}  // namespace snapkv
