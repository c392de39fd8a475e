// SHA-256 through OpenSSL's EVP interface (util/sha256.h).
#include "snapkv/util/sha256.h"

#include <openssl/evp.h>

#include "snapkv/util/error.h"

namespace snapkv {

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
  ~Impl() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  SNAPKV_CHECK(impl_->ctx != nullptr);
  SNAPKV_CHECK(EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) == 1);
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(std::span<const uint8_t> bytes) {
  SNAPKV_CHECK(!finished_);
  if (bytes.empty()) return;
  SNAPKV_CHECK(EVP_DigestUpdate(impl_->ctx, bytes.data(), bytes.size()) == 1);
}

Sha256Digest Sha256::finish() {
  SNAPKV_CHECK(!finished_);
  finished_ = true;
  Sha256Digest out{};
  unsigned int n = 0;
  SNAPKV_CHECK(EVP_DigestFinal_ex(impl_->ctx, out.data(), &n) == 1 && n == out.size());
  return out;
}

Sha256Digest sha256(std::span<const uint8_t> bytes) {
  Sha256 h;
  h.update(bytes);
  return h.finish();
}

std::string to_hex(const Sha256Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * digest.size());
  for (const uint8_t b : digest) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

}  // namespace snapkv
