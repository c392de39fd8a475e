// The server's HTTP behaviour beyond single completions, through real sockets on loopback:
// prompt tokens follow the vocabulary's add_bos flag, 8 concurrent clients all get answers from
// 2 workers and the queue, /tokenize, /detokenize and /metrics, API keys, idle and half-sent
// connections that never hold a model worker, keep-alive, a client leaving a
// stream frees its worker, and stop() returns within 2 s while a generation runs.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "model/chat_model_util.h"
#include "serve/raw_socket.h"
#include "serve/running_server.h"
#include "snapkv/gguf/gguf.h"
#include "snapkv/model/sampler.h"

namespace snapkv::serve {
namespace {

using nlohmann::json;
using test::post;
using test::post_until_ok;
using test::RawSocket;
using test::Running;
using test::seconds_since;
using test::tiny_model;
using Clock = std::chrono::steady_clock;

std::vector<uint8_t> tiny_model_without_bos() {
  const gguf::File src = gguf::File::open(snapkv::testing::tiny_model_path());
  gguf::Writer w;
  for (const gguf::KeyValue& kv : src.metadata()) {
    if (kv.key != "tokenizer.ggml.add_bos_token") w.set(kv.key, kv.value);
  }
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  for (const gguf::TensorInfo& t : src.tensors()) {
    w.add_tensor(t.name, t.type, t.ne, std::span<const uint8_t>(t.data, t.n_bytes), true);
  }
  return w.to_bytes();
}

TEST(ServeHttp, PromptTokensAddBosOnlyWhereTheVocabularySaysSo) {
  const std::string text = "Hello world";
  {
    Running server(ServerOptions{});
    httplib::Client c = server.client();
    const json r = post(c, "/v1/completions", {{"prompt", text}, {"max_tokens", 1}});
    EXPECT_EQ(r["usage"]["prompt_tokens"], tiny_model().tokenizer.encode(text, true).size());
    const json t = post(c, "/tokenize", {{"content", text}});
    EXPECT_EQ(t["tokens"].size(), r["usage"]["prompt_tokens"].get<size_t>());
    EXPECT_EQ(t["tokens"][0], tiny_model().tokenizer.bos());
  }
  const LlamaModel model(gguf::File::from_bytes(tiny_model_without_bos()));
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  ASSERT_FALSE(tokenizer.vocab().add_bos);
  Running server(ServerOptions{}, model, tokenizer);
  httplib::Client c = server.client();
  const json r = post(c, "/v1/completions", {{"prompt", text}, {"max_tokens", 1}});
  const std::vector<int32_t> plain = tokenizer.encode(text, false);
  EXPECT_EQ(r["usage"]["prompt_tokens"], plain.size());
  const json t = post(c, "/tokenize", {{"content", text}, {"with_pieces", true}});
  ASSERT_EQ(t["tokens"].size(), plain.size());
  EXPECT_EQ(t["tokens"][0]["id"], plain[0]);
  const json d = post(c, "/detokenize", {{"tokens", plain}});
  EXPECT_EQ(d["content"], text);
  post(c, "/detokenize", {{"tokens", {1u << 30}}}, 400);
}

// logit_bias and ignore_eos through the server: a +100 bias on the end token ends the answer at
// once ("stop", no tokens); ignore_eos bans it, so the same request runs to max_tokens; a -100
// bias moves the greedy first token; bad maps are 400s naming the field.
TEST(ServeHttp, LogitBiasAndIgnoreEos) {
  Running server(ServerOptions{});
  httplib::Client c = server.client();
  const std::string eos = std::to_string(tiny_model().tokenizer.eos());
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 6}};
  json ends = base;
  ends["logit_bias"] = {{eos, 100}};
  const json r1 = post(c, "/v1/completions", ends);
  EXPECT_EQ(r1["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r1["usage"]["completion_tokens"], 0);
  json runs = ends;
  runs["ignore_eos"] = true;
  const json r2 = post(c, "/v1/completions", runs);
  EXPECT_EQ(r2["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r2["usage"]["completion_tokens"], 6);

  // The greedy first token, from the library on the full cache; the server is asked the same.
  LlamaSession session(tiny_model().model, CacheConfig{});
  const int32_t first =
      argmax(session.prefill(tiny_model().tokenizer.encode("Once upon a time", true)));
  json one = base;
  one["max_tokens"] = 1;
  one["method"] = "full";
  const json plain = post(c, "/v1/completions", one);
  EXPECT_EQ(plain["choices"][0]["text"], tiny_model().tokenizer.token_to_piece(first));
  json moved = one;
  moved["logit_bias"] = {{std::to_string(first), -100}};
  EXPECT_NE(post(c, "/v1/completions", moved)["choices"][0]["text"], plain["choices"][0]["text"]);
  moved["logit_bias"] = {{std::to_string(first), false}};  // llama-server's ban
  EXPECT_NE(post(c, "/v1/completions", moved)["choices"][0]["text"], plain["choices"][0]["text"]);

  for (const json& bad :
       {json{{"x", 1}}, json{{"-1", 1}}, json{{"1", 101}}, json{{"1", "a"}}, json{{"1", true}},
        json(5), json{{std::to_string(tiny_model().tokenizer.n_vocab()), 1}}}) {
    json b = base;
    b["logit_bias"] = bad;
    const json e = post(c, "/v1/completions", b, 400);
    EXPECT_NE(e.dump().find("logit_bias"), std::string::npos) << bad.dump();
  }
  json b = base;
  b["ignore_eos"] = "yes";
  post(c, "/v1/completions", b, 400);
}

TEST(ServeHttp, EightConcurrentClientsAllServedThroughTheQueue) {
  ServerOptions o;
  o.max_concurrent = 2;
  Running server(o);
  constexpr int kClients = 8, kRequests = 4;
  std::atomic<int> ok{0}, failed{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      httplib::Client c = server.client();
      for (int k = 0; k < kRequests; ++k) {
        const json body = {
            {"prompt", "Client " + std::to_string(i)}, {"max_tokens", 4}, {"stream", k % 2 == 1}};
        const auto res = c.Post("/v1/completions", body.dump(), "application/json");
        (res && res->status == 200 ? ok : failed).fetch_add(1);
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(ok.load(), kClients * kRequests);
  httplib::Client c = server.client();
  for (const char* made_up : {"/nope-1", "/nope-2"}) {
    const auto res = c.Get(made_up);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 404);
  }
  // A request is counted once its response is written, a moment after the client has it.
  const std::string all_done = "snapkv_requests_total{route=\"/v1/completions\",status=\"200\"} " +
                               std::to_string(kClients * kRequests) + "\n";
  httplib::Result m = c.Get("/metrics");
  const std::string made_up_counted = "snapkv_requests_total{route=\"other\",status=\"404\"} 2\n";
  for (int i = 0; i < 100 && m &&
                  (m->body.find(all_done) == std::string::npos ||
                   m->body.find(made_up_counted) == std::string::npos);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    m = c.Get("/metrics");
  }
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->body.find("# TYPE snapkv_requests_total counter"), std::string::npos);
  EXPECT_NE(m->body.find("snapkv_requests_total{route=\"/v1/completions\",status=\"200\"} " +
                         std::to_string(kClients * kRequests) + "\n"),
            std::string::npos)
      << m->body;
  // Made-up paths are counted under one label, so they cannot grow the counters.
  EXPECT_NE(m->body.find(made_up_counted), std::string::npos) << m->body;
  EXPECT_EQ(m->body.find("nope"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("\nsnapkv_generated_tokens_total " +
                         std::to_string(kClients * kRequests * 4) + "\n"),
            std::string::npos)
      << m->body;
}

TEST(ServeHttp, DocumentsDefaultToTheQuestionAgnosticMethod) {
  Running server(ServerOptions{});
  httplib::Client c = server.client();
  const json doc = post(c, "/v1/caches", {{"document", "The pass key is 48213. Remember it."}});
  EXPECT_EQ(doc["method"], std::string(kDefaultDocumentMethod));
  const json r = post(c, "/v1/completions",
                      {{"prompt", " The pass key is"}, {"max_tokens", 2}, {"cache_id", doc["id"]}});
  EXPECT_EQ(r["snapkv"]["reused"], true);
  EXPECT_EQ(r["snapkv"]["method"], std::string(kDefaultDocumentMethod));
  EXPECT_EQ(r["usage"]["prompt_tokens"],
            doc["prompt_tokens"].get<size_t>() +
                tiny_model().tokenizer.encode(" The pass key is", false).size());
}

TEST(ServeHttp, ApiKeyGuardsEveryRouteButHealth) {
  ServerOptions o;
  o.api_keys = {"k1", "second-key"};
  Running server(o);
  httplib::Client c = server.client();
  for (const char* path : {"/v1/models", "/metrics", "/v1/caches"}) {
    const auto res = c.Get(path);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401) << path;
    EXPECT_EQ(json::parse(res->body)["error"]["type"], "invalid_api_key") << path;
  }
  const auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const auto wrong = c.Get("/v1/models", {{"Authorization", "Bearer k2"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  for (const char* key : {"k1", "second-key"}) {
    const auto res = c.Get("/v1/models", {{"Authorization", std::string("Bearer ") + key}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << key;
  }
}

TEST(ServeHttp, IdleAndHalfSentConnectionsNeverBlockARequest) {
  ServerOptions o;
  o.max_concurrent = 1;
  o.max_connections = 64;
  o.read_timeout_s = 1.0;
  Running server(o);
  // 40 connections: half open and silent, half with a request head cut off mid-way.
  std::vector<std::unique_ptr<RawSocket>> idle;
  for (int i = 0; i < 40; ++i) {
    idle.push_back(std::make_unique<RawSocket>(server.port()));
    ASSERT_TRUE(idle.back()->connected());
    if (i % 2 == 1) idle.back()->send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le");
  }
  const auto t0 = Clock::now();
  httplib::Client c = server.client();
  post(c, "/v1/completions", {{"prompt", "hi"}, {"max_tokens", 1}});
  EXPECT_LT(seconds_since(t0), 1.0) << "a request waited behind idle connections";
  // A half-sent head is given up after the read timeout (here 1 s): the connection is answered
  // with a 4xx or closed within a few seconds, not held.
  const auto t1 = Clock::now();
  bool closed = false;
  const std::string got = idle[1]->read_until("HTTP/1.1 4", 1, 3.0, &closed);
  EXPECT_TRUE(closed || got.find("HTTP/1.1 4") != std::string::npos)
      << "a stalled request head kept its connection: " << got;
  EXPECT_LT(seconds_since(t1), 3.0);
}

TEST(ServeHttp, KeepAliveServesManyRequestsOnOneConnection) {
  Running server(ServerOptions{});
  RawSocket s(server.port());
  ASSERT_TRUE(s.connected());
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(s.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")) << "request " << i;
    const std::string got = s.read_until("{\"status\":\"ok\"}", 1, 10.0);
    ASSERT_NE(got.find("HTTP/1.1 200"), std::string::npos) << "request " << i << ": " << got;
    EXPECT_EQ(got.find("Connection: close"), std::string::npos) << got;
  }
  // A client that asks to close gets its answer and an honest close.
  ASSERT_TRUE(s.send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  bool closed = false;
  const std::string last = s.read_until("", 1, 10.0, &closed);
  EXPECT_NE(last.find("Connection: close"), std::string::npos) << last;
  EXPECT_TRUE(closed);
}

TEST(ServeHttp, AClientLeavingAStreamFreesItsWorker) {
  ServerOptions o;
  o.max_concurrent = 1;
  o.max_queue = 0;
  Running server(o);
  {
    RawSocket s(server.port());
    ASSERT_TRUE(s.connected());
    const std::string body = json{{"prompt", "Once"}, {"max_tokens", 900}, {"stream", true}}.dump();
    s.send(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body);
    const std::string first = s.read_until("data: ", 2, 30.0);
    ASSERT_NE(first.find("data: "), std::string::npos) << first;
  }  // closed mid-stream
  httplib::Client c = server.client();
  const int status = post_until_ok(c, "/v1/completions", R"({"prompt": "hi", "max_tokens": 1})",
                                   5.0, std::chrono::milliseconds(20));
  EXPECT_EQ(status, 200) << "the abandoned stream kept the only worker";
}

TEST(ServeHttp, StopReturnsWithinTwoSecondsDuringAGeneration) {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.log_requests = false;
  Server server(tiny_model().model, tiny_model().tokenizer, o);
  const int port = server.bind();
  std::thread listener([&] { server.listen(); });
  RawSocket s(port);
  ASSERT_TRUE(s.connected());
  const std::string body = json{{"prompt", "Once"}, {"max_tokens", 900}, {"stream", true}}.dump();
  s.send(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body);
  const std::string first = s.read_until("data: ", 2, 30.0);
  EXPECT_NE(first.find("data: "), std::string::npos) << "the stream never started: " << first;
  const auto t0 = Clock::now();
  server.stop();
  listener.join();
  EXPECT_LT(seconds_since(t0), 2.0);
}

}  // namespace
}  // namespace snapkv::serve
