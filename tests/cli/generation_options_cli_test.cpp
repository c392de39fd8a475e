// The generation options run, ask and chat share (cli/generation_options.h) and the one set of
// defaults, through the real binary: every alias parses to what its long form parses to, every
// command starts from GenerationConfig{}, every --help prints the same defaults, llama.cpp's
// -ctk/-ctv map to our codecs or are refused by name, and --ctx-size above the model's is refused.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"
#include "snapkv/model/generation.h"

namespace snapkv::clitest {
namespace {

using nlohmann::json;

const std::string kModel = std::string(SNAPKV_SOURCE_DIR) + "/models/snapkv-tiny4.gguf";

// Each generating command with the arguments it requires (never opened: the --print-* flags
// stop first).
const std::vector<std::pair<std::string, std::string>> kGenerating = {
    {"run", "--model unused.gguf --prompt x"},
    {"ask", "--model unused.gguf --cache unused.kvc --question x"},
    {"chat", "--model unused.gguf"},
};

json generation_config(const std::string& command, const std::string& flags, const TempDir& dir) {
  const CliResult r = run_cli(command + " " + flags + " --print-generation-config", dir);
  EXPECT_EQ(r.rc, 0) << command << " " << flags << ": " << r.err;
  return r.rc == 0 ? json::parse(r.out) : json();
}

TEST(GenerationOptionsCli, EveryCommandStartsFromTheSharedDefaults) {
  TempDir dir("genopts");
  const GenerationConfig d;
  for (const auto& [name, required] : kGenerating) {
    SCOPED_TRACE(name);
    const json j = generation_config(name, required, dir);
    EXPECT_EQ(j["max_tokens"], kDefaultMaxTokens);
    EXPECT_EQ(j["temperature"], d.sampler.temperature);
    EXPECT_EQ(j["top_k"], d.sampler.top_k);
    EXPECT_EQ(j["top_p"], d.sampler.top_p);
    EXPECT_EQ(j["min_p"], d.sampler.min_p);
    EXPECT_EQ(j["repeat_penalty"], d.sampler.repeat_penalty);
    EXPECT_EQ(j["repeat_last_n"], d.sampler.repeat_last_n);
    EXPECT_EQ(j["presence_penalty"], d.sampler.presence_penalty);
    EXPECT_EQ(j["frequency_penalty"], d.sampler.frequency_penalty);
    EXPECT_EQ(j["stop"], json::array());
    EXPECT_EQ(j["ignore_eos"], false);
    EXPECT_EQ(j["logit_bias"], json::array());
    EXPECT_EQ(j["seed"], d.sampler.seed);
    EXPECT_EQ(j["context_limit"], 0);
  }
}

TEST(GenerationOptionsCli, EachAliasParsesToItsLongForm) {
  TempDir dir("genopts");
  struct Case {
    std::string long_form, alias, field;
    json value;
  };
  const std::vector<Case> cases = {
      {"--max-tokens 7", "-n 7", "max_tokens", 7},
      {"--max-tokens 7", "--n-predict 7", "max_tokens", 7},
      {"--temperature 0.5", "--temp 0.5", "temperature", 0.5},
      {"--seed 9", "-s 9", "seed", 9},
      {"--ctx-size 300", "-c 300", "context_limit", 300},
      {"--top-k 40", "--top-k=40", "top_k", 40},
      {"--min-p 0.25", "--min-p=0.25", "min_p", 0.25},
      {"--repeat-penalty 1.5", "--repeat-penalty=1.5", "repeat_penalty", 1.5},
      {"--repeat-last-n 32", "--repeat-last-n=32", "repeat_last_n", 32},
      {"--presence-penalty 0.5", "--presence-penalty=0.5", "presence_penalty", 0.5},
      {"--frequency-penalty -0.5", "--frequency-penalty=-0.5", "frequency_penalty", -0.5},
      {"--top-p 0.75", "--top-p=0.75", "top_p", 0.75},
      {"--ignore-eos", "--ignore-eos", "ignore_eos", true},
      // llama.cpp's spelling: ID+BIAS, ID-BIAS, ID-inf (a ban), repeatable.
      {"--logit-bias 15+1.5 --logit-bias 2-inf --logit-bias 7-0.25", "-l 15+1.5 -l 2-inf -l 7-0.25",
       "logit_bias",
       json::array({json::array({15, 1.5}), json::array({2, "-inf"}), json::array({7, -0.25})})},
      // Repeatable, escapes read: '\n' is a newline.
      {"--stop '\\n' --stop END", "--stop='\\n' --stop=END", "stop", json::array({"\n", "END"})},
  };
  for (const auto& [name, required] : kGenerating) {
    for (const Case& c : cases) {
      SCOPED_TRACE(name + ": " + c.alias);
      const json a = generation_config(name, required + " " + c.long_form, dir);
      const json b = generation_config(name, required + " " + c.alias, dir);
      EXPECT_EQ(a, b);
      EXPECT_EQ(a[c.field], c.value) << a.dump();
    }
  }
  // Bad values are named usage errors before any file is opened.
  const CliResult bad = run_cli("run --model unused.gguf --prompt x --top-p 0", dir);
  EXPECT_EQ(bad.rc, 2) << bad.err;
  EXPECT_NE(bad.err.find("top_p"), std::string::npos) << bad.err;
  for (const char* b : {"15", "+1", "x+1", "15+", "15+inf", "15+1e", "15*2", "15+-1", "15+nan"}) {
    const CliResult bad_bias =
        run_cli(std::string("run --model unused.gguf --prompt x -l '") + b + "'", dir);
    EXPECT_EQ(bad_bias.rc, 2) << b << ": " << bad_bias.err;
    EXPECT_NE(bad_bias.err.find("--logit-bias"), std::string::npos) << b << ": " << bad_bias.err;
  }
  const CliResult empty_stop = run_cli("ask --model u --cache u --question x --stop ''", dir);
  EXPECT_EQ(empty_stop.rc, 2) << empty_stop.err;
  EXPECT_NE(empty_stop.err.find("--stop: an empty value"), std::string::npos) << empty_stop.err;
}

// The default CLI11 prints on the line of `option` in `help` ("--keep TEXT=0.2": "0.2"; "" when
// none is printed).
std::string help_default(const std::string& help, const std::string& option) {
  size_t at = 0;
  while ((at = help.find(option, at)) != std::string::npos) {
    const size_t end = at + option.size();
    if (end < help.size() && (help[end] == ' ' || help[end] == ',')) break;
    at = end;
  }
  if (at == std::string::npos) return "<absent>";
  const std::string line = help.substr(at, help.find('\n', at) - at);
  const size_t type_end = line.find(' ');
  if (type_end == std::string::npos) return "";
  const size_t eq = line.find('=', type_end);
  if (eq == std::string::npos || line.find(' ', type_end + 1) < eq) return "";
  return line.substr(eq + 1, line.find(' ', eq) - eq - 1);
}

TEST(GenerationOptionsCli, EveryHelpPrintsTheSameDefaults) {
  TempDir dir("genopts");
  const std::map<std::string, std::string> generation = {
      {"--max-tokens", std::to_string(kDefaultMaxTokens)},
      {"--temperature", "0"},
      {"--top-k", "0"},
      {"--top-p", "1"},
      {"--min-p", "0"},
      {"--repeat-penalty", "1"},
      {"--repeat-last-n", "64"},
      {"--presence-penalty", "0"},
      {"--frequency-penalty", "0"},
      {"--seed", "0"},
      {"--ctx-size", "0"},
  };
  for (const auto& [name, required] : kGenerating) {
    const CliResult r = run_cli(name + " --help", dir);
    ASSERT_EQ(r.rc, 0) << r.err;
    for (const auto& [option, want] : generation) {
      EXPECT_EQ(help_default(r.out, option), want) << name << " " << option;
    }
    EXPECT_NE(r.out.find("--stop"), std::string::npos) << name;
    EXPECT_NE(r.out.find("--ignore-eos"), std::string::npos) << name;
  }
  // The cache defaults: snapkv at keep 0.2 where the prompt holds the question, kvzip at keep
  // 0.2 for compress; no command prints a --budget default next to a --keep default.
  const std::map<std::string, std::string> methods = {
      {"run", "snapkv"}, {"chat", "snapkv"}, {"compress", "kvzip"}};
  for (const auto& [name, method] : methods) {
    const CliResult r = run_cli(name + " --help", dir);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(help_default(r.out, "--method"), method) << name;
    EXPECT_EQ(help_default(r.out, "--keep"), "0.2") << name;
    EXPECT_EQ(help_default(r.out, "--budget"), "") << name;
  }
}

TEST(GenerationOptionsCli, CacheTypesMapToCodecsOrAreRefused) {
  TempDir dir("genopts");
  const std::string run = "run --model unused.gguf --prompt x --print-cache-config ";
  struct Case {
    std::string flags, codec, methods;
  };
  const std::vector<Case> cases = {
      {"-ctk f16 -ctv f16", "fp16", "snapkv"},
      {"-ctk q4_0 -ctv q4_0", "kivi4", "snapkv"},
      {"--cache-type-k q4_1 --cache-type-v q4_0", "kivi4", "snapkv"},
      {"--method full -ctk q4_0 -ctv q4_1", "kivi4", "full"},
  };
  for (const Case& c : cases) {
    const CliResult r = run_cli(run + c.flags, dir);
    ASSERT_EQ(r.rc, 0) << c.flags << ": " << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["codec"], c.codec) << c.flags;
  }
  for (const std::string bad : {"-ctk q8_0 -ctv q8_0", "-ctk q4_0", "-ctk q4_0 -ctv f16",
                                "--method snapkv+kivi2 -ctk q4_0 -ctv q4_0"}) {
    const CliResult r = run_cli(run + bad, dir);
    EXPECT_EQ(r.rc, 2) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("[cli] --cache-type-k"), std::string::npos) << bad << ": " << r.err;
  }
}

TEST(GenerationOptionsCli, CtxSizeLimitsTheContextAndRefusesMoreThanTheModel) {
  TempDir dir("genopts");
  const CliResult big = run_cli("run -m " + kModel + " -p hello -c 100000 --quiet", dir);
  EXPECT_EQ(big.rc, 2) << big.err;
  EXPECT_NE(big.err.find("--ctx-size larger than the model's trained context"), std::string::npos)
      << big.err;
  EXPECT_NE(big.err.find("context_length"), std::string::npos) << big.err;
  // A prompt past --ctx-size is refused naming it; generation ends at it (finish "context").
  const CliResult over = run_cli("run -m " + kModel + " -p 'one two three four five' -c 3", dir);
  EXPECT_EQ(over.rc, 2) << over.err;
  EXPECT_NE(over.err.find("--ctx-size 3"), std::string::npos) << over.err;
  const CliResult r = run_cli(
      "run -m " + kModel + " -p 'one two three' -c 8 -n 50 --ignore-eos --json --threads 1", dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["prompt_tokens"].get<size_t>() + j["generated_tokens"].get<size_t>(), 9u) << r.out;
  EXPECT_EQ(j["finish_reason"], "context");
}

}  // namespace
}  // namespace snapkv::clitest
