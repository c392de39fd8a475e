// The Redis blob store (serve/blob_store.h), over hiredis when the build found it.
//
// Layout of one name N: "snapkv:N:m" holds the manifest "snapkv-blob 1 <chunks> <bytes> <sha256>";
// "snapkv:N:<sha256 prefix>:<i>" holds chunk i. Chunks are keyed by the content's checksum, so a
// new value never overwrites chunks an older manifest points to; the manifest is written last.
#include "snapkv/serve/blob_store.h"

#include <algorithm>
#include <charconv>
#include <memory>
#include <stdexcept>
#include <string_view>

#include "snapkv/util/sha256.h"

#if SNAPKV_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <mutex>
#include <sstream>
#endif

namespace snapkv::serve {
namespace {

struct RedisUrl {
  std::string host;
  int port = 6379;
};

RedisUrl parse_redis_url(const std::string& url) {
  constexpr std::string_view scheme = "redis://";
  if (url.rfind(scheme, 0) != 0) {
    throw_invalid("serve", "cache store URL", "'" + url + "'", "redis://HOST:PORT");
  }
  const std::string rest = url.substr(scheme.size());
  const size_t colon = rest.rfind(':');
  RedisUrl out;
  out.host = rest.substr(0, colon);
  if (colon != std::string::npos) {
    const std::string port = rest.substr(colon + 1);
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), out.port);
    if (ec != std::errc() || end != port.data() + port.size() || out.port < 1 || out.port > 65535) {
      throw_invalid("serve", "cache store port", "'" + port + "' in '" + url + "'",
                    "a port in 1..65535");
    }
  }
  if (out.host.empty() || out.host.find('/') != std::string::npos) {
    throw_invalid("serve", "cache store host", "'" + url + "'", "redis://HOST:PORT");
  }
  return out;
}

#if SNAPKV_HAVE_HIREDIS

using Reply = std::unique_ptr<redisReply, void (*)(void*)>;

class RedisStore final : public BlobStore {
 public:
  RedisStore(RedisUrl url, size_t chunk_bytes) : url_(std::move(url)), chunk_(chunk_bytes) {}
  ~RedisStore() override {
    if (ctx_ != nullptr) redisFree(ctx_);
  }

  std::string describe() const override {
    return "redis://" + url_.host + ":" + std::to_string(url_.port);
  }

  void put(const std::string& name, std::span<const uint8_t> bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string sum = to_hex(sha256(bytes));
    const size_t n_chunks = (bytes.size() + chunk_ - 1) / chunk_;
    const std::string prefix = key(name) + ":" + sum.substr(0, 16) + ":";
    for (size_t i = 0; i < n_chunks; ++i) {
      const std::span<const uint8_t> part =
          bytes.subspan(i * chunk_, std::min(chunk_, bytes.size() - i * chunk_));
      const std::string k = prefix + std::to_string(i);
      expect_ok(command("SET %b %b", k.data(), k.size(), part.data(), part.size()), "SET");
    }
    const std::string old = read_manifest_text(name);
    const std::string manifest = "snapkv-blob 1 " + std::to_string(n_chunks) + " " +
                                 std::to_string(bytes.size()) + " " + sum;
    const std::string mk = key(name) + ":m";
    expect_ok(command("SET %b %b", mk.data(), mk.size(), manifest.data(), manifest.size()), "SET");
    if (!old.empty() && old != manifest) drop_chunks(name, old);
  }

  std::optional<std::vector<uint8_t>> get(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string manifest = read_manifest_text(name);
    if (manifest.empty()) return std::nullopt;
    const Manifest m = parse_manifest(name, manifest);
    std::vector<uint8_t> out;
    out.reserve(m.bytes);
    const std::string prefix = key(name) + ":" + m.sum.substr(0, 16) + ":";
    for (size_t i = 0; i < m.chunks; ++i) {
      const std::string k = prefix + std::to_string(i);
      Reply r = command("GET %b", k.data(), k.size());
      if (r->type != REDIS_REPLY_STRING) {
        throw StoreError(
            StoreError::Kind::corrupt,
            format_error("serve", "cache store entry '" + name + "' chunk " + std::to_string(i),
                         "missing", "present (its manifest lists it)"));
      }
      if (out.size() + r->len > m.bytes) break;
      out.insert(out.end(), r->str, r->str + r->len);
    }
    if (out.size() != m.bytes || to_hex(sha256(out)) != m.sum) {
      throw StoreError(StoreError::Kind::corrupt,
                       format_error("serve", "cache store entry '" + name + "'",
                                    "bytes that do not match its manifest's size and SHA-256",
                                    std::to_string(m.bytes) + " bytes, sha256 " + m.sum));
    }
    return out;
  }

  void remove(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string manifest = read_manifest_text(name);
    if (manifest.empty()) return;
    const std::string mk = key(name) + ":m";
    command("DEL %b", mk.data(), mk.size());
    drop_chunks(name, manifest);
  }

 private:
  struct Manifest {
    size_t chunks = 0, bytes = 0;
    std::string sum;
  };

  static std::string key(const std::string& name) { return "snapkv:" + name; }

  Manifest parse_manifest(const std::string& name, const std::string& text) const {
    std::istringstream in(text);
    std::string magic;
    int version = 0;
    Manifest m;
    in >> magic >> version >> m.chunks >> m.bytes >> m.sum;
    const size_t most_chunks = m.bytes / chunk_ + 2;
    if (!in || magic != "snapkv-blob" || version != 1 || m.sum.size() != 64 ||
        m.chunks > most_chunks || m.chunks * (size_t{512} << 20) < m.bytes) {
      throw StoreError(
          StoreError::Kind::corrupt,
          format_error("serve", "cache store manifest of '" + name + "'",
                       "'" + text.substr(0, 120) + "'", "snapkv-blob 1 <chunks> <bytes> <sha256>"));
    }
    return m;
  }

  std::string read_manifest_text(const std::string& name) {
    const std::string mk = key(name) + ":m";
    Reply r = command("GET %b", mk.data(), mk.size());
    if (r->type == REDIS_REPLY_NIL) return "";
    if (r->type != REDIS_REPLY_STRING) {
      throw StoreError(StoreError::Kind::corrupt,
                       format_error("serve", "cache store manifest of '" + name + "'",
                                    "a reply of type " + std::to_string(r->type), "a string"));
    }
    return std::string(r->str, r->len);
  }

  void drop_chunks(const std::string& name, const std::string& manifest) {
    try {
      const Manifest m = parse_manifest(name, manifest);
      const std::string prefix = key(name) + ":" + m.sum.substr(0, 16) + ":";
      for (size_t i = 0; i < m.chunks; ++i) {
        const std::string k = prefix + std::to_string(i);
        command("DEL %b", k.data(), k.size());
      }
    } catch (const StoreError&) {
      // A damaged old manifest: its chunks cannot be named; the new value stands regardless.
    }
  }

  void connect() {
    if (ctx_ != nullptr) return;
    const timeval tv{5, 0};
    redisContext* c = redisConnectWithTimeout(url_.host.c_str(), url_.port, tv);
    if (c == nullptr || c->err != 0) {
      const std::string why = c == nullptr ? "out of memory" : c->errstr;
      if (c != nullptr) redisFree(c);
      throw StoreError(StoreError::Kind::unavailable,
                       format_error("serve", "cannot reach the cache store " + describe(), why,
                                    "a running Redis server"));
    }
    redisSetTimeout(c, timeval{30, 0});
    ctx_ = c;
  }

  template <typename... Args>
  Reply command(const char* format, Args... args) {
    connect();
    void* raw = redisCommand(ctx_, format, args...);
    if (raw == nullptr) {
      const std::string why = ctx_->errstr;
      redisFree(ctx_);
      ctx_ = nullptr;  // reconnect on the next call
      throw StoreError(StoreError::Kind::unavailable,
                       format_error("serve", "the cache store " + describe() + " failed", why,
                                    "a running Redis server"));
    }
    Reply r(static_cast<redisReply*>(raw), freeReplyObject);
    if (r->type == REDIS_REPLY_ERROR) {
      throw StoreError(StoreError::Kind::unavailable,
                       format_error("serve", "the cache store " + describe() + " refused a command",
                                    std::string(r->str, r->len), "OK"));
    }
    return r;
  }

  static void expect_ok(const Reply& r, const char* what) {
    if (r->type != REDIS_REPLY_STATUS) {
      throw StoreError(StoreError::Kind::unavailable,
                       format_error("serve", std::string("cache store ") + what,
                                    "reply type " + std::to_string(r->type), "OK"));
    }
  }

  RedisUrl url_;
  size_t chunk_;
  std::mutex mutex_;
  redisContext* ctx_ = nullptr;
};

#endif  // SNAPKV_HAVE_HIREDIS

}  // namespace

bool redis_supported() {
  return SNAPKV_HAVE_HIREDIS != 0;
}

std::unique_ptr<BlobStore> open_blob_store(const std::string& url, size_t chunk_bytes) {
  RedisUrl parsed = parse_redis_url(url);
  if (chunk_bytes == 0) throw_invalid("serve", "cache store chunk bytes", "0", ">= 1");
#if SNAPKV_HAVE_HIREDIS
  return std::make_unique<RedisStore>(std::move(parsed), chunk_bytes);
#else
  (void)parsed;
  throw std::invalid_argument(format_error("serve", "--cache-store " + url,
                                           "a build without hiredis",
                                           "a build configured with libhiredis-dev installed"));
#endif
}

}  // namespace snapkv::serve
