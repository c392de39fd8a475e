// A `snapkv serve` Server on 127.0.0.1:<free port>, listening on its own thread for a test's
// lifetime, and the helpers the server tests share.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "eval/tiny_model.h"
#include "snapkv/serve/server.h"

namespace snapkv::serve::test {

using nlohmann::json;
using snapkv::test::tiny_model;

// A server on 127.0.0.1:<free port>, listening on its own thread for the test's lifetime.
class Running {
 public:
  explicit Running(ServerOptions o, const LlamaModel& model = tiny_model().model,
                   const Tokenizer& tokenizer = tiny_model().tokenizer)
      : server_(model, tokenizer, fix(o)) {
    port_ = server_.bind();
    thread_ = std::thread([this] { server_.listen(); });
  }
  ~Running() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  Server& server() { return server_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }

 private:
  static ServerOptions fix(ServerOptions o) {
    o.host = "127.0.0.1";
    o.port = 0;
    o.defaults.window = 8;
    o.log_requests = false;
    return o;
  }
  Server server_;
  int port_ = 0;
  std::thread thread_;
};

// Seconds of the steady clock since t0.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// POSTs `body` and checks the status; returns the parsed JSON body (discarded when not JSON).
inline json post(httplib::Client& c, const std::string& path, const json& body,
                 int expect_status = 200) {
  const auto res = c.Post(path, body.dump(), "application/json");
  EXPECT_TRUE(res) << path;
  if (!res) return {};
  EXPECT_EQ(res->status, expect_status) << path << " " << body.dump() << " -> " << res->body;
  return json::parse(res->body, nullptr, false);
}

// POSTs the JSON text `body` to `path` until the answer is 200 or `limit_s` seconds have passed,
// `pause` between tries; returns the last status (-1: no answer). For a test waiting for a worker
// to be freed.
inline int post_until_ok(httplib::Client& c, const std::string& path, const std::string& body,
                         double limit_s, std::chrono::milliseconds pause) {
  int status = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < limit_s) {
    const auto res = c.Post(path, body, "application/json");
    status = res ? res->status : -1;
    if (status == 200) break;
    std::this_thread::sleep_for(pause);
  }
  return status;
}

}  // namespace snapkv::serve::test
