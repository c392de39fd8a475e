// Continuous batching through real HTTP on loopback: concurrent streaming clients, whose decode
// steps the server runs together (serve/decode_batcher.h), each get exactly the text they get
// alone.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "serve/running_server.h"
#include "snapkv/ops/gemm.h"

namespace snapkv::serve {
namespace {

using nlohmann::json;
using test::Running;

// The text of a completions event stream: the choices' "text" joined, in order.
std::string streamed_text(const std::string& body, bool* done) {
  std::istringstream in(body);
  std::string line, text;
  *done = false;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) != 0) continue;
    const std::string data = line.substr(6);
    if (data == "[DONE]") {
      *done = true;
      continue;
    }
    const json j = json::parse(data);
    for (const json& c : j.at("choices")) text += c.at("text").get<std::string>();
  }
  return text;
}

// The text of each choice of a completions event stream, by index.
std::vector<std::string> streamed_choices(const std::string& body, size_t n) {
  std::istringstream in(body);
  std::string line;
  std::vector<std::string> text(n);
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) != 0 || line == "data: [DONE]") continue;
    const json j = json::parse(line.substr(6));
    for (const json& c : j.at("choices")) {
      text.at(c.at("index").get<size_t>()) += c.at("text").get<std::string>();
    }
  }
  return text;
}

size_t metric(httplib::Client& c, const std::string& name) {
  const auto res = c.Get("/metrics");
  EXPECT_TRUE(res);
  if (!res) return 0;
  const size_t at = res->body.find("\n" + name + " ");
  EXPECT_NE(at, std::string::npos) << name;
  if (at == std::string::npos) return 0;
  return std::stoul(res->body.substr(at + name.size() + 2));
}

// Six greedy streams of different prompts and lengths through three running slots, so that
// sequences join and leave the running set between steps. The tiny model has F32 weights: with
// at most three sequences per step (fewer than kGemmMinTokens rows) the batched products have
// decode()'s bits (model/llama.h decode_batch), so every text must be exactly the one the same
// request gets alone.
TEST(ServeBatching, ConcurrentStreamsGetTheTextEachGetsAlone) {
  ServerOptions o;
  o.max_concurrent = 3;
  static_assert(3 < kGemmMinTokens);
  Running server(o);
  constexpr size_t kClients = 6;
  std::vector<json> bodies;
  for (size_t i = 0; i < kClients; ++i) {
    bodies.push_back({{"prompt", "Once upon a time, number " + std::to_string(i) + " was"},
                      {"max_tokens", 24 + 7 * i},
                      {"temperature", 0},
                      {"stream", true}});
  }
  // A stream's events are JSON: a character split over two tokens is U+FFFD in each event, so
  // streams are compared with streams (the same request alone, one at a time).
  auto stream = [&](size_t i, std::string* text, int* status, bool* done) {
    httplib::Client c = server.client();
    const auto res = c.Post("/v1/completions", bodies[i].dump(), "application/json");
    if (!res) return;
    *status = res->status;
    *text = streamed_text(res->body, done);
  };
  std::vector<std::string> alone(kClients);
  for (size_t i = 0; i < kClients; ++i) {
    int st = 0;
    bool finished = false;
    stream(i, &alone[i], &st, &finished);
    EXPECT_EQ(st, 200) << i;
    EXPECT_TRUE(finished) << i;
    EXPECT_FALSE(alone[i].empty()) << i;
  }
  httplib::Client m = server.client();
  const size_t steps_before = metric(m, "snapkv_decode_steps_total");
  const size_t rows_before = metric(m, "snapkv_decode_batch_rows_total");
  std::vector<std::string> together(kClients);
  std::vector<int> status(kClients, 0);
  std::vector<bool> done(kClients, false);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      bool finished = false;
      stream(i, &together[i], &status[i], &finished);
      done[i] = finished;
    });
  }
  for (std::thread& t : clients) t.join();
  for (size_t i = 0; i < kClients; ++i) {
    EXPECT_EQ(status[i], 200) << i;
    EXPECT_TRUE(done[i]) << i;
    EXPECT_EQ(together[i], alone[i]) << "client " << i;
  }
  // The decode steps really were shared: more sequences decoded than steps run.
  const size_t steps = metric(m, "snapkv_decode_steps_total") - steps_before;
  const size_t rows = metric(m, "snapkv_decode_batch_rows_total") - rows_before;
  EXPECT_GT(steps, 0u);
  EXPECT_GT(rows, steps) << "no step decoded two sequences";
}

// The n choices of one request decode in the same steps: greedy, each is the text of n = 1.
TEST(ServeBatching, ChoicesOfOneRequestShareTheSteps) {
  Running server(ServerOptions{});
  httplib::Client c = server.client();
  json body = {{"prompt", "Once upon a time there"},
               {"max_tokens", 20},
               {"temperature", 0},
               {"stream", true}};
  const auto one = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(one);
  ASSERT_EQ(one->status, 200);
  const std::string alone = streamed_choices(one->body, 1)[0];
  EXPECT_FALSE(alone.empty());
  const size_t steps_before = metric(c, "snapkv_decode_steps_total");
  const size_t rows_before = metric(c, "snapkv_decode_batch_rows_total");
  body["n"] = 3;  // fewer than kGemmMinTokens rows: decode()'s bits
  const auto three = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(three);
  ASSERT_EQ(three->status, 200);
  const std::vector<std::string> choices = streamed_choices(three->body, 3);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(choices[i], alone) << i;
  EXPECT_NE(three->body.find("\"snapkv\""), std::string::npos);
  const size_t steps = metric(c, "snapkv_decode_steps_total") - steps_before;
  const size_t rows = metric(c, "snapkv_decode_batch_rows_total") - rows_before;
  EXPECT_GT(steps, 0u);
  EXPECT_EQ(rows, 3 * steps) << "the three choices did not step together";
}

}  // namespace
}  // namespace snapkv::serve
