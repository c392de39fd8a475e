// A shared store of named byte strings that several `snapkv serve` replicas reach (Redis), so
// that a document compressed by one replica is answered by any other.
//
// Promises: put() writes the bytes in chunks under Redis' value limit, then a manifest holding
// the chunk count, the total size and the SHA-256 of the whole; readers see either the previous
// value or the new one, never a part (the manifest is written last). get() checks the manifest,
// every chunk and the checksum: a missing name is std::nullopt, a damaged entry a StoreError
// corrupt, a store that cannot be reached a StoreError unavailable. One connection per store,
// used by one caller at a time (a mutex), reconnected after a failure.
// Leaves out: expiry, authentication to Redis, TLS, clustering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "snapkv/util/error.h"

namespace snapkv::serve {

class StoreError : public RuntimeError {
 public:
  enum class Kind { unavailable, corrupt };
  StoreError(Kind kind, const std::string& message) : RuntimeError(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

class BlobStore {
 public:
  virtual ~BlobStore() = default;
  virtual void put(const std::string& name, std::span<const uint8_t> bytes) = 0;
  virtual std::optional<std::vector<uint8_t>> get(const std::string& name) = 0;
  virtual void remove(const std::string& name) = 0;
  virtual std::string describe() const = 0;  // "redis://127.0.0.1:6379"
};

// Whether this build has the Redis client (hiredis, found by pkg-config at configure time).
bool redis_supported();

// The store named by `url`: redis://HOST:PORT. Names are kept under the key prefix "snapkv:";
// chunk_bytes (>= 1) bounds each value written. Connects lazily (the first call that needs the
// store). Throws std::invalid_argument for a malformed URL or a build without hiredis.
std::unique_ptr<BlobStore> open_blob_store(const std::string& url,
                                           size_t chunk_bytes = size_t{64} << 20);

}  // namespace snapkv::serve
