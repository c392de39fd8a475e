// SHA-256 from OpenSSL's libcrypto (one seam: nothing else in the project includes OpenSSL).
// Used for the model fingerprint (gguf/fingerprint.h) and the checksum of .kvc files
// (kv/file/kvc_file.h). Promises: the FIPS 180-4 digest of the bytes given, incrementally or in one
// call. Leaves out: keyed hashes, other algorithms.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace snapkv {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(std::span<const uint8_t> bytes);
  // The digest of everything passed to update(); the object cannot be updated afterwards.
  Sha256Digest finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool finished_ = false;
};

Sha256Digest sha256(std::span<const uint8_t> bytes);

// Lower-case hex of a digest (64 characters).
std::string to_hex(const Sha256Digest& digest);

}  // namespace snapkv
