// The shared cache options of the `snapkv` subcommands (cli/cache_options.h).
#include "cache_options.h"

#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <thread>

#include "snapkv/kv/core/spec.h"
#include "snapkv/kv/core/spec_json.h"
#include "snapkv/model/generation.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/error.h"
#include "snapkv/util/input_file.h"
#include "snapkv/util/parallel.h"

namespace snapkv::cli {
namespace {

// Commands that registered the shared options, for --print-cache-config.
std::map<const CLI::App*, const CacheOptions*>& registry() {
  static std::map<const CLI::App*, const CacheOptions*> r;
  return r;
}

const char* kMethodHelp =
    "full, snapkv (true window queries), snapkv-proxy (keys as queries), streaming, chunkkv, "
    "knorm, random, keydiff, expected_attention, expected_attention-proxy, kvzip (context "
    "reconstruction), kvzip_plus (KVzip+: kvzip normalised by value and residual norms), kvzap "
    "(learned kvzip surrogate: snapkv train-scorer), kivi2, kivi4, kivi2r, "
    "kivi4r (Hadamard-rotated), kitty, zipcache, gear, "
    "zipcacher (rotated zipcache), kivi42 (4-bit keys, 2-bit values), kivi24, kivi42r, "
    "kivi32 (3-bit keys, 2-bit values), kivimix (2/4-bit key channels, 2-bit values) (full cache + "
    "codec), <policy>+<codec> (snapkv+kivi2); "
    "prefixes ada- (AdaKV), pyramid- (PyramidKV), ada-pyramid-";

// One flag per row of the cache spec that has one (kv/core/spec.h): its help, its default from
// CacheConfig{} and its check are the table's; the value lands in o.knobs when parsed.
void add_spec_flags(CLI::App& app, CacheOptions& o, const std::string& group) {
  const CacheConfig defaults;
  for (const CacheOption& spec : cache_options()) {
    if (spec.flag.empty()) continue;
    const CacheOption* row = &spec;
    const std::string default_text = format_option_value(spec.get(defaults));
    if (spec.type == OptionType::flag) {
      const std::string names = "--" + std::string(spec.flag) + ",!--no-" + std::string(spec.flag);
      const std::string help = std::string(spec.help) + " (default: --" +
                               (std::get<bool>(spec.get(defaults)) ? "" : "no-") +
                               std::string(spec.flag) + ")";
      app.add_flag_function(
             names, [&o, row](int64_t count) { row->set(o.knobs, OptionValue{count > 0}); }, help)
          ->group(group);
      continue;
    }
    std::string names = "--" + std::string(spec.flag);
    const std::string canonical(spec.name);
    std::string dashed = canonical;
    for (char& c : dashed) c = c == '_' ? '-' : c;
    if (dashed != spec.flag) names += ",--" + dashed;
    CLI::Option* opt = app.add_option_function<std::string>(
        names, [&o, row](const std::string& v) { row->set(o.knobs, parse_option_value(*row, v)); },
        std::string(spec.help));
    opt->default_str(default_text)->group(group);
    if (spec.type == OptionType::choice) opt->type_name(std::string(spec.choices));
    opt->check(CLI::Validator(
        [row](std::string& v) -> std::string {
          try {
            parse_option_value(*row, v);
          } catch (const std::invalid_argument& e) {
            return e.what();
          }
          return std::string();
        },
        "", std::string(spec.name)));
  }
}

}  // namespace

namespace {
std::string keep_text(double keep) {
  std::string s = std::to_string(keep);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}
}  // namespace

CacheOptionSpec query_aware_cache_spec() {
  CacheOptionSpec spec;
  spec.default_methods = std::string(kDefaultMethod);
  spec.default_keep = keep_text(kDefaultKeep);
  return spec;
}

CacheOptionSpec document_cache_spec() {
  CacheOptionSpec spec = query_aware_cache_spec();
  spec.default_methods = std::string(kDefaultDocumentMethod);
  return spec;
}

std::string codec_for_cache_types(const std::string& k, const std::string& v) {
  const std::string kk = k.empty() ? "f16" : k, vv = v.empty() ? "f16" : v;
  if (kk == "f16" && vv == "f16") return "";
  const auto q4 = [](const std::string& t) { return t == "q4_0" || t == "q4_1"; };
  if (q4(kk) && q4(vv)) return "kivi4";
  throw_invalid("cli", "--cache-type-k/--cache-type-v pair has no snapkv codec",
                "-ctk " + kk + " -ctv " + vv,
                "f16/f16 (fp16) or q4_0|q4_1 for both (kivi4); other codecs by --method "
                "(e.g. snapkv+kivi2)");
}

void rewrite_llama_cpp_options(std::vector<std::string>& args) {
  for (std::string& a : args) {
    if (a == "-ctk") a = "--cache-type-k";
    if (a == "-ctv") a = "--cache-type-v";
  }
}

std::vector<Method> CacheOptions::parsed_methods() const {
  std::string list = methods;
  if (!cache_type_k.empty() || !cache_type_v.empty()) {
    const std::string codec = codec_for_cache_types(cache_type_k, cache_type_v);
    if (!codec.empty()) {
      list.clear();
      for (const std::string& name : split_list(methods)) {
        const Method m = parse_method(name, knobs);
        if (m.config.codec != CodecKind::fp16) {
          throw_invalid("cli", "--cache-type-k/-v with a method that has a codec", name,
                        "a method without a codec (the cache types choose " + codec + ")");
        }
        if (!list.empty()) list += ",";
        list += m.config.policy == PolicyKind::full ? codec : name + "+" + codec;
      }
    }
  }
  std::vector<Method> out = parse_methods(list, knobs);
  for (Method& m : out) m.config.budget = budget;
  return out;
}

Method CacheOptions::single_method() const {
  std::vector<Method> all = parsed_methods();
  if (all.size() != 1) {
    throw_invalid("cli", "--method takes one name", methods, "one method (lists: eval, bench)");
  }
  return all.front();
}

std::vector<double> CacheOptions::keeps() const {
  if (keep.empty()) return {};
  return parse_keeps(keep);
}

CacheConfig CacheOptions::config_for(const Method& m, size_t tokens) const {
  CacheConfig c = m.config;
  const std::vector<double> k = keeps();
  const bool budget_given = budget_option != nullptr && budget_option->count() > 0;
  if (!k.empty() && !budget_given) {
    if (k.size() != 1) throw_invalid("cli", "--keep takes one fraction here", keep, "e.g. 0.1");
    c.budget = m.uses_keep ? budget_for(k.front(), tokens, c) : std::max<size_t>(tokens, 1);
  } else {
    c.budget = budget;
  }
  c.validate();
  return c;
}

nlohmann::json CacheOptions::to_json() const {
  // The first method as the command will run it (--cache-type-k/-v applied).
  const Method m =
      split_list(methods).empty() ? parse_method("snapkv", knobs) : parsed_methods().front();
  nlohmann::json j = config_record_json(m.config);
  j["methods"] = methods;
  // Numbers, not the text typed: null when not given, a list for eval's --keep LIST.
  const std::vector<double> k = keeps();
  j["keep"] = k.empty()       ? nlohmann::json(nullptr)
              : k.size() == 1 ? nlohmann::json(k.front())
                              : nlohmann::json(k);
  j["budget"] = budget;
  j["prefill_chunk"] = prefill_chunk;
  j["threads"] = threads;
  return j;
}

void add_cache_options(CLI::App& app, CacheOptions& o, const CacheOptionSpec& spec) {
  registry()[&app] = &o;
  o.methods = spec.default_methods.empty() ? "snapkv" : spec.default_methods;
  o.keep = spec.default_keep;
  const std::string group =
      "Cache options (the same in run, chat, eval, bench, demo, select, compress)";
  if (spec.methods == MethodArity::one) {
    app.add_option("--method", o.methods, std::string("Cache method: ") + kMethodHelp)
        ->capture_default_str()
        ->group(group);
  } else if (spec.methods == MethodArity::list) {
    app.add_option("--methods", o.methods,
                   std::string("Comma-separated cache methods: ") + kMethodHelp)
        ->capture_default_str()
        ->group(group);
  }
  CLI::Option* keep = nullptr;
  switch (spec.budget) {
    case BudgetStyle::none:
      break;
    case BudgetStyle::budget_or_keep:
      if (spec.default_keep.empty()) {
        o.budget_option =
            app.add_option("--budget", o.budget, "Rows kept per KV head after prefill")
                ->capture_default_str()
                ->group(group);
        keep = app.add_option("--keep", o.keep,
                              "Kept fraction in (0, 1] of the prompt instead of --budget (budget "
                              "= max(ceil(keep x tokens), sinks + 1), sinks + window when the "
                              "window is kept)")
                   ->group(group);
      } else {
        // --keep by default; --budget N (no default printed: none applies) replaces it.
        o.budget_option = app.add_option("--budget", o.budget,
                                         "Rows kept per KV head after prefill, instead of --keep")
                              ->group(group);
        keep = app.add_option("--keep", o.keep,
                              "Kept fraction in (0, 1] of the prompt (budget = max(ceil(keep x "
                              "tokens), sinks + 1), sinks + window when the window is kept)")
                   ->capture_default_str()
                   ->group(group);
      }
      keep->excludes(o.budget_option);
      break;
    case BudgetStyle::keep_list:
      app.add_option("--keep", o.keep, "Comma-separated kept fractions in (0, 1]")
          ->capture_default_str()
          ->group(group);
      break;
    case BudgetStyle::keep_one:
      app.add_option("--keep", o.keep, "Kept fraction in (0, 1] for the compressed caches")
          ->capture_default_str()
          ->group(group);
      break;
  }
  add_spec_flags(app, o, group);
  app.add_option("--cache-type-k", o.cache_type_k,
                 "llama.cpp's -ctk: f16, q4_0, q4_1 (with -ctv: f16/f16 = fp16, q4 both = kivi4)")
      ->group(group);
  app.add_option("--cache-type-v", o.cache_type_v, "llama.cpp's -ctv (see --cache-type-k)")
      ->group(group);
  if (spec.prefill_chunk) {
    app.add_option("--prefill-chunk", o.prefill_chunk, "Tokens per prefill forward")
        ->capture_default_str()
        ->group(group);
  }
  if (spec.threads) {
    app.add_option("--threads,-t", o.threads,
                   "Worker threads (0 = all cores; at most " + std::to_string(max_threads()) + ")")
        ->capture_default_str()
        ->group(group);
  }
  app.add_flag("--print-cache-config", o.print_config,
               "Print the parsed cache configuration as JSON and exit")
      ->group("");  // hidden
}

int max_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  const int four_x = 4 * static_cast<int>(hw > 0 ? hw : 1);
  return std::min(256, four_x);
}

void apply_threads(const char* component, int threads) {
  if (threads < 0 || threads > max_threads()) {
    throw_invalid(
        component, "--threads out of range", std::to_string(threads),
        "0 (all cores) .. " + std::to_string(max_threads()) + " (min(256, 4 x hardware threads))");
  }
  // One thread pool: ours. matmul spreads its sgemm tiles over it and runs OpenBLAS with one
  // thread inside each task (ops/gemm.h); OpenBLAS's own workers would spin beside ours.
  set_num_threads(threads);
  set_blas_threads(1);
}

void JsonOutput::open(const char* component, const std::vector<NamedPath>& inputs) {
  if (!to_file()) return;
  refuse_output_over_inputs(component, {path, "--json"}, inputs);
  file_ = OutputFile::open(path, component, "--json file");
}

void check_output(const char* component, const NamedPath& output, Seek seek,
                  const std::vector<NamedPath>& inputs) {
  if (output.first.empty() || output.first == "-") return;
  refuse_output_over_inputs(component, output, inputs);
  OutputFile::check(output.first, component, output.second + " file", seek);
}

void JsonOutput::write(const nlohmann::json& j, const char* component, int indent) {
  const std::string text =
      j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (to_stdout()) {
    write_stdout(text, component);
    return;
  }
  if (!to_file()) return;
  if (!file_.is_open()) open(component);
  file_.write(text);
  file_.commit();
}

JsonOutput::~JsonOutput() = default;  // an uncommitted file_ removes its temporary file

void add_json_option(CLI::App& app, JsonOutput& out, const std::string& what) {
  out.option = app.add_option("--json", out.path,
                              "JSON output of " + what +
                                  ": to FILE, or to stdout (instead of the text) without FILE")
                   ->expected(0, 1)
                   ->type_name("[FILE]");
}

bool print_cache_config_if_asked(const CLI::App& app) {
  const auto it = registry().find(&app);
  if (it == registry().end() || !it->second->print_config) return false;
  // --threads is applied as the command would apply it, and the effect reported.
  apply_threads(app.get_name().c_str(), it->second->threads);
  nlohmann::json j = it->second->to_json();
  j["effective_threads"] = {{"workers", num_threads()}, {"openblas", blas_threads()}};
  std::cout << j.dump(1) << std::endl;
  return true;
}

namespace {
// "" when `piece` is a plain decimal integer (optional sign, no leading zero unless it is "0");
// otherwise why not. CLI11 converts integers with strtoll(..., 0), which reads "010" as 8 and
// "0x10" as 16: a user typing a count never means that.
std::string decimal_problem(const std::string& piece) {
  size_t i = piece.find_first_not_of(" \t");
  if (i == std::string::npos) return std::string();  // empty: CLI11 reports it
  if (piece[i] == '+' || piece[i] == '-') ++i;
  const size_t digits = piece.find_first_not_of("0123456789", i);
  const size_t end = piece.find_last_not_of(" \t") + 1;
  if (digits == i || (digits != std::string::npos && digits < end)) {
    return std::string();  // not a number at all: CLI11's own conversion error names it
  }
  if (end - i > 1 && piece[i] == '0') {
    return "an integer is read in decimal, got " + piece + ", expected no leading zeros";
  }
  return std::string();
}
}  // namespace

namespace {
// Options whose empty value means something (an empty text to tokenize, an empty system
// message); every other option that takes a value refuses "".
bool empty_allowed(const CLI::Option& opt) {
  for (const char* name : {"--text", "--system", "--prompt", "--question", "--json"}) {
    if (opt.check_lname(name + 2)) return true;
  }
  return false;
}

// "" when `v` (digits, checked before) fits the option's integer type; else why not.
std::string overflow_problem(const std::string& v, bool is_unsigned) {
  const size_t b = v.find_first_not_of(" \t");
  const size_t e = v.find_last_not_of(" \t");
  if (b == std::string::npos) return std::string();
  const char* first = v.data() + b + (v[b] == '+' ? 1 : 0);
  const char* last = v.data() + e + 1;
  if (is_unsigned) {
    uint64_t x = 0;
    const auto r = std::from_chars(first, last, x);
    if (r.ec == std::errc::result_out_of_range) {
      return "a count out of range, got " + v + ", expected at most " +
             std::to_string(std::numeric_limits<uint64_t>::max());
    }
  } else {
    int64_t x = 0;
    const auto r = std::from_chars(first, last, x);
    if (r.ec == std::errc::result_out_of_range) {
      return "an integer out of range, got " + v + ", expected a 64-bit integer";
    }
  }
  return std::string();
}
}  // namespace

CLI::Option* bounded(CLI::Option* opt, uint64_t lo, uint64_t hi, const std::string& why) {
  const std::string name = opt->get_name();
  opt->check(CLI::Validator(
      [=](std::string& v) -> std::string {
        uint64_t x = 0;
        const size_t b = v.find_first_not_of(" \t");
        const size_t e = v.find_last_not_of(" \t");
        if (b == std::string::npos) return "an empty value, expected a number";
        const auto r = std::from_chars(v.data() + b + (v[b] == '+' ? 1 : 0), v.data() + e + 1, x);
        if (r.ec != std::errc() || r.ptr != v.data() + e + 1) return std::string();  // CLI11's
        if (x < lo || x > hi) {
          return "out of range, got " + v + ", expected " + std::to_string(lo) + " .. " +
                 std::to_string(hi) + " (" + why + ")";
        }
        return std::string();
      },
      "", "range"));
  return opt;
}

void check_fits_memory(const char* component, const std::string& what, size_t bytes) {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return;
  const double physical = static_cast<double>(pages) * static_cast<double>(page);
  if (static_cast<double>(bytes) > physical) {
    throw_invalid(component, what + " larger than this machine's memory",
                  std::to_string(bytes / (1u << 20)) + " MiB",
                  "<= " + std::to_string(static_cast<size_t>(physical) >> 20) + " MiB");
  }
}

void reject_negative_unsigned(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_type_size() > 0 && opt->get_expected_min() > 0 && !empty_allowed(*opt)) {
      opt->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (v.find_first_not_of(" \t") == std::string::npos) {
              return "an empty value, got '" + v + "', expected a value";
            }
            return std::string();
          },
          "", "non-empty"));
    }
    const std::string type = opt->get_type_name();
    const bool is_unsigned = type.rfind("UINT", 0) == 0;
    if (!is_unsigned && type.rfind("INT", 0) != 0) continue;
    opt->check(CLI::Validator(
        [is_unsigned](std::string& v) -> std::string {
          const size_t b = v.find_first_not_of(" \t");
          if (is_unsigned && b != std::string::npos && v[b] == '-') {
            return "a count cannot be negative, got " + v + ", expected an integer >= 0";
          }
          if (v.find_first_of("xXbBoO") != std::string::npos && b != std::string::npos &&
              v[b] == '0') {
            return "an integer is read in decimal, got " + v + ", expected digits 0-9 only";
          }
          const std::string problem = decimal_problem(v);
          return problem.empty() ? overflow_problem(v, is_unsigned) : problem;
        },
        "", "decimal"));
  }
  for (CLI::App* sub : app.get_subcommands({})) reject_negative_unsigned(*sub);
}

std::string read_any_text_file(const char* component, const std::string& path, size_t max_bytes) {
  std::string text = read_input_file(path, component, "input file", max_bytes);
  if (text.size() > max_bytes) {
    throw_invalid(component,
                  "file too long: " + (path == "-" ? std::string("- (standard input)") : path),
                  "more than " + std::to_string(max_bytes) + " bytes",
                  "at most " + std::to_string(max_bytes) + " bytes");
  }
  return text;
}

std::string read_text_file(const char* component, const std::string& path, size_t max_bytes) {
  std::string text = read_input_file(path, component, "input file", max_bytes);
  const std::string what = path == "-" ? std::string("- (standard input)") : path;
  if (text.size() > max_bytes) {
    throw_invalid(
        component, "file too long for the model's context: " + what,
        "more than " + std::to_string(max_bytes) + " bytes",
        "at most " + std::to_string(max_bytes) + " bytes (context tokens x longest token)");
  }
  if (text.empty()) throw_invalid(component, "empty file", what, "at least one character");
  return text;
}

}  // namespace snapkv::cli
