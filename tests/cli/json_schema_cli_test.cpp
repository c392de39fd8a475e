// One output schema (docs/JSON.md, cli/json_fields.h): every command's --json, run through the
// real binary on the shipped tiny model, parses, carries the shared fields its output has, gives
// each shared name the one type the schema says wherever it appears (numbers are numbers), and
// never uses a retired spelling of a shared quantity.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"

namespace snapkv::clitest {
namespace {

using nlohmann::json;

const std::string kModel = std::string(SNAPKV_SOURCE_DIR) + "/models/snapkv-tiny4.gguf";

enum class Kind { number, integer, string, array, object, boolean, number_or_null };

// The shared names and their types (docs/JSON.md, "Fields").
const std::map<std::string, Kind>& schema() {
  static const std::map<std::string, Kind> s = {
      {"text", Kind::string},
      {"tokens", Kind::array},
      {"prompt_tokens", Kind::integer},
      {"generated_tokens", Kind::integer},
      {"decode_steps", Kind::integer},
      {"finish_reason", Kind::string},
      {"load_s", Kind::number},
      {"prefill_s", Kind::number},
      {"decode_s", Kind::number},
      {"ttft_s", Kind::number},
      {"kvzip_pass_s", Kind::number},
      {"write_s", Kind::number},
      {"prefill_tokens_per_s", Kind::number},
      {"decode_tokens_per_s", Kind::number},
      {"method", Kind::string},
      {"policy", Kind::string},
      {"codec", Kind::string},
      {"budget", Kind::integer},
      {"keep", Kind::number_or_null},
      {"kept_rows", Kind::object},
      {"kv_bytes", Kind::integer},
      {"kv_bytes_full_fp16", Kind::integer},
      {"kv_ratio", Kind::number},
      {"file_bytes", Kind::integer},
      {"cache_file", Kind::string},
      {"config", Kind::object},
  };
  return s;
}

// Spellings of shared quantities that no output may use.
const std::set<std::string> kRetired = {
    "decode_tok_s", "prefill_tok_s", "decode_seconds", "prefill_seconds", "answer", "reply", "stop",
    "fed_tokens",   "out",           "tok_s"};

bool has_kind(const json& v, Kind k) {
  switch (k) {
    case Kind::number:
      return v.is_number();
    case Kind::integer:
      return v.is_number_integer();
    case Kind::string:
      return v.is_string();
    case Kind::array:
      return v.is_array();
    case Kind::object:
      return v.is_object();
    case Kind::boolean:
      return v.is_boolean();
    case Kind::number_or_null:
      return v.is_number() || v.is_null();
  }
  return false;
}

// Checks every object in `j` (recursively; the cache spec's records under config.cache are
// option names, not shared quantities, and are checked for numbers only by their own tests).
void check(const json& j, const std::string& where) {
  if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) check(j[i], where + "[" + std::to_string(i) + "]");
    return;
  }
  if (!j.is_object()) return;
  for (const auto& [key, value] : j.items()) {
    const std::string at = where + "." + key;
    EXPECT_EQ(kRetired.count(key), 0u) << "retired name " << at;
    const auto it = schema().find(key);
    if (it != schema().end()) {
      EXPECT_TRUE(has_kind(value, it->second)) << at << " = " << value.dump();
    }
    if (key == "kept_rows") {
      for (const char* k : {"min", "mean", "max"}) {
        EXPECT_TRUE(value.contains(k) && value[k].is_number()) << at << " lacks " << k;
      }
    }
    if (key == "config" && value.is_object()) {
      if (value.contains("generation")) {
        for (const auto& [g, gv] : value["generation"].items()) {
          EXPECT_TRUE(gv.is_number() || gv.is_boolean() || gv.is_array()) << at << "." << g;
        }
      }
      // A cache config never contradicts itself: its budget is the effective one.
      if (value.contains("cache") && j.contains("budget")) {
        EXPECT_EQ(value["cache"]["budget"], j["budget"]) << at;
      }
      continue;
    }
    check(value, at);
  }
}

void require(const json& j, const std::vector<std::string>& keys, const std::string& what) {
  for (const std::string& k : keys) EXPECT_TRUE(j.contains(k)) << what << " lacks " << k;
}

TEST(JsonSchemaCli, EveryCommandsJsonFollowsTheOneSchema) {
  TempDir dir("json_schema");
  const std::string doc = dir.file("doc.txt"), kvc = dir.file("doc.kvc");
  std::ofstream(doc) << "The grass is green. The pass key is 48213. Remember it. The sky is blue. "
                        "Here we go. There and back again. The pass key is 48213.";
  const std::string m = "-m " + kModel + " -t 1 ";
  auto json_of = [&](const std::string& args) {
    const CliResult r = run_cli(args, dir);
    EXPECT_EQ(r.rc, 0) << args << "\n" << r.err;
    return r.rc == 0 ? json::parse(r.out) : json();
  };

  const json run = json_of("run " + m + "-f " + doc + " -n 4 --json --quiet");
  check(run, "run");
  require(run,
          {"text", "tokens", "prompt_tokens", "generated_tokens", "finish_reason", "decode_steps",
           "load_s", "prefill_s", "decode_s", "prefill_tokens_per_s", "decode_tokens_per_s",
           "method", "budget", "kept_rows", "kv_bytes", "kv_bytes_full_fp16", "kv_ratio", "config"},
          "run");
  EXPECT_TRUE(run["config"].contains("generation"));
  EXPECT_EQ(run["config"]["cache"]["keep"], 0.2);  // the default, a number

  const json compress =
      json_of("compress " + m + "-f " + doc + " -o " + kvc + " --keep 0.5 --json --quiet");
  check(compress, "compress");
  require(compress,
          {"cache_file", "prompt_tokens", "method", "budget", "kept_rows", "kv_bytes",
           "kv_bytes_full_fp16", "kv_ratio", "file_bytes", "prefill_s", "write_s", "config"},
          "compress");
  EXPECT_EQ(compress["config"]["cache"]["keep"], 0.5);
  EXPECT_EQ(compress["config"]["cache"]["method"], "kvzip");
  EXPECT_FALSE(compress["config"]["cache"].contains("methods"));

  const json ask =
      json_of("ask " + m + "--cache " + kvc + " --question 'What is the pass key?' -n 3 --json");
  check(ask, "ask");
  require(ask, {"cache_file", "prompt_tokens", "load_s", "kept_rows", "kv_bytes", "config"}, "ask");
  ASSERT_EQ(ask["answers"].size(), 1u);
  require(ask["answers"][0],
          {"text", "tokens", "generated_tokens", "finish_reason", "ttft_s", "decode_s",
           "decode_steps", "decode_tokens_per_s"},
          "ask answer");

  // chat reads its turns from a pipe.
  const std::string out = dir.file("chat.json");
  const std::string cmd = "printf 'hello\\nand then\\n' | '" + std::string(SNAPKV_CLI_PATH) +
                          "' chat -m " + kModel + " -t 1 --no-chat -n 3 --json --quiet >'" + out +
                          "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream lines(out);
  std::string line;
  size_t turns = 0;
  while (std::getline(lines, line)) {
    const json t = json::parse(line);
    check(t, "chat");
    require(t,
            {"text", "tokens", "generated_tokens", "finish_reason", "prompt_tokens", "kept_rows",
             "kv_bytes", "kv_bytes_full_fp16", "kv_ratio", "budget"},
            "chat turn");
    ++turns;
  }
  EXPECT_EQ(turns, 2u);

  const json demo = json_of("demo " + m + "--context 200 --json");
  check(demo, "demo");
  require(demo, {"prompt_tokens", "keep", "results"}, "demo");
  ASSERT_EQ(demo["results"].size(), 4u);
  for (const json& r : demo["results"]) {
    require(r,
            {"method", "text", "tokens", "generated_tokens", "prompt_tokens", "budget", "kept_rows",
             "kv_bytes", "kv_bytes_full_fp16", "kv_ratio", "prefill_s", "decode_s",
             "prefill_tokens_per_s", "decode_tokens_per_s"},
            "demo result");
  }

  const json eval = json_of("eval " + m +
                            "--tasks passkey --context 200 --n 1 --methods full,snapkv --keep 0.5 "
                            "--json --quiet");
  check(eval, "eval");
  ASSERT_FALSE(eval["results"].empty());
  require(
      eval["results"][0],
      {"method", "keep", "prefill_s", "decode_s", "prefill_tokens_per_s", "decode_tokens_per_s"},
      "eval cell");

  // bench times a GGUF as llama-bench does (-m), or a random-weight model full vs compressed.
  check(json_of("bench " + m + "-p 32 -n 2 -r 1 --no-warmup --json --quiet"), "bench -m");
  const json bench = json_of(
      "bench -t 1 --layers 1 --embd 64 --heads 2 --kv-heads 1 --ff 128 --vocab 100 --types f32 "
      "-p 64 -n 2 -r 1 --budget 16 --json --quiet");
  check(bench, "bench");
  ASSERT_FALSE(bench["results"].empty());
  require(bench["results"][0],
          {"method", "prefill_tokens_per_s", "decode_tokens_per_s", "kv_bytes",
           "kv_bytes_full_fp16", "kept_rows"},
          "bench result");
}

}  // namespace
}  // namespace snapkv::clitest
