// The server's store of prefilled prompts through real HTTP on loopback: a repeated prompt is
// answered from the store (exact reuse, the same answer), an uncompressed prompt's prefix is
// extended (the same answer as a fresh prefill), the longest common prefix of a stored
// uncompressed prompt and a new one is cut from a copy of the stored one, a compressed one is not,
// documents are content-addressed, memory is bounded with evicted documents kept in --cache-dir,
// and .kvc files found there at start-up are listed and served by id (names checked, other models
// skipped).
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "eval/tiny_model.h"
#include "model/chat_model_util.h"
#include "model/golden_util.h"
#include "serve/running_server.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/model/prompt_cache.h"
#include "snapkv/serve/cache_store.h"
#include "snapkv/serve/server.h"

namespace snapkv::serve {
namespace {

using nlohmann::json;
using test::post;
using test::Running;
using test::tiny_model;
namespace fs = std::filesystem;

const char* kDocument =
    "The grass is green. The sky is blue. The pass key is 48213. Remember it. The sun is yellow. "
    "Here we go. There and back again. 48213 is the pass key. The grass is green.";

json get(httplib::Client& c, const std::string& path, int expect_status = 200) {
  const auto res = c.Get(path);
  EXPECT_TRUE(res) << path;
  if (!res) return {};
  EXPECT_EQ(res->status, expect_status) << path << " -> " << res->body;
  return json::parse(res->body, nullptr, false);
}

std::string as_sent(const std::string& text) {
  return json::parse(json(text).dump(-1, ' ', false, json::error_handler_t::replace))
      .get<std::string>();
}

// `method` at `keep` over `tokens` prefilled at once, greedy: what the server answers.
std::string fresh(const std::string& method, double keep, const std::vector<int32_t>& tokens,
                  size_t max_tokens) {
  const auto& m = tiny_model();
  CacheConfig defaults;
  defaults.window = 8;
  CacheConfig config = parse_method(method, defaults).config;
  config.budget = budget_for(keep, tokens.size(), config);
  LlamaSession session(m.model, config);
  std::vector<float> logits = session.prefill(tokens);
  return as_sent(answer_greedy(session, std::move(logits), m.tokenizer, max_tokens, false).text);
}

TEST(ServeReuse, RepeatedPromptIsAnsweredFromTheStore) {
  Running server(ServerOptions{});
  httplib::Client c = server.client();
  const std::string prompt = std::string(kDocument) + " What is the pass key? The pass key is";
  const json body = {{"prompt", prompt}, {"max_tokens", 8}};
  const json first = post(c, "/v1/completions", body);
  const json second = post(c, "/v1/completions", body);
  EXPECT_EQ(first["snapkv"]["reuse"], "none");
  EXPECT_EQ(second["snapkv"]["reuse"], "exact");
  EXPECT_EQ(second["snapkv"]["reused_tokens"], first["usage"]["prompt_tokens"]);
  EXPECT_EQ(second["choices"][0]["text"], first["choices"][0]["text"]);
  const std::vector<int32_t> tokens = tiny_model().tokenizer.encode(prompt, true);
  EXPECT_EQ(first["choices"][0]["text"].get<std::string>(), fresh("snapkv", 0.2, tokens, 8));
  // Another config is another entry: prefilled again.
  json other = body;
  other["keep"] = 0.5;
  EXPECT_EQ(post(c, "/v1/completions", other)["snapkv"]["reuse"], "none");
  // Turned off: every prompt prefilled.
  ServerOptions off;
  off.reuse_prompts = false;
  Running plain(off);
  httplib::Client pc = plain.client();
  post(pc, "/v1/completions", body);
  const json again = post(pc, "/v1/completions", body);
  EXPECT_EQ(again["snapkv"]["reuse"], "none");
  EXPECT_EQ(again["choices"][0]["text"], first["choices"][0]["text"]);
}

TEST(ServeReuse, UncompressedPrefixIsExtendedCompressedIsNot) {
  Running server(ServerOptions{});
  httplib::Client c = server.client();
  const Tokenizer& tok = tiny_model().tokenizer;
  const std::string a = kDocument;
  const std::string b = a + " What is the pass key? The pass key is";
  const std::vector<int32_t> ta = tok.encode(a, true), tb = tok.encode(b, true);
  ASSERT_LT(ta.size(), tb.size());
  ASSERT_TRUE(std::equal(ta.begin(), ta.end(), tb.begin())) << "the test needs a token prefix";

  for (const std::string method : {"full", "snapkv"}) {
    SCOPED_TRACE(method);
    EXPECT_EQ(post(c, "/v1/completions",
                   {{"prompt", a}, {"max_tokens", 2}, {"method", method}})["snapkv"]["reuse"],
              "none");
    const json longer =
        post(c, "/v1/completions", {{"prompt", b}, {"max_tokens", 8}, {"method", method}});
    if (method == "full") {
      EXPECT_EQ(longer["snapkv"]["reuse"], "prefix");
      EXPECT_EQ(longer["snapkv"]["reused_tokens"].get<size_t>(), ta.size());
    } else {
      EXPECT_EQ(longer["snapkv"]["reuse"], "none");  // a compressed prefix is never extended
    }
    EXPECT_EQ(longer["choices"][0]["text"].get<std::string>(), fresh(method, 0.2, tb, 8));
  }
}

// Tokens two token lists share at their start.
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  return static_cast<size_t>(
      std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin()).first -
      a.begin());
}

TEST(ServeReuse, LongestCommonPrefixIsCutFromAStoredPrompt) {
  Running server(ServerOptions{});
  ServerOptions cold_options;
  cold_options.reuse_prompts = false;
  Running cold(cold_options);
  httplib::Client c = server.client(), cc = cold.client();
  const Tokenizer& tok = tiny_model().tokenizer;
  const std::string doc = kDocument;
  const std::string a = doc + " Tell me about the sky, please, and about the sun.";
  const std::string b = doc + " What is the pass key? The pass key is";
  const std::string d = doc + " What is the pass key? Say it twice, the key is";
  const std::vector<int32_t> ta = tok.encode(a, true), tb = tok.encode(b, true),
                             td = tok.encode(d, true);
  const size_t l_ab = common_prefix(ta, tb), l_bd = common_prefix(tb, td);
  ASSERT_GE(l_ab, ServerOptions{}.prefix_reuse_min) << "the test needs a long common prefix";
  ASSERT_LT(l_ab, std::min(ta.size(), tb.size())) << "the test needs prompts that diverge";
  ASSERT_GT(l_bd, common_prefix(ta, td)) << "d must share more with b than with a";
  ASSERT_LT(l_bd, std::min(tb.size(), td.size()));

  auto ask = [](httplib::Client& client, const std::string& prompt, const std::string& method) {
    return post(client, "/v1/completions",
                {{"prompt", prompt}, {"max_tokens", 8}, {"method", method}, {"logprobs", 3}});
  };
  // The same greedy tokens, top alternatives and log-probabilities as a server that prefilled
  // the prompt cold. The rows below L are the same computation either way, but a cold prefill's
  // last forward reads the window's own keys and values in fp32 where the reused cache holds
  // them in fp16: both are evaluations of the network with an fp16 cache, each within
  // max_diff_kv16 + tol32 of the float64 logits (model/golden_test.cpp; the serve tests' model
  // is the golden one), so logits differ by at most twice that and log-probabilities (a logit
  // minus the log-sum-exp of all) by at most four times.
  const double tolerance = 4.0 * (snapkv::test::golden().max_diff_kv16 +
                                  2.0 * 128 * std::numeric_limits<float>::epsilon() *
                                      snapkv::test::golden().max_abs_logit);
  auto expect_cold_answer = [&](const json& got, const std::string& prompt,
                                const std::string& method) {
    const json want = ask(cc, prompt, method);
    EXPECT_EQ(want["snapkv"]["reuse"], "none");
    EXPECT_EQ(got["choices"][0]["text"], want["choices"][0]["text"]);
    const json& g = got["choices"][0]["logprobs"];
    const json& w = want["choices"][0]["logprobs"];
    EXPECT_EQ(g["tokens"], w["tokens"]);
    ASSERT_EQ(g["token_logprobs"].size(), w["token_logprobs"].size());
    for (size_t i = 0; i < w["token_logprobs"].size(); ++i) {
      EXPECT_NEAR(g["token_logprobs"][i].get<double>(), w["token_logprobs"][i].get<double>(),
                  tolerance)
          << i;
      ASSERT_EQ(g["top_logprobs"][i].size(), w["top_logprobs"][i].size()) << i;
      for (const auto& [token, logprob] : w["top_logprobs"][i].items()) {
        ASSERT_TRUE(g["top_logprobs"][i].contains(token)) << i << " " << token;
        EXPECT_NEAR(g["top_logprobs"][i][token].get<double>(), logprob.get<double>(), tolerance)
            << i << " " << token;
      }
    }
  };

  const json first_a = ask(c, a, "full");
  EXPECT_EQ(first_a["snapkv"]["reuse"], "none");
  const json got_b = ask(c, b, "full");
  EXPECT_EQ(got_b["snapkv"]["reuse"], "prefix");
  EXPECT_EQ(got_b["snapkv"]["reused_tokens"].get<size_t>(), l_ab);
  expect_cold_answer(got_b, b, "full");
  // The longest common prefix wins: d shares more with b (stored now) than with a.
  const json got_d = ask(c, d, "full");
  EXPECT_EQ(got_d["snapkv"]["reuse"], "prefix");
  EXPECT_EQ(got_d["snapkv"]["reused_tokens"].get<size_t>(), l_bd);
  expect_cold_answer(got_d, d, "full");
  // The stored prompts were copied, not cut: each still answers exactly as it first did.
  const json again_a = ask(c, a, "full");
  EXPECT_EQ(again_a["snapkv"]["reuse"], "exact");
  EXPECT_EQ(again_a["choices"][0]["text"], first_a["choices"][0]["text"]);
  EXPECT_EQ(again_a["choices"][0]["logprobs"], first_a["choices"][0]["logprobs"]);
  const json again_b = ask(c, b, "full");
  EXPECT_EQ(again_b["snapkv"]["reuse"], "exact");
  EXPECT_EQ(again_b["choices"][0]["logprobs"], got_b["choices"][0]["logprobs"]);

  // A compressed cache is never cut: its rows were chosen for its own prompt.
  EXPECT_EQ(ask(c, a, "snapkv")["snapkv"]["reuse"], "none");
  const json compressed_b = ask(c, b, "snapkv");
  EXPECT_EQ(compressed_b["snapkv"]["reuse"], "none");
  EXPECT_EQ(compressed_b["choices"][0]["text"].get<std::string>(), fresh("snapkv", 0.2, tb, 8));
  // Nor is an uncompressed one for a compressed request (another config).
  EXPECT_EQ(ask(c, d + " Twice.", "snapkv")["snapkv"]["reuse"], "none");

  // A common prefix shorter than --prefix-reuse-min is prefilled.
  ServerOptions strict;
  strict.prefix_reuse_min = l_ab + 1;
  Running picky(strict);
  httplib::Client pc = picky.client();
  ask(pc, a, "full");
  EXPECT_EQ(ask(pc, b, "full")["snapkv"]["reuse"], "none");
}

TEST(ServeReuse, DocumentsAreContentAddressedAndEvictedToTheDirectory) {
  const std::string dir =
      (fs::temp_directory_path() / ("snapkv_reuse_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  ServerOptions o;
  o.cache_dir = dir;
  o.max_caches = 2;
  Running server(o);
  httplib::Client c = server.client();
  const json d1 = post(c, "/v1/caches", {{"document", kDocument}});
  const json again = post(c, "/v1/caches", {{"document", kDocument}});
  EXPECT_EQ(d1["id"], again["id"]);
  EXPECT_FALSE(d1["reused"].get<bool>());
  EXPECT_TRUE(again["reused"].get<bool>());
  const std::string id = d1["id"];
  EXPECT_EQ(id.rfind("kv-", 0), 0u) << id;
  const json question = {{"prompt", " The pass key is"}, {"max_tokens", 6}, {"cache_id", id}};
  const json before = post(c, "/v1/completions", question);
  EXPECT_EQ(before["snapkv"]["reuse"], "document");

  // Two more documents (and their completions' prompts) push the first one out of memory:
  // written to the directory, still listed, still answered the same.
  for (const char* extra : {"Another text entirely, about boats.", "A third one, about trees."}) {
    post(c, "/v1/caches", {{"document", extra}});
  }
  EXPECT_TRUE(fs::exists(fs::path(dir) / (id + ".kvc")));
  const json list = get(c, "/v1/caches");
  size_t found = 0;
  for (const json& d : list["data"]) {
    if (d["id"] == id) {
      ++found;
      EXPECT_FALSE(d["in_memory"].get<bool>());
    }
  }
  EXPECT_EQ(found, 1u) << list.dump();
  const json after = post(c, "/v1/completions", question);
  EXPECT_EQ(after["choices"][0]["text"], before["choices"][0]["text"]);

  // Deleted: gone from memory, the listing and the directory.
  const auto del = c.Delete("/v1/caches/" + id);
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 200) << del->body;
  EXPECT_FALSE(fs::exists(fs::path(dir) / (id + ".kvc")));
  post(c, "/v1/completions", question, 404);
  fs::remove_all(dir);
}

TEST(ServeReuse, CacheDirIsReadAtStartUp) {
  const std::string dir =
      (fs::temp_directory_path() / ("snapkv_cachedir_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto& m = tiny_model();
  // A .kvc as `snapkv compress` writes it, one for another model, a damaged one, a bad name.
  CacheConfig config = parse_method("snapkv+kivi2", CacheConfig{}).config;
  config.window = 8;
  const std::vector<int32_t> tokens = m.tokenizer.encode(kDocument, true);
  config.budget = budget_for(0.5, tokens.size(), config);
  LlamaSession session(m.model, config);
  session.prefill(tokens);
  save_prompt_cache(dir + "/report-v1.kvc", session, tokens);
  {
    const LlamaModel other = LlamaModel::load(snapkv::testing::tiny_model_path());
    const Tokenizer other_tok = Tokenizer::from_gguf(other.file());
    const std::vector<int32_t> ot = other_tok.encode(kDocument, true);
    LlamaSession os(other, config);
    os.prefill(ot);
    save_prompt_cache(dir + "/foreign.kvc", os, ot);
  }
  std::ofstream(dir + "/junk.kvc") << "not a cache";
  fs::copy_file(dir + "/report-v1.kvc", dir + "/bad name.kvc");

  ServerOptions o;
  o.cache_dir = dir;
  Running server(o);
  httplib::Client c = server.client();
  const json list = get(c, "/v1/caches");
  ASSERT_EQ(list["data"].size(), 1u) << list.dump();
  EXPECT_EQ(list["data"][0]["id"], "report-v1");
  EXPECT_EQ(list["data"][0]["prompt_tokens"].get<size_t>(), tokens.size());
  EXPECT_EQ(list["data"][0]["codec"], "kivi2");

  // Served by id: the answer of the saved session with the question appended.
  const std::vector<int32_t> question = m.tokenizer.encode(" The pass key is", false);
  LlamaSession ask = session.clone();
  std::vector<float> logits = ask.extend(question);
  const std::string want =
      as_sent(answer_greedy(ask, std::move(logits), m.tokenizer, 6, false).text);
  const json answer =
      post(c, "/v1/completions",
           {{"prompt", " The pass key is"}, {"max_tokens", 6}, {"cache_id", "report-v1"}});
  EXPECT_EQ(answer["choices"][0]["text"].get<std::string>(), want);
  EXPECT_EQ(get(c, "/v1/caches/report-v1")["prompt_tokens"].get<size_t>(), tokens.size());

  // Skipped files are clean errors, path-like ids are refused, the server stays up.
  EXPECT_EQ(
      post(c, "/v1/completions", {{"prompt", "x"}, {"cache_id", "foreign"}}, 409)["error"]["type"],
      "cache_unreadable");
  EXPECT_EQ(
      post(c, "/v1/completions", {{"prompt", "x"}, {"cache_id", "junk"}}, 500)["error"]["type"],
      "cache_unreadable");
  for (const std::string bad : {"../report-v1", "..", ".hidden", "a/b", "bad name"}) {
    const json e = post(c, "/v1/completions", {{"prompt", "x"}, {"cache_id", bad}}, 400);
    EXPECT_EQ(e["error"]["type"], "invalid_request_error") << bad;
  }
  get(c, "/v1/caches/.hidden", 400);
  get(c, "/v1/caches/nothing-here", 404);
  EXPECT_EQ(get(c, "/health")["status"], "ok");
  fs::remove_all(dir);
}

TEST(ServeReuse, StoreNames) {
  EXPECT_TRUE(valid_store_name("kv-0123abcd"));
  EXPECT_TRUE(valid_store_name("report.v1_final-2"));
  for (const std::string bad : {"", ".", "..", "../x", "a/b", "a\\b", ".kvc", "a b", "x\n"}) {
    EXPECT_FALSE(valid_store_name(bad)) << bad;
  }
  EXPECT_FALSE(valid_store_name(std::string(129, 'a')));
  EXPECT_TRUE(prefix_extendable(parse_method("full", CacheConfig{}).config));
  EXPECT_FALSE(prefix_extendable(parse_method("snapkv", CacheConfig{}).config));
  EXPECT_FALSE(prefix_extendable(parse_method("full+kivi2", CacheConfig{}).config));
}

}  // namespace
}  // namespace snapkv::serve
