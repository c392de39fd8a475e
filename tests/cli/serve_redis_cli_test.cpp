// Two `snapkv serve` processes sharing a Redis cache store (redis-server started by the test on a
// free loopback port, nothing saved to disk): a document compressed on one replica is answered
// by the other with the same answer, a prompt prefilled on one is reused by the other; a missing
// entry is a 404, a damaged one (manifest or chunk) a 500, a Redis that went away a 503, all JSON,
// the replicas alive after. Also: a .kvc of another model in --cache-dir is skipped with a log
// line at start-up. Skipped only when redis-server is not installed (scripts/test.sh installs it).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_test_util.h"
#include "eval/tiny_model.h"
#include "model/chat_model_util.h"

extern char** environ;

namespace snapkv::clitest {
namespace {

using nlohmann::json;

// A port nothing listens on right now (bound, read, closed).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string shell(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ::pclose(p);
  return out;
}

// A child process (stdout and stderr to `log`), killed and reaped when destroyed.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::string& log) : log_(log) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Child() { stop(); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  bool running() const { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }
  std::string log() const { return read_text(log_); }

 private:
  pid_t pid_ = -1;
  std::string log_;
};

// `snapkv serve` on a port of its choosing; port() waits for its "listening on" line.
class Replica {
 public:
  Replica(const std::string& log, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {SNAPKV_CLI_PATH, "serve", "--model",   test::tiny_model_path(),
                                     "--port",        "0",     "--threads", "1",
                                     "--window",      "8"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    child_ = std::make_unique<Child>(argv, log);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline && child_->running()) {
      const std::string text = child_->log();
      const size_t at = text.find("listening on http://127.0.0.1:");
      if (at != std::string::npos) {
        port_ = std::atoi(text.c_str() + at + std::string("listening on http://127.0.0.1:").size());
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  int port() const { return port_; }
  std::string log() const { return child_->log(); }

 private:
  std::unique_ptr<Child> child_;
  int port_ = 0;
};

// An HTTP client of one replica, through curl (the CLI tests link no HTTP library).
class Client {
 public:
  Client(int port, const TempDir& dir)
      : base_("http://127.0.0.1:" + std::to_string(port)), dir_(dir) {}
  // Returns the status and fills `body`.
  int request(const std::string& method, const std::string& path, const std::string& data,
              std::string& body) const {
    const std::string in = dir_.file("request.json"), out = dir_.file("response.json");
    std::ofstream(in, std::ios::binary) << data;
    const std::string status = shell(
        "curl -s -m 60 -X " + method + " -o '" + out + "' -w '%{http_code}' " +
        (data.empty() ? "" : "-H 'Content-Type: application/json' --data-binary @'" + in + "' ") +
        "'" + base_ + path + "'");
    body = read_text(out);
    return std::atoi(status.c_str());
  }

 private:
  std::string base_;
  const TempDir& dir_;
};

json post(const Client& c, const std::string& path, const json& body, int expect_status = 200) {
  std::string text;
  const int status = c.request("POST", path, body.dump(), text);
  EXPECT_EQ(status, expect_status) << path << " " << body.dump() << " -> " << text;
  return json::parse(text, nullptr, false);
}

const char* kDocument =
    "The grass is green. The sky is blue. The pass key is 48213. Remember it. The sun is yellow. "
    "Here we go. There and back again. 48213 is the pass key. The grass is green.";

TEST(ServeRedisCli, ReplicasShareCompressedDocumentsThroughRedis) {
  const std::string redis = shell("command -v redis-server");
  if (redis.empty()) GTEST_SKIP() << "redis-server is not installed (scripts/test.sh installs it)";
  TempDir dir("serve_redis");
  const int rport = free_port();
  ASSERT_GT(rport, 0);
  auto server = std::make_unique<Child>(
      std::vector<std::string>{redis.substr(0, redis.find('\n')), "--port", std::to_string(rport),
                               "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"},
      dir.file("redis.log"));
  const std::string cli = "redis-cli -h 127.0.0.1 -p " + std::to_string(rport) + " ";
  for (int i = 0; i < 100 && shell(cli + "ping 2>/dev/null").find("PONG") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(shell(cli + "ping").find("PONG"), std::string::npos) << server->log();

  // Replica A also gets a --cache-dir holding a .kvc of another model: skipped with a log line.
  const std::string cache_dir = dir.file("caches");
  std::filesystem::create_directories(cache_dir);
  std::ofstream(dir.file("doc.txt")) << kDocument;
  const CliResult c =
      run_cli("compress --model '" + snapkv::testing::tiny_model_path() + "' --prompt-file '" +
                  dir.file("doc.txt") + "' --out '" + cache_dir + "/other-model.kvc'",
              dir);
  ASSERT_EQ(c.rc, 0) << c.err;

  const std::string store = "redis://127.0.0.1:" + std::to_string(rport);
  Replica a(dir.file("a.log"),
            {"--cache-store", store, "--cache-store-chunk", "4096", "--cache-dir", cache_dir});
  Replica b(dir.file("b.log"), {"--cache-store", store, "--cache-store-chunk", "4096"});
  if (a.port() == 0 && a.log().find("a build without hiredis") != std::string::npos) {
    GTEST_SKIP() << "snapkv was built without hiredis (scripts/setup.sh installs libhiredis-dev)";
  }
  ASSERT_GT(a.port(), 0) << a.log();
  ASSERT_GT(b.port(), 0) << b.log();
  EXPECT_NE(a.log().find("skipped other-model.kvc: made for another model"), std::string::npos)
      << a.log();
  const Client ca(a.port(), dir), cb(b.port(), dir);

  // A compresses; B answers from Redis, the same answer.
  const json doc = post(ca, "/v1/caches", {{"document", kDocument}, {"method", "snapkv+kivi2"}});
  const std::string id = doc["id"];
  const json q = {{"prompt", " The pass key is"}, {"max_tokens", 8}, {"cache_id", id}};
  const json on_a = post(ca, "/v1/completions", q);
  const json on_b = post(cb, "/v1/completions", q);
  EXPECT_EQ(on_b["choices"][0]["text"], on_a["choices"][0]["text"]);
  EXPECT_EQ(on_b["snapkv"]["reuse"], "document");
  // The payload went in several chunks.
  const std::string keys = shell(cli + "--scan --pattern 'snapkv:" + id + ":*'");
  EXPECT_GT(std::count(keys.begin(), keys.end(), '\n'), 2) << keys;

  // A prompt prefilled on A is reused by B.
  const json p = {{"prompt", std::string(kDocument) + " The pass key is"}, {"max_tokens", 8}};
  const json pa = post(ca, "/v1/completions", p);
  const json pb = post(cb, "/v1/completions", p);
  EXPECT_EQ(pa["snapkv"]["reuse"], "none");
  EXPECT_EQ(pb["snapkv"]["reuse"], "exact");
  EXPECT_EQ(pb["choices"][0]["text"], pa["choices"][0]["text"]);

  // Missing: 404. Damaged chunk or manifest of entries B never loaded: 500, B alive.
  EXPECT_EQ(
      post(cb, "/v1/completions", {{"prompt", "x"}, {"cache_id", "kv-none"}}, 404)["error"]["type"],
      "not_found");
  const std::string id2 = post(ca, "/v1/caches", {{"document", "Boats float on water."}})["id"];
  const std::string id3 = post(ca, "/v1/caches", {{"document", "Trees grow tall."}})["id"];
  const std::string chunks = shell(cli + "--scan --pattern 'snapkv:" + id2 + ":*:0'");
  ASSERT_FALSE(chunks.empty());
  shell(cli + "SET '" + chunks.substr(0, chunks.find('\n')) + "' garbage");
  shell(cli + "SET 'snapkv:" + id3 + ":m' 'snapkv-blob 1 1 7 nonsense'");
  for (const std::string& bad : {id2, id3}) {
    const json e = post(cb, "/v1/completions", {{"prompt", "x"}, {"cache_id", bad}}, 500);
    EXPECT_EQ(e["error"]["type"], "cache_store_corrupt") << bad;
  }

  // Redis gone: a document only Redis had is a 503; plain completions still work.
  const std::string id4 = post(ca, "/v1/caches", {{"document", "Rivers run to the sea."}})["id"];
  server->stop();
  const json down = post(cb, "/v1/completions", {{"prompt", "x"}, {"cache_id", id4}}, 503);
  EXPECT_EQ(down["error"]["type"], "cache_store_unavailable");
  post(cb, "/v1/completions", {{"prompt", "Hello there"}, {"max_tokens", 2}});
  post(ca, "/v1/caches", {{"document", "Mountains are high."}}, 503);
  std::string health;
  EXPECT_EQ(cb.request("GET", "/health", "", health), 200) << health;
}

TEST(ServeRedisCli, BadStoreUrlIsRefusedAtStartUp) {
  TempDir dir("serve_redis_url");
  const CliResult r = run_cli(
      "serve --model '" + test::tiny_model_path() + "' --port 0 --cache-store http://127.0.0.1:1",
      dir);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("redis://HOST:PORT"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace snapkv::clitest
