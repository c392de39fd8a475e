// The C ABI's engine part (include/snapkv/snapkv.h): generation into a callback gives the tokens
// of the C++ generation loop with the same cache config; method= / keep= / budget= resolve as the
// command line's flags; a .kvc written through the ABI answers like the document it was saved
// from; versions agree; misuse is a status with a named message.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "snapkv/kv/core/method.h"
#include "snapkv/model/generation.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/snapkv.h"

namespace {

const std::string kModel = std::string(SNAPKV_SOURCE_DIR) + "/models/snapkv-tiny4.gguf";

std::string passkey_prompt() {
  std::string filler;
  for (int i = 0; i < 12; ++i) {
    filler += "Everyone said the castle was small, but the painter thought it was broad. ";
  }
  return "There is an important info hidden inside a lot of irrelevant text. Find it and "
         "memorize them. I will quiz you about the important information there.\n" +
         filler + "The pass key is 71432. Remember it. 71432 is the pass key. " + filler +
         "\n\nWhat is the pass key? The pass key is";
}

struct Model {
  snapkv_model* p = nullptr;
  Model() {
    if (snapkv_model_load(kModel.c_str(), &p) != SNAPKV_OK) ADD_FAILURE() << snapkv_last_error();
  }
  ~Model() { snapkv_model_free(p); }
};

struct Collected {
  std::string text;
  std::vector<int32_t> tokens;
  int stop_after = -1;
};

int collect(void* user, const char* text, size_t n, int32_t token) {
  auto* c = static_cast<Collected*>(user);
  c->text.append(text, n);
  c->tokens.push_back(token);
  return c->stop_after >= 0 && static_cast<int>(c->tokens.size()) >= c->stop_after ? 1 : 0;
}

TEST(CApiModel, GenerateEqualsTheCppLoop) {
  Model m;
  ASSERT_NE(m.p, nullptr);
  snapkv_generation_params params;
  snapkv_generation_params_default(&params);
  EXPECT_EQ(params.max_tokens, snapkv::kDefaultMaxTokens);
  params.max_tokens = 10;
  Collected got;
  snapkv_generation_result r{};
  const std::string prompt = passkey_prompt();
  ASSERT_EQ(snapkv_generate(m.p, prompt.c_str(), "method=snapkv+kivi2 keep=0.2 window=16", &params,
                            collect, &got, &r),
            SNAPKV_OK)
      << snapkv_last_error();

  const snapkv::LlamaModel model = snapkv::LlamaModel::load(kModel);
  const snapkv::Tokenizer tok = snapkv::Tokenizer::from_gguf(model.file());
  const std::vector<int32_t> tokens = tok.encode(prompt);
  snapkv::CacheConfig knobs;
  knobs.window = 16;
  snapkv::CacheConfig c = snapkv::parse_method("snapkv+kivi2", knobs).config;
  c.budget = snapkv::budget_for(0.2, tokens.size(), c);
  snapkv::LlamaSession session(model, c);
  snapkv::GenerationConfig g;
  g.max_tokens = 10;
  const snapkv::GenerationResult want =
      snapkv::generate(session, session.prefill(tokens), tok, g, tokens);
  EXPECT_EQ(got.text, want.text);
  EXPECT_EQ(r.generated_tokens, want.tokens.size());
  EXPECT_EQ(r.prompt_tokens, tokens.size());
  EXPECT_EQ(r.cache.bytes_stored, session.cache_stats().bytes_stored);
  EXPECT_EQ(r.cache.tokens_kept, c.budget + want.decode_steps);  // decode rows are appended
  EXPECT_NE(got.text.find("71432"), std::string::npos) << got.text;

  Collected cancelled;
  cancelled.stop_after = 2;
  ASSERT_EQ(snapkv_generate(m.p, prompt.c_str(), nullptr, &params, collect, &cancelled, &r),
            SNAPKV_OK);
  EXPECT_EQ(r.finish_reason, SNAPKV_FINISH_CANCELLED);
  EXPECT_EQ(r.generated_tokens, 2u);
}

TEST(CApiModel, KeepAndMethodKeysResolveAsTheCommandLine) {
  snapkv_caches* c = nullptr;
  snapkv_model_dims dims{2, 4, 2, 8};
  EXPECT_EQ(snapkv_caches_create(&dims, "keep=0.2", &c), SNAPKV_INVALID_ARGUMENT);
  EXPECT_NE(std::string(snapkv_last_error()).find("prompt_tokens"), std::string::npos);
  EXPECT_EQ(snapkv_caches_create(&dims, "keep=0.2 budget=4 prompt_tokens=100", &c),
            SNAPKV_INVALID_ARGUMENT);
  EXPECT_EQ(snapkv_caches_create(&dims, "method=snapkvv", &c), SNAPKV_INVALID_ARGUMENT);
  EXPECT_NE(std::string(snapkv_last_error()).find("unknown method"), std::string::npos);
  EXPECT_EQ(snapkv_caches_create(&dims, "keep=1.5 prompt_tokens=10", &c), SNAPKV_INVALID_ARGUMENT);
  ASSERT_EQ(snapkv_caches_create(&dims, "method=streaming+kivi4 keep=0.25 prompt_tokens=400", &c),
            SNAPKV_OK)
      << snapkv_last_error();
  // 100 rows per head: feed 400 tokens and count.
  std::vector<float> k(2 * 400 * 8, 0.5f);
  for (size_t l = 0; l < 2; ++l) {
    ASSERT_EQ(snapkv_update(c, l, k.data(), k.data(), 400, nullptr, 0, SNAPKV_UPDATE_PREFILL),
              SNAPKV_OK)
        << snapkv_last_error();
  }
  ASSERT_EQ(snapkv_end_prompt(c), SNAPKV_OK);
  snapkv_stats st{};
  ASSERT_EQ(snapkv_total_stats(c, &st), SNAPKV_OK);
  EXPECT_EQ(st.tokens_kept, 100u);
  EXPECT_LE(st.bytes_stored, st.bytes_full_fp16 / 4);  // 100 of 400 rows, within the residual
  snapkv_caches_free(c);
}

const char* const kPasskeyQuestion = "What is the pass key? The pass key is";

// Saves doc to a .kvc file (named after tag), loads it back and asks both documents the passkey
// question: the loaded one gives the same answer from the same stored bytes. *answer gets it.
void expect_kvc_round_trip(snapkv_model* model, snapkv_doc* doc, const std::string& tag,
                           std::string* answer) {
  const std::string path =
      (std::filesystem::temp_directory_path() / (tag + "_" + std::to_string(::getpid()) + ".kvc"))
          .string();
  ASSERT_EQ(snapkv_doc_save(doc, path.c_str()), SNAPKV_OK) << snapkv_last_error();
  snapkv_doc* loaded = nullptr;
  const int loaded_rc = snapkv_doc_load(model, path.c_str(), &loaded);
  std::remove(path.c_str());
  ASSERT_EQ(loaded_rc, SNAPKV_OK) << snapkv_last_error();
  char a[256], b[256];
  size_t na = 0, nb = 0;
  ASSERT_EQ(snapkv_doc_ask(doc, kPasskeyQuestion, 8, a, sizeof a, &na), SNAPKV_OK)
      << snapkv_last_error();
  ASSERT_EQ(snapkv_doc_ask(loaded, kPasskeyQuestion, 8, b, sizeof b, &nb), SNAPKV_OK)
      << snapkv_last_error();
  EXPECT_STREQ(a, b);
  EXPECT_GT(na, 0u);
  snapkv_stats s1{}, s2{};
  ASSERT_EQ(snapkv_doc_stats(doc, &s1), SNAPKV_OK);
  ASSERT_EQ(snapkv_doc_stats(loaded, &s2), SNAPKV_OK);
  EXPECT_EQ(s1.bytes_stored, s2.bytes_stored);
  snapkv_doc_free(loaded);
  *answer = a;
}

TEST(CApiModel, KvcRoundTripAnswersTheSame) {
  Model m;
  ASSERT_NE(m.p, nullptr);
  std::string prompt = passkey_prompt();
  const std::string doc_text = prompt.substr(0, prompt.rfind("What"));
  snapkv_doc* doc = nullptr;
  ASSERT_EQ(snapkv_doc_compress(m.p, doc_text.c_str(), "method=snapkv keep=0.3", &doc), SNAPKV_OK)
      << snapkv_last_error();
  std::string answer;
  expect_kvc_round_trip(m.p, doc, "capi", &answer);
  snapkv_doc* loaded = nullptr;
  EXPECT_EQ(snapkv_doc_load(m.p, "/nonexistent.kvc", &loaded), SNAPKV_RUNTIME_ERROR);
  EXPECT_EQ(loaded, nullptr);
  char a[256];
  size_t na = 0;
  EXPECT_EQ(snapkv_doc_ask(doc, "", 8, a, sizeof a, &na), SNAPKV_INVALID_ARGUMENT);
  snapkv_doc_free(doc);
}

// The shipped model's kvzap scorer (models/snapkv-tiny4.kvzap.gguf) is found beside it: methods
// kvzap and kvzap-proxy (its prior mixed with the proxy window's attention) compress a document,
// which round-trips through .kvc and answers as before.
TEST(CApiModel, KvzapDocumentFromTheShippedScorer) {
  Model m;
  ASSERT_NE(m.p, nullptr);
  std::string prompt = passkey_prompt();
  const std::string doc_text = prompt.substr(0, prompt.rfind("What"));
  for (const std::string spec :
       {"method=ada-kvzap keep=0.2", "method=kvzap-proxy keep=0.2 prior_weight=0.4"}) {
    SCOPED_TRACE(spec);
    snapkv_doc* doc = nullptr;
    ASSERT_EQ(snapkv_doc_compress(m.p, doc_text.c_str(), spec.c_str(), &doc), SNAPKV_OK)
        << snapkv_last_error();
    std::string answer;
    expect_kvc_round_trip(m.p, doc, "capi_kvzap", &answer);
    EXPECT_NE(answer.find("71432"), std::string::npos) << answer;
    snapkv_doc_free(doc);
  }
}

// The shipped model's head types (models/snapkv-tiny4.heads.gguf) are found beside it: a duo-
// method compresses a document (streaming heads keep sinks + recent rows), which round-trips
// through .kvc and answers as before.
TEST(CApiModel, DuoDocumentFromTheShippedHeadTypes) {
  Model m;
  ASSERT_NE(m.p, nullptr);
  std::string prompt = passkey_prompt();
  const std::string doc_text = prompt.substr(0, prompt.rfind("What"));
  snapkv_doc* doc = nullptr;
  ASSERT_EQ(snapkv_doc_compress(m.p, doc_text.c_str(), "method=duo-ada-kvzap keep=0.2", &doc),
            SNAPKV_OK)
      << snapkv_last_error();
  std::string answer;
  expect_kvc_round_trip(m.p, doc, "capi_duo", &answer);
  EXPECT_NE(answer.find("71432"), std::string::npos) << answer;
  snapkv_doc_free(doc);
}

// duo-snapkv through the ABI gives the C++ loop's tokens with the head types found beside the
// shipped model; kvzip_plus (KVzip+) compresses a document that round-trips through .kvc.
TEST(CApiModel, DuoSnapkvAndKvzipPlusFromTheShippedModel) {
  Model m;
  ASSERT_NE(m.p, nullptr);
  snapkv_generation_params params;
  snapkv_generation_params_default(&params);
  params.max_tokens = 8;
  Collected got;
  snapkv_generation_result r{};
  const std::string prompt = passkey_prompt();
  ASSERT_EQ(snapkv_generate(m.p, prompt.c_str(), "method=duo-snapkv keep=0.2", &params, collect,
                            &got, &r),
            SNAPKV_OK)
      << snapkv_last_error();
  const snapkv::LlamaModel model = snapkv::LlamaModel::load(kModel);
  ASSERT_NE(model.head_types(), nullptr) << model.head_types_status();
  const snapkv::Tokenizer tok = snapkv::Tokenizer::from_gguf(model.file());
  const std::vector<int32_t> tokens = tok.encode(prompt);
  snapkv::CacheConfig c = snapkv::parse_method("duo-snapkv", snapkv::CacheConfig{}).config;
  c.budget = snapkv::budget_for(0.2, tokens.size(), c);
  snapkv::LlamaSession session(model, c);
  snapkv::GenerationConfig g;
  g.max_tokens = 8;
  const snapkv::GenerationResult want =
      snapkv::generate(session, session.prefill(tokens), tok, g, tokens);
  EXPECT_EQ(got.text, want.text);
  EXPECT_EQ(r.cache.bytes_stored, session.cache_stats().bytes_stored);
  EXPECT_NE(got.text.find("71432"), std::string::npos) << got.text;

  const std::string doc_text = prompt.substr(0, prompt.rfind("What"));
  snapkv_doc* doc = nullptr;
  ASSERT_EQ(snapkv_doc_compress(m.p, doc_text.c_str(), "method=kvzip_plus keep=0.2", &doc),
            SNAPKV_OK)
      << snapkv_last_error();
  std::string answer;
  expect_kvc_round_trip(m.p, doc, "capi_kvzip_plus", &answer);
  EXPECT_NE(answer.find("71432"), std::string::npos) << answer;
  snapkv_doc_free(doc);
}

// A copy of the shipped model in a directory of its own has neither sidecar beside it: duo- and
// kvzap methods are refused with a message naming what is missing; other methods still work.
TEST(CApiModel, ModelWithoutSidecarsRefusesDuoAndKvzapByName) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("snapkv_capi_sidecars_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(kModel, dir / "bare.gguf", fs::copy_options::overwrite_existing);
  snapkv_model* bare = nullptr;
  ASSERT_EQ(snapkv_model_load((dir / "bare.gguf").c_str(), &bare), SNAPKV_OK)
      << snapkv_last_error();
  const std::string prompt = passkey_prompt();
  snapkv_generation_params params;
  snapkv_generation_params_default(&params);
  params.max_tokens = 4;
  Collected got;
  EXPECT_EQ(snapkv_generate(bare, prompt.c_str(), "method=duo-snapkv keep=0.2", &params, collect,
                            &got, nullptr),
            SNAPKV_INVALID_ARGUMENT);
  std::string error = snapkv_last_error();
  EXPECT_NE(error.find("needs head types"), std::string::npos) << error;
  EXPECT_NE(error.find((dir / "bare.heads.gguf").string()), std::string::npos) << error;
  EXPECT_NE(error.find("snapkv find-heads"), std::string::npos) << error;
  snapkv_doc* doc = nullptr;
  EXPECT_EQ(snapkv_doc_compress(bare, prompt.c_str(), "method=kvzap keep=0.2", &doc),
            SNAPKV_INVALID_ARGUMENT);
  EXPECT_EQ(doc, nullptr);
  error = snapkv_last_error();
  EXPECT_NE(error.find("needs scorer weights"), std::string::npos) << error;
  EXPECT_NE(error.find((dir / "bare.kvzap.gguf").string()), std::string::npos) << error;
  EXPECT_EQ(snapkv_generate(bare, prompt.c_str(), "method=kvzap-snapkv keep=0.2", &params, collect,
                            &got, nullptr),
            SNAPKV_INVALID_ARGUMENT);
  error = snapkv_last_error();
  EXPECT_NE(error.find("policy kvzap_snapkv needs scorer weights"), std::string::npos) << error;
  EXPECT_EQ(snapkv_generate(bare, prompt.c_str(), "method=kvzip_plus keep=0.2", &params, collect,
                            &got, nullptr),
            SNAPKV_OK)
      << snapkv_last_error();
  EXPECT_FALSE(got.text.empty());
  snapkv_model_free(bare);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(CApiModel, TokenizeVersionAndMisuse) {
  Model m;
  ASSERT_NE(m.p, nullptr);
  int32_t ids[64];
  size_t n = 0;
  ASSERT_EQ(snapkv_tokenize(m.p, "The pass key is 71432.", 1, ids, 64, &n), SNAPKV_OK);
  EXPECT_EQ(ids[0], 1);  // BOS
  char text[64];
  size_t len = 0;
  ASSERT_EQ(snapkv_detokenize(m.p, ids, n, text, sizeof text, &len), SNAPKV_OK);
  EXPECT_STREQ(text, "The pass key is 71432.");
  snapkv_model_dims d{};
  ASSERT_EQ(snapkv_model_dims_of(m.p, &d), SNAPKV_OK);
  EXPECT_EQ(d.n_layers, 4u);
  EXPECT_EQ(d.head_dim, 32u);
  EXPECT_EQ(snapkv_version_number(), SNAPKV_VERSION_NUMBER);
  EXPECT_STREQ(snapkv_version(), SNAPKV_VERSION_STRING);
  snapkv_model* none = nullptr;
  EXPECT_EQ(snapkv_model_load("/nonexistent.gguf", &none), SNAPKV_RUNTIME_ERROR);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(snapkv_generate(nullptr, "x", nullptr, nullptr, nullptr, nullptr, nullptr),
            SNAPKV_INVALID_ARGUMENT);
  EXPECT_EQ(snapkv_generate(m.p, "", nullptr, nullptr, nullptr, nullptr, nullptr),
            SNAPKV_INVALID_ARGUMENT);
  EXPECT_EQ(snapkv_generate(m.p, "x", "windw=3", nullptr, nullptr, nullptr, nullptr),
            SNAPKV_INVALID_ARGUMENT);
  EXPECT_NE(std::string(snapkv_last_error()).find("unknown config key"), std::string::npos);
  snapkv_generation_params p;
  snapkv_generation_params_default(&p);
  p.max_tokens = 0;
  EXPECT_EQ(snapkv_generate(m.p, "x", nullptr, &p, nullptr, nullptr, nullptr),
            SNAPKV_INVALID_ARGUMENT);
}

}  // namespace
