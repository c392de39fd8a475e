// Compress once, ask many (model/prompt_cache.h): a prompt cache written to a .kvc file, read back
// and asked a question answers bit for bit like the in-process question-agnostic path of the
// evaluation harness (run_sample with Protocol::question_agnostic), for every policy x codec; the
// loaded cache is not changed by the questions asked of it; a cache for another model is refused.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "eval/tiny_model.h"
#include "snapkv/eval/harness.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/model/prompt_cache.h"

namespace snapkv::eval {
namespace {

using test::tiny_model;

struct Fixture {
  Sample sample;
  PromptTokens prompt;
};

Fixture passkey(size_t context, uint64_t seed) {
  const auto& m = tiny_model();
  TaskOptions options;
  options.context_tokens = context;
  options.seed = seed;
  const TokenCounter counter = [&m](std::string_view t) {
    return m.tokenizer.encode(t, false).size();
  };
  Fixture f;
  f.sample = generate_sample(Task::passkey, options, 0, counter);
  f.prompt = tokenize_prompt(m.tokenizer, f.sample);
  return f;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("snapkv_pc_" + std::to_string(::getpid()) + "_" + name + ".kvc"))
      .string();
}

TEST(PromptCache, AskFromFileEqualsTheInProcessQuestionAgnosticPath) {
  const auto& m = tiny_model();
  const Fixture f = passkey(340, 21);
  RunSettings settings;
  settings.protocol = Protocol::question_agnostic;
  settings.max_new_tokens = 5;
  CacheConfig defaults;
  defaults.window = 8;
  const std::string path = temp_path("roundtrip");
  for (const char* codec : {"fp16", "kivi2", "kivi4"}) {
    // One prefill of the context per codec, forked per policy (SharedPrefill; the harness and
    // shared_prefill_test hold a fork equal to a dedicated run bit for bit), and one dedicated
    // run_sample per codec on top, so the reference is also the plain in-process path.
    const std::string codec_suffix = std::string(codec) == "fp16" ? "" : "+" + std::string(codec);
    CacheConfig base = parse_method("snapkv" + codec_suffix, defaults).config;
    base.budget = budget_for(0.2, f.prompt.context.size(), base);
    const SharedPrefill shared(m.model, f.prompt, base, settings);
    for (const char* policy :
         {"full", "snapkv", "snapkv-proxy", "streaming", "chunkkv", "knorm", "random"}) {
      const std::string name = policy + codec_suffix;
      CacheConfig config = parse_method(name, defaults).config;
      config.budget = budget_for(0.2, f.prompt.context.size(), config);
      const bool dedicated = std::string(policy) == "snapkv";
      const SampleRun reference =
          dedicated ? run_sample(m.model, m.tokenizer, f.prompt, f.sample.answers, config, settings)
                    : run_sample(shared, m.tokenizer, f.prompt, f.sample.answers, config, settings);
      LlamaSession in_process = shared.session.fork(config);
      save_prompt_cache(path, in_process, f.prompt.context);  // compress
      // The question's logits in process, to compare bit for bit (stronger than the arg-max).
      const std::vector<float> want_logits = in_process.extend(f.prompt.question);
      const PromptCache loaded =
          load_prompt_cache(m.model, path, SessionOptions{settings.prefill_chunk});
      EXPECT_EQ(loaded.tokens, f.prompt.context) << name;
      EXPECT_EQ(loaded.file_bytes, std::filesystem::file_size(path)) << name;
      EXPECT_EQ(loaded.session.cache_stats().bytes_stored, reference.after_context.bytes_stored)
          << name;
      EXPECT_EQ(loaded.session.cache_stats().tokens_kept, reference.after_context.tokens_kept)
          << name;
      for (int ask = 0; ask < 2; ++ask) {  // the same question twice: the loaded cache is intact
        LlamaSession session = loaded.session.clone();
        std::vector<float> logits = session.extend(f.prompt.question);
        EXPECT_EQ(logits, want_logits) << name << " ask " << ask;
        EXPECT_EQ(session.cache_stats().bytes_stored, reference.after_prompt.bytes_stored) << name;
        const GreedyAnswer answer =
            answer_greedy(session, std::move(logits), m.tokenizer, settings.max_new_tokens, true);
        EXPECT_EQ(answer.tokens, reference.generated) << name << " ask " << ask;
        EXPECT_EQ(answer.text, reference.prediction) << name << " ask " << ask;
        EXPECT_EQ(answer.decode_steps, reference.decode_steps) << name;
        EXPECT_EQ(session.cache_stats().bytes_stored, reference.after_decode.bytes_stored) << name;
      }
    }
  }
  std::filesystem::remove(path);
}

TEST(PromptCache, ACacheForAnotherModelIsRefused) {
  const auto& m = tiny_model();
  const Fixture f = passkey(400, 5);
  CacheConfig config;
  config.chunk_mode = ChunkMode::end_of_prompt;
  config.budget = 40;
  config.window = 8;
  LlamaSession session(m.model, config);
  session.prefill(f.prompt.context);
  const std::string path = temp_path("other_model");
  ModelFingerprint other = model_fingerprint(m.model);
  other[0] ^= 1;
  write_kvc(path, other, f.prompt.context, session.caches());
  try {
    (void)load_prompt_cache(m.model, path);
    ADD_FAILURE() << "a cache with another fingerprint was accepted";
  } catch (const KvcError& e) {
    EXPECT_EQ(e.kind(), KvcErrorKind::wrong_model) << e.what();
  }
  save_prompt_cache(path, session, f.prompt.context);
  EXPECT_NO_THROW((void)load_prompt_cache(m.model, path));
  // A session that ran past its prompt cannot be saved as a prompt cache.
  session.decode(5);
  EXPECT_THROW(save_prompt_cache(path, session, f.prompt.context), std::invalid_argument);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace snapkv::eval
