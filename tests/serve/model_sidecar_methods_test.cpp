// The methods that need more than the model's weights, through `snapkv serve` on loopback with the
// shipped model (models/snapkv-tiny4.gguf): duo-snapkv (its head types,
// models/snapkv-tiny4.heads.gguf), kvzap, kvzap-snapkv and kvzap-proxy (its scorer,
// models/snapkv-tiny4.kvzap.gguf) and kvzip_plus (KVzip+'s reconstruction pass) answer completions
// and documents as the library does in-process, and the response's `snapkv` object names the
// method; a copy of the model without its sidecars refuses duo-, kvzap and the kvzap_snapkv methods
// with a 400 naming what is missing, and still answers other methods.
#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/running_server.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/model/kvzip.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/prompt_cache.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/serve/server.h"

namespace snapkv::serve {
namespace {

using nlohmann::json;
using test::post;
using test::Running;
namespace fs = std::filesystem;

const std::string kModel = std::string(SNAPKV_SOURCE_DIR) + "/models/snapkv-tiny4.gguf";

struct Shipped {
  LlamaModel model;
  Tokenizer tokenizer;
  explicit Shipped(const std::string& path)
      : model(load_without_env(path)), tokenizer(Tokenizer::from_gguf(model.file())) {}
  // The sidecars beside the file only, whatever the environment names.
  static LlamaModel load_without_env(const std::string& path) {
    ::unsetenv("SNAPKV_HEADS");
    ::unsetenv("SNAPKV_KVZAP");
    return LlamaModel::load(path);
  }
};

const Shipped& shipped() {
  static const Shipped m(kModel);
  return m;
}

std::string passkey_document() {
  std::string filler;
  for (int i = 0; i < 12; ++i) {
    filler += "Everyone said the castle was small, but the painter thought it was broad. ";
  }
  return "There is an important info hidden inside a lot of irrelevant text. Find it and "
         "memorize them. I will quiz you about the important information there.\n" +
         filler + "The pass key is 71432. Remember it. 71432 is the pass key. " + filler;
}

const char* kQuestion = "\n\nWhat is the pass key? The pass key is";

// The answer of the library in-process: `method` at keep 0.2 with the server's test defaults
// (window 8) and session options, the prompt prefilled with BOS, greedy.
GreedyAnswer in_process(const Shipped& m, const std::string& method, const std::string& prompt,
                        size_t max_tokens) {
  CacheConfig defaults;
  defaults.window = 8;
  CacheConfig config = parse_method(method, defaults).config;
  const std::vector<int32_t> tokens = m.tokenizer.encode(prompt, true);
  config.budget = budget_for(0.2, tokens.size(), config);
  LlamaSession session(m.model, config,
                       SessionOptions{ServerOptions{}.prefill_chunk,
                                      ReconstructionOptions{kvzip_repeat_prompt(m.tokenizer)}});
  std::vector<float> logits = session.prefill(tokens);
  return answer_greedy(session, std::move(logits), m.tokenizer, max_tokens, false);
}

TEST(ServeSidecarMethods, ShippedModelAnswersDuoKvzapAndKvzipPlus) {
  ASSERT_NE(shipped().model.head_types(), nullptr) << shipped().model.head_types_status();
  ASSERT_NE(shipped().model.kvzap(), nullptr) << shipped().model.kvzap_status();
  ServerOptions o;
  o.reuse_prompts = false;
  Running server(o, shipped().model, shipped().tokenizer);
  httplib::Client c = server.client();
  const std::string prompt = passkey_document() + kQuestion;
  for (const std::string method :
       {"duo-snapkv", "kvzap", "kvzip_plus", "duo-ada-kvzip_plus", "kvzap-snapkv", "kvzap-proxy"}) {
    SCOPED_TRACE(method);
    const GreedyAnswer want = in_process(shipped(), method, prompt, 6);
    const json r = post(c, "/v1/completions",
                        {{"prompt", prompt}, {"method", method}, {"keep", 0.2}, {"max_tokens", 6}});
    ASSERT_TRUE(r.is_object());
    EXPECT_EQ(r["choices"][0]["text"].get<std::string>(), want.text);
    EXPECT_EQ(r["snapkv"]["method"], method);
    EXPECT_LT(r["snapkv"]["kv_bytes"].get<size_t>(),
              r["snapkv"]["kv_bytes_full_fp16"].get<size_t>())
        << r.dump();
  }
  // The shipped model retrieves the pass key with its head types at keep 0.2.
  const json duo =
      post(c, "/v1/completions",
           {{"prompt", prompt}, {"method", "duo-snapkv"}, {"keep", 0.2}, {"max_tokens", 6}});
  EXPECT_NE(duo["choices"][0]["text"].get<std::string>().find("71432"), std::string::npos)
      << duo.dump();

  // A compressed document under duo-snapkv, then a question on it.
  const json doc = post(
      c, "/v1/caches", {{"document", passkey_document()}, {"method", "duo-snapkv"}, {"keep", 0.2}});
  ASSERT_TRUE(doc.contains("id")) << doc.dump();
  EXPECT_EQ(doc["method"], "duo-snapkv");
  const json asked = post(c, "/v1/completions",
                          {{"prompt", kQuestion}, {"cache_id", doc["id"]}, {"max_tokens", 6}});
  EXPECT_EQ(asked["snapkv"]["method"], "duo-snapkv") << asked.dump();
  EXPECT_NE(asked["choices"][0]["text"].get<std::string>().find("71432"), std::string::npos)
      << asked.dump();
}

// A copy of the shipped model in a directory of its own has no sidecars beside it.
TEST(ServeSidecarMethods, ModelWithoutSidecarsRefusesByName) {
  const fs::path dir =
      fs::temp_directory_path() / ("snapkv_serve_sidecars_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path copy = dir / "bare.gguf";
  fs::copy_file(kModel, copy, fs::copy_options::overwrite_existing);
  {
    const Shipped bare(copy.string());
    ASSERT_EQ(bare.model.head_types(), nullptr);
    ASSERT_EQ(bare.model.kvzap(), nullptr);
    Running server(ServerOptions{}, bare.model, bare.tokenizer);
    httplib::Client c = server.client();
    const std::string prompt = passkey_document() + kQuestion;
    const auto refused = [&](const std::string& path, const json& body,
                             const std::vector<std::string>& named) {
      SCOPED_TRACE(path + " " + body.value("method", std::string()));
      const json e = post(c, path, body, 400);
      ASSERT_TRUE(e.is_object());
      const std::string message = e["error"]["message"].get<std::string>();
      for (const std::string& what : named) {
        EXPECT_NE(message.find(what), std::string::npos) << what << " not in: " << message;
      }
    };
    const std::string heads = (dir / "bare.heads.gguf").string();
    const std::string scorer = (dir / "bare.kvzap.gguf").string();
    refused("/v1/completions", {{"prompt", prompt}, {"method", "duo-snapkv"}, {"max_tokens", 4}},
            {"needs head types", heads, "snapkv find-heads"});
    refused("/v1/completions",
            {{"prompt", prompt}, {"method", "duo-snapkv"}, {"max_tokens", 4}, {"stream", true}},
            {"needs head types", heads});
    refused("/v1/caches", {{"document", passkey_document()}, {"method", "duo-snapkv"}},
            {"needs head types", heads});
    refused("/v1/completions", {{"prompt", prompt}, {"method", "kvzap"}, {"max_tokens", 4}},
            {"needs scorer weights", scorer, "snapkv train-scorer"});
    refused("/v1/caches", {{"document", passkey_document()}, {"method", "ada-kvzap"}},
            {"needs scorer weights", scorer});
    refused(
        "/v1/completions",
        {{"prompt", prompt}, {"method", "kvzap-proxy"}, {"prior_weight", 0.3}, {"max_tokens", 4}},
        {"policy kvzap_snapkv needs scorer weights", scorer});
    refused("/v1/caches", {{"document", passkey_document()}, {"method", "kvzap-snapkv"}},
            {"policy kvzap_snapkv needs scorer weights", scorer});
    // The server is alive and other methods still work with this model.
    const json ok = post(c, "/v1/completions",
                         {{"prompt", prompt}, {"method", "kvzip_plus"}, {"max_tokens", 4}});
    EXPECT_EQ(ok["snapkv"]["method"], "kvzip_plus");
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace snapkv::serve
