// The shared generation options (cli/generation_options.h).
#include "generation_options.h"

#include <cctype>
#include <cmath>
#include <iostream>
#include <limits>
#include <map>

#include "cache_options.h"
#include "snapkv/util/error.h"

namespace snapkv::cli {
namespace {

// Commands that registered the options, for --print-generation-config.
std::map<const CLI::App*, const GenerationOptions*>& registry() {
  static std::map<const CLI::App*, const GenerationOptions*> r;
  return r;
}

// The default as --help prints it: "0", "0.5", "1" (no trailing zeros).
std::string number(double v) {
  std::string s = std::to_string(v);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

// [[id, bias], ...]; a banned token's bias as the string "-inf" (JSON has no infinities).
nlohmann::json logit_bias_json(const SamplerConfig& s) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [id, bias] : s.logit_bias) {
    out.push_back({id, std::isinf(bias) ? nlohmann::json("-inf") : nlohmann::json(bias)});
  }
  return out;
}

// An option that may be given many times, one value each, all kept in order.
void add_repeatable(CLI::App& app, const std::string& names, std::vector<std::string>& into,
                    const std::string& help, const std::string& type, const std::string& group) {
  app.add_option(names, into, help)
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->type_name(type)
      ->group(group);
}

}  // namespace

std::string unescape(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      const char c = text[i + 1];
      const char* known = c == 'n'    ? "\n"
                          : c == 't'  ? "\t"
                          : c == 'r'  ? "\r"
                          : c == '\\' ? "\\"
                                      : nullptr;
      if (known != nullptr) {
        out += known;
        ++i;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

std::pair<int32_t, float> parse_logit_bias(const std::string& text) {
  const size_t sign = text.find_first_of("+-");
  const auto fail = [&] {
    throw_invalid("generation", "--logit-bias", "'" + text + "'",
                  "TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1.5, 2-inf to ban token 2)");
  };
  if (sign == 0 || sign == std::string::npos || sign > 9) fail();
  const std::string id = text.substr(0, sign);
  if (id.find_first_not_of("0123456789") != std::string::npos) fail();
  const std::string value = text.substr(sign + 1);
  const float negative = text[sign] == '-' ? -1.0f : 1.0f;
  if (value == "inf") {
    if (negative > 0.0f) fail();  // +inf would make the token certain: not a bias
    return {static_cast<int32_t>(std::stol(id)), -std::numeric_limits<float>::infinity()};
  }
  size_t used = 0;
  float bias = 0.0f;
  try {
    bias = std::stof(value, &used);
  } catch (const std::exception&) {
    fail();
  }
  if (used != value.size() || value.empty() ||
      !std::isdigit(static_cast<unsigned char>(value[0])) || !std::isfinite(bias)) {
    fail();
  }
  return {static_cast<int32_t>(std::stol(id)), negative * bias};
}

GenerationConfig GenerationOptions::config() const {
  GenerationConfig g = parsed;
  g.stop.clear();
  for (const std::string& s : stop) g.stop.push_back(unescape(s));
  g.sampler.logit_bias.clear();
  for (const std::string& b : logit_bias) g.sampler.logit_bias.push_back(parse_logit_bias(b));
  g.context_limit = ctx_size;
  g.validate();
  return g;
}

size_t GenerationOptions::context_limit(const char* component, size_t model_ctx,
                                        const char* arch) const {
  if (ctx_size == 0) return model_ctx;
  if (ctx_size > model_ctx) {
    throw_invalid(component, "--ctx-size larger than the model's trained context",
                  std::to_string(ctx_size),
                  "<= " + std::string(arch) + ".context_length = " + std::to_string(model_ctx) +
                      " (0 = the model's)");
  }
  return ctx_size;
}

nlohmann::json to_json(const GenerationConfig& g) {
  const SamplerConfig& s = g.sampler;
  return {{"max_tokens", g.max_tokens},
          {"temperature", s.temperature},
          {"top_k", s.top_k},
          {"top_p", s.top_p},
          {"min_p", s.min_p},
          {"repeat_penalty", s.repeat_penalty},
          {"repeat_last_n", s.repeat_last_n},
          {"presence_penalty", s.presence_penalty},
          {"frequency_penalty", s.frequency_penalty},
          {"stop", g.stop},
          {"ignore_eos", g.ignore_eos},
          {"logit_bias", logit_bias_json(s)},
          {"seed", s.seed},
          {"context_limit", g.context_limit}};
}

void add_generation_options(CLI::App& app, GenerationOptions& o,
                            const std::string& max_tokens_help) {
  registry()[&app] = &o;
  const GenerationConfig d;
  const SamplerConfig& ds = d.sampler;
  SamplerConfig& s = o.parsed.sampler;
  const std::string group = "Generation options (the same in run, ask, chat)";
  bounded(
      app.add_option("--max-tokens,-n,--n-predict", o.parsed.max_tokens,
                     max_tokens_help + " (stops earlier at an end-of-generation token or --stop)"),
      1, kMaxContextTokens, "tokens; generation also stops at the model's context")
      ->default_str(std::to_string(d.max_tokens))
      ->group(group);
  app.add_option("--temperature,--temp", s.temperature, "Sampling temperature (0 = greedy)")
      ->default_str(number(ds.temperature))
      ->group(group);
  app.add_option("--top-k", s.top_k, "Keep the k most likely tokens (0 = all)")
      ->default_str(std::to_string(ds.top_k))
      ->group(group);
  app.add_option("--top-p", s.top_p, "Nucleus mass in (0, 1] (1 = off)")
      ->default_str(number(ds.top_p))
      ->group(group);
  app.add_option("--min-p", s.min_p, "Drop tokens below min-p x the top probability (0 = off)")
      ->default_str(number(ds.min_p))
      ->group(group);
  app.add_option("--repeat-penalty", s.repeat_penalty,
                 "Divide the logits of recent tokens by this (1 = off)")
      ->default_str(number(ds.repeat_penalty))
      ->group(group);
  app.add_option("--repeat-last-n", s.repeat_last_n, "Recent tokens the penalties look at")
      ->default_str(std::to_string(ds.repeat_last_n))
      ->group(group);
  app.add_option("--presence-penalty", s.presence_penalty,
                 "Subtracted from the logits of tokens seen recently, in [-2, 2]")
      ->default_str(number(ds.presence_penalty))
      ->group(group);
  app.add_option("--frequency-penalty", s.frequency_penalty,
                 "Subtracted per recent occurrence, in [-2, 2]")
      ->default_str(number(ds.frequency_penalty))
      ->group(group);
  add_repeatable(app, "--stop", o.stop,
                 "Stop when the text holds this string (repeatable; \\n \\t \\r \\\\ escapes; "
                 "the text ends before it)",
                 "TEXT", group);
  app.add_flag("--ignore-eos", o.parsed.ignore_eos,
               "Ban end-of-generation tokens, as llama.cpp (fixed-length output, benchmarks)")
      ->group(group);
  add_repeatable(app, "--logit-bias,-l", o.logit_bias,
                 "Add BIAS to a token's logit: TOKEN_ID+BIAS or TOKEN_ID-BIAS, repeatable "
                 "(TOKEN_ID-inf bans the token)",
                 "ID(+|-)BIAS", group);
  app.add_option("--seed,-s", s.seed, "Sampler seed (and the random policy's)")
      ->default_str(std::to_string(ds.seed))
      ->group(group);
  app.add_option("--ctx-size,-c", o.ctx_size,
                 "Context limit in tokens, prompt and output together (0 = the model's "
                 "context_length; larger is refused)")
      ->default_str("0")
      ->group(group);
  app.add_flag("--print-generation-config", o.print_config,
               "Print the parsed generation configuration as JSON and exit")
      ->group("");  // hidden
}

bool print_generation_config_if_asked(const CLI::App& app) {
  const auto it = registry().find(&app);
  if (it == registry().end() || !it->second->print_config) return false;
  std::cout << to_json(it->second->config()).dump(1) << std::endl;
  return true;
}

}  // namespace snapkv::cli
