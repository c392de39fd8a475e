// `snapkv serve` through real HTTP on a loopback port chosen by the test: completions (plain,
// streamed, chat rendered with the model's chat template, chat on a cached document) equal the
// in-process greedy answers, a model without a template refuses chat unless --no-chat, a
// compressed document is created, used, listed and deleted, malformed requests get 4xx JSON
// errors, and a request beyond the concurrency limit gets a 503 while the first one still
// completes.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "eval/tiny_model.h"
#include "model/chat_model_util.h"
#include "serve/running_server.h"
#include "snapkv/gguf/gguf.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/model/chat_template.h"
#include "snapkv/model/prompt_cache.h"
#include "snapkv/serve/server.h"

namespace snapkv::serve {
namespace {

using nlohmann::json;
using test::post;
using test::Running;
using test::tiny_model;

const char* kDocument =
    "The grass is green. The sky is blue. The pass key is 48213. Remember it. The sun is yellow. "
    "Here we go. There and back again. 48213 is the pass key. The grass is green.";

// Text as the server sends it: JSON strings carry invalid UTF-8 bytes (byte tokens of a model
// with random-like weights) as U+FFFD.
std::string as_sent(const std::string& text) {
  return json::parse(json(text).dump(-1, ' ', false, json::error_handler_t::replace))
      .get<std::string>();
}

// What the server should answer for `prompt` without a cache: the default method at the default
// keep, the prompt prefilled with BOS, greedy until EOS or max_tokens.
GreedyAnswer in_process(const ServerOptions& o, const std::string& prompt, size_t max_tokens) {
  const auto& m = tiny_model();
  CacheConfig defaults = o.defaults;
  defaults.window = 8;
  CacheConfig config = parse_method(o.default_method, defaults).config;
  const std::vector<int32_t> tokens = m.tokenizer.encode(prompt, true);
  config.budget = budget_for(o.default_keep, tokens.size(), config);
  LlamaSession session(m.model, config);
  std::vector<float> logits = session.prefill(tokens);
  return answer_greedy(session, std::move(logits), m.tokenizer, max_tokens, false);
}

TEST(Serve, HealthModelsAndCompletions) {
  ServerOptions o;
  Running server(o);
  httplib::Client c = server.client();
  const auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
  const auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], o.model_id);

  const std::string prompt = "The pass key is 48213. What is the pass key? The pass key is";
  const GreedyAnswer want = in_process(o, prompt, 6);
  const json plain = post(c, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 6}});
  EXPECT_EQ(plain["choices"][0]["text"].get<std::string>(), as_sent(want.text));
  EXPECT_EQ(plain["usage"]["completion_tokens"].get<size_t>(), want.tokens.size());
  EXPECT_EQ(plain["object"], "text_completion");
  EXPECT_GT(plain["usage"]["prompt_tokens"].get<size_t>(), 0u);

  // Streamed: the pieces of the data events add up to the same text, then [DONE].
  const auto streamed = c.Post("/v1/completions",
                               json{{"prompt", prompt}, {"max_tokens", 6}, {"stream", true}}.dump(),
                               "application/json");
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->status, 200);
  EXPECT_NE(streamed->get_header_value("Content-Type").find("text/event-stream"),
            std::string::npos);
  std::string text, last_line;
  size_t events = 0;
  for (size_t at = 0; at < streamed->body.size();) {
    const size_t end = streamed->body.find("\n\n", at);
    ASSERT_NE(end, std::string::npos) << streamed->body;
    const std::string line = streamed->body.substr(at, end - at);
    ASSERT_EQ(line.rfind("data: ", 0), 0u) << line;
    last_line = line;
    if (line != "data: [DONE]") {
      text += json::parse(line.substr(6))["choices"][0]["text"].get<std::string>();
      ++events;
    }
    at = end + 2;
  }
  EXPECT_EQ(last_line, "data: [DONE]");
  std::string want_stream;  // each event's piece is a JSON string of its own
  for (const int32_t t : want.tokens) {
    want_stream += as_sent(tiny_model().tokenizer.token_to_piece(t));
  }
  EXPECT_EQ(text, want_stream);
  EXPECT_EQ(events, want.tokens.size() + 1);  // one per token, then the finish event

  // Chat on a model without a chat template: a 400 that says why and names --no-chat.
  const json no_template =
      post(c, "/v1/chat/completions",
           {{"messages", {{{"role", "user"}, {"content", prompt}}}}, {"max_tokens", 6}}, 400);
  EXPECT_EQ(no_template["error"]["type"], "chat_template_unsupported");
  EXPECT_NE(no_template["error"]["message"].get<std::string>().find("--no-chat"),
            std::string::npos);
}

// The shipped model with a chat template (model/chat_model_util.h), loaded once.
struct TemplatedModel {
  LlamaModel model;
  Tokenizer tokenizer;
  ChatTemplate chat_template;
  explicit TemplatedModel(std::string_view tmpl)
      : model(gguf::File::from_bytes(snapkv::testing::tiny_model_with_template(tmpl))),
        tokenizer(Tokenizer::from_gguf(model.file())),
        chat_template(ChatTemplate::from_gguf(model.file())) {}
};

// The default method at the default keep over `tokens`, greedy (the server's uncached path).
GreedyAnswer in_process_tokens(const ServerOptions& o, const LlamaModel& model,
                               const Tokenizer& tokenizer, const std::vector<int32_t>& tokens,
                               size_t max_tokens) {
  CacheConfig defaults = o.defaults;
  defaults.window = 8;
  CacheConfig config = parse_method(o.default_method, defaults).config;
  config.budget = budget_for(o.default_keep, tokens.size(), config);
  LlamaSession session(model, config);
  std::vector<float> logits = session.prefill(tokens);
  return answer_greedy(session, std::move(logits), tokenizer, max_tokens, false);
}

TEST(Serve, ChatRendersMessagesWithTheModelsTemplate) {
  static const TemplatedModel m(snapkv::testing::kChatmlTemplate);
  ServerOptions o;
  Running server(o, m.model, m.tokenizer);
  httplib::Client c = server.client();
  const std::vector<ChatMessage> messages = {{"system", "You answer briefly."},
                                             {"user", "The pass key is 48213. What is it?"}};
  json body_messages = json::array();
  for (const ChatMessage& msg : messages) {
    body_messages.push_back({{"role", msg.role}, {"content", msg.content}});
  }
  const std::vector<int32_t> tokens =
      m.tokenizer.encode(m.chat_template.render(messages), false, true);
  const GreedyAnswer want = in_process_tokens(o, m.model, m.tokenizer, tokens, 6);
  const json chat =
      post(c, "/v1/chat/completions", {{"messages", body_messages}, {"max_tokens", 6}});
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"].get<std::string>(), as_sent(want.text));
  EXPECT_EQ(chat["usage"]["prompt_tokens"].get<size_t>(), tokens.size());

  // Streamed: the deltas add up to the same answer.
  const auto streamed =
      c.Post("/v1/chat/completions",
             json{{"messages", body_messages}, {"max_tokens", 6}, {"stream", true}}.dump(),
             "application/json");
  ASSERT_TRUE(streamed);
  std::string text;
  for (size_t at = 0; at < streamed->body.size();) {
    const size_t end = streamed->body.find("\n\n", at);
    ASSERT_NE(end, std::string::npos) << streamed->body;
    const std::string line = streamed->body.substr(at, end - at);
    if (line != "data: [DONE]") {
      const json delta = json::parse(line.substr(6))["choices"][0]["delta"];
      if (delta.contains("content")) text += delta["content"].get<std::string>();
    }
    at = end + 2;
  }
  std::string want_stream;
  for (const int32_t t : want.tokens) want_stream += as_sent(m.tokenizer.token_to_piece(t));
  EXPECT_EQ(text, want_stream);

  // --no-chat: the same messages as plain text, one per line, with BOS.
  ServerOptions plain = o;
  plain.chat_template = false;
  Running plain_server(plain, m.model, m.tokenizer);
  httplib::Client pc = plain_server.client();
  const std::vector<int32_t> plain_tokens =
      m.tokenizer.encode(messages[0].content + "\n" + messages[1].content + "\n", true);
  const json got =
      post(pc, "/v1/chat/completions", {{"messages", body_messages}, {"max_tokens", 6}});
  EXPECT_EQ(got["choices"][0]["message"]["content"].get<std::string>(),
            as_sent(in_process_tokens(o, m.model, m.tokenizer, plain_tokens, 6).text));
}

// A chat question about a cached document: the render (Llama 3 writes the BOS text, which is
// dropped after the document's own BOS) appended to a copy of the compressed document.
TEST(Serve, ChatOnACachedDocumentAppendsTheRender) {
  static const TemplatedModel m(snapkv::testing::kLlama3Template);
  ServerOptions o;
  Running server(o, m.model, m.tokenizer);
  httplib::Client c = server.client();
  const json created =
      post(c, "/v1/caches", {{"document", kDocument}, {"method", "snapkv"}, {"keep", 0.5}});
  const std::string id = created["id"].get<std::string>();

  const std::vector<ChatMessage> messages = {{"user", "What is the pass key?"}};
  std::vector<int32_t> question = m.tokenizer.encode(m.chat_template.render(messages), false, true);
  ASSERT_FALSE(question.empty());
  ASSERT_EQ(question.front(), m.tokenizer.bos()) << "the Llama 3 render starts with BOS";
  question.erase(question.begin());
  CacheConfig defaults = o.defaults;
  defaults.window = 8;
  CacheConfig config = parse_method("snapkv", defaults).config;
  const std::vector<int32_t> doc = m.tokenizer.encode(kDocument, true);
  config.budget = budget_for(0.5, doc.size(), config);
  LlamaSession s(m.model, config);
  s.prefill(doc);
  std::vector<float> logits = s.extend(question);
  const std::string want = answer_greedy(s, std::move(logits), m.tokenizer, 5, false).text;
  const json got = post(c, "/v1/chat/completions",
                        {{"messages", {{{"role", "user"}, {"content", messages[0].content}}}},
                         {"max_tokens", 5},
                         {"cache_id", id}});
  EXPECT_EQ(got["choices"][0]["message"]["content"].get<std::string>(), as_sent(want));
  EXPECT_EQ(got["usage"]["prompt_tokens"].get<size_t>(), doc.size() + question.size());
}

TEST(Serve, CachesAreCreatedUsedAndDeleted) {
  ServerOptions o;
  Running server(o);
  httplib::Client c = server.client();
  const json created =
      post(c, "/v1/caches", {{"document", kDocument}, {"method", "snapkv+kivi2"}, {"keep", 0.5}});
  const std::string id = created["id"].get<std::string>();
  EXPECT_EQ(created["codec"], "kivi2");
  EXPECT_LT(created["kv_bytes"].get<size_t>(), created["kv_bytes_full_fp16"].get<size_t>());

  // The in-process answer: the document prefilled and compressed alone, the question appended.
  const auto& m = tiny_model();
  CacheConfig defaults = o.defaults;
  defaults.window = 8;
  CacheConfig config = parse_method("snapkv+kivi2", defaults).config;
  const std::vector<int32_t> doc = m.tokenizer.encode(kDocument, true);
  config.budget = budget_for(0.5, doc.size(), config);
  LlamaSession base(m.model, config);
  base.prefill(doc);
  const std::string question = " What is the pass key? The pass key is";
  for (int ask = 0; ask < 2; ++ask) {  // twice: the cached document is not changed by a request
    LlamaSession s = base.clone();
    std::vector<float> logits = s.extend(m.tokenizer.encode(question, false));
    const std::string want = answer_greedy(s, std::move(logits), m.tokenizer, 5, false).text;
    const json got =
        post(c, "/v1/completions", {{"prompt", question}, {"max_tokens", 5}, {"cache_id", id}});
    EXPECT_EQ(got["choices"][0]["text"].get<std::string>(), as_sent(want)) << ask;
  }
  const auto listed = c.Get("/v1/caches");
  ASSERT_TRUE(listed);
  EXPECT_EQ(json::parse(listed->body)["data"].size(), 1u);
  const auto one = c.Get("/v1/caches/" + id);
  ASSERT_TRUE(one);
  EXPECT_EQ(json::parse(one->body)["prompt_tokens"].get<size_t>(), doc.size());
  const auto deleted = c.Delete("/v1/caches/" + id);
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->status, 200);
  const auto gone = c.Get("/v1/caches/" + id);
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 404);
  post(c, "/v1/completions", {{"prompt", question}, {"cache_id", id}}, 404);
  const auto again = c.Delete("/v1/caches/" + id);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 404);
}

TEST(Serve, MalformedRequestsGetJsonErrors) {
  ServerOptions o;
  o.max_body_bytes = 4096;
  Running server(o);
  httplib::Client c = server.client();
  const auto expect_error = [&c](const std::string& path, const std::string& body, int status,
                                 const std::string& what) {
    const auto res = c.Post(path, body, "application/json");
    ASSERT_TRUE(res) << what;
    EXPECT_EQ(res->status, status) << what << ": " << res->body;
    const json j = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << what << ": " << res->body;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty()) << what;
    EXPECT_EQ(j["error"]["code"], status) << what;
  };
  expect_error("/v1/completions", "{\"prompt\": ", 400, "malformed JSON");
  expect_error("/v1/completions", "[1, 2]", 400, "not an object");
  expect_error("/v1/completions", R"({"prompt": "hi", "frobnicate": 1})", 400, "unknown field");
  expect_error("/v1/completions", R"({"prompt": 7})", 400, "mistyped prompt");
  expect_error("/v1/completions", R"({"max_tokens": 3})", 400, "missing prompt");
  expect_error("/v1/completions", R"({"prompt": "hi", "max_tokens": -2})", 400, "negative count");
  expect_error("/v1/completions", R"({"prompt": "hi", "method": "nosuch"})", 400, "bad method");
  expect_error("/v1/completions", R"({"prompt": "hi", "keep": 1.5})", 400, "bad keep");
  expect_error("/v1/completions", R"({"prompt": "hi", "cache_id": "cache-nope"})", 404,
               "unknown cache id");
  expect_error("/v1/chat/completions", R"({"messages": []})", 400, "no messages");
  expect_error("/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "x"}]})", 400,
               "bad role");
  expect_error("/v1/caches", R"({"document": "x", "save": true})", 400, "save without a dir");
  expect_error("/v1/completions", json{{"prompt", std::string(5000, 'a')}}.dump(), 413,
               "oversized body");
  // 1000 words of 3 tokens or so: longer than the tiny model's 2048-token context.
  std::string long_prompt;
  for (int i = 0; i < 1000; ++i) long_prompt += "zq7 ";
  expect_error("/v1/completions", json{{"prompt", long_prompt}}.dump(), 400, "over-long prompt");
  expect_error("/v1/completions", R"({"prompt": "hi", "max_tokens": 2048})", 400,
               "prompt + max_tokens over the context");
  expect_error("/v1/completions", R"({"prompt": "hi", "max_tokens": 18446744073709551615})", 400,
               "max_tokens 2^64-1");
  expect_error("/v1/completions", R"({"prompt": "hi", "n": 9})", 400, "n over --max-n");
  expect_error("/v1/completions", R"({"prompt": "hi", "n": 0})", 400, "n 0");
  expect_error("/v1/completions", R"({"prompt": "hi", "cache_id": ""})", 400, "empty cache_id");
  expect_error("/v1/completions", R"({"prompt": "hi", "stop": [""]})", 400, "empty stop");
  expect_error("/v1/completions", R"({"prompt": "hi", "temperature": 3})", 400, "temperature");
  expect_error("/v1/completions", R"({"prompt": "hi", "logprobs": 21})", 400, "logprobs > 20");
  expect_error("/v1/completions", R"({"prompt": [99999999]})", 400, "token id outside vocab");
  expect_error("/v1/chat/completions",
               R"({"messages": [{"role": "user", "content": "x"}], "tools": [],
                   "tool_choice": "required"})",
               400, "a required tool call");
  expect_error("/v1/chat/completions",
               R"({"messages": [{"role": "user", "content": "x"}],
                   "response_format": {"type": "json_object"}})",
               400, "JSON output");
  expect_error("/v1/chat/completions",
               R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400,
               "an image part");
  expect_error("/v1/chat/completions",
               R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", 400,
               "top_logprobs without logprobs");
  expect_error("/v1/chat/completions", R"({"messages": [{"role": "tool", "content": "x"}]})", 400,
               "a tool message");
  expect_error("/v1/nothing", "{}", 404, "unknown route");
}

TEST(Serve, RequestsBeyondTheWorkersQueueAndBeyondTheQueueGet503) {
  std::mutex mutex;
  std::condition_variable cv;
  bool entered = false, released = false;
  std::atomic<int> calls{0};
  ServerOptions o;
  o.max_concurrent = 1;
  o.max_queue = 1;
  o.on_slot_taken = [&] {
    if (calls.fetch_add(1) != 0) return;  // hold only the first request's slot
    std::unique_lock<std::mutex> lock(mutex);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  };
  Running server(o);
  int first_status = 0, second_status = 0;
  std::thread first([&] {
    httplib::Client c = server.client();
    const auto res =
        c.Post("/v1/completions", R"({"prompt": "hello", "max_tokens": 2})", "application/json");
    first_status = res ? res->status : -1;
  });
  bool held = false;
  {
    std::unique_lock<std::mutex> lock(mutex);
    held = cv.wait_for(lock, std::chrono::seconds(30), [&] { return entered; });
  }
  EXPECT_TRUE(held) << "the first request never took its slot";
  std::thread second([&] {
    httplib::Client c = server.client();
    const auto res =
        c.Post("/v1/completions", R"({"prompt": "hello", "max_tokens": 2})", "application/json");
    second_status = res ? res->status : -1;
  });
  httplib::Client c = server.client();
  if (held) {
    // The second request waits in the queue (depth 1 on /metrics); a third finds it full.
    bool queued = false;
    for (int i = 0; i < 300 && !queued; ++i) {
      const auto m = c.Get("/metrics");
      queued = m && m->body.find("\nsnapkv_queue_depth 1\n") != std::string::npos;
      if (!queued) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(queued) << "the second request never entered the queue";
    const auto busy =
        c.Post("/v1/completions", R"({"prompt": "hi", "max_tokens": 1})", "application/json");
    ASSERT_TRUE(busy);
    EXPECT_EQ(busy->status, 503);
    EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
    EXPECT_EQ(json::parse(busy->body)["error"]["type"], "server_busy");
    const auto health = c.Get("/health");  // health needs no worker
    EXPECT_TRUE(health && health->status == 200);
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    released = true;
  }
  cv.notify_all();
  first.join();
  second.join();
  EXPECT_EQ(first_status, 200);
  EXPECT_EQ(second_status, 200);
  post(c, "/v1/completions", {{"prompt", "hi"}, {"max_tokens", 1}}, 200);  // the slot came back
}

}  // namespace
}  // namespace snapkv::serve
