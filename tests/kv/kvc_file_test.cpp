// .kvc files (kv/file/kvc_file.h): a written and re-read cache is the saved cache, bit for bit
// (same positions, same decoded rows, same bytes when written again, and identical attention and
// appends afterwards) for every policy and codec; every class of malformed file is a KvcError of
// its named kind, generated here from a valid file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kv/kv_test_util.h"
#include "snapkv/kv/codecs/kivi.h"
#include "snapkv/kv/file/kvc_file.h"
#include "snapkv/kv/file/kvc_format.h"
#include "snapkv/util/sha256.h"

namespace snapkv {
namespace {

using test::random_normal;
using test::slice_tokens;
using test::view;

constexpr size_t kHeads = 4, kKv = 2, kS = 75, kD = 12, kW = 6, kLayers = 2;

ModelFingerprint fingerprint(uint8_t seed) {
  ModelFingerprint f{};
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<uint8_t>(seed + 7 * i);
  return f;
}

CacheConfig make_config(PolicyKind policy, CodecKind codec, size_t fp16_sinks = 0) {
  CacheConfig c;
  c.policy = policy;
  c.codec = codec;
  c.budget = 30;
  c.window = kW;
  c.n_sink = 2;
  c.pool = PoolKind::max;
  c.kernel = 3;
  c.keep_window = true;
  c.chunk_mode = ChunkMode::end_of_prompt;
  c.seed = 5;
  c.chunk_size = 4;
  c.kivi_group = 4;
  c.kivi_residual = 8;
  c.kivi_fp16_sinks = fp16_sinks;
  c.rotation_seed = 77;  // kivi2r/kivi4r (kD = 12: Hadamard blocks of 8 and 4)
  c.kitty_channels = 3;  // kitty
  c.gear_rank = 3;       // codec parameters off their defaults: the file must carry them
  c.gear_sparse = 0.05;
  c.zip_salient = 0.3;
  c.zip_high_bits = 16;
  return c;
}

// kLayers caches that saw a prefill of kS tokens in three chunks (queries passed), prompt ended.
std::vector<LayerCache> prefilled(const CacheConfig& config, uint64_t seed) {
  std::vector<LayerCache> caches;
  for (size_t l = 0; l < kLayers; ++l) {
    LayerCache cache(CacheDims{kHeads, kKv, kD}, config, l);
    const auto k = random_normal(kKv * kS * kD, seed + 10 * l);
    const auto v = random_normal(kKv * kS * kD, seed + 10 * l + 1);
    const auto q = random_normal(kHeads * kS * kD, seed + 10 * l + 2);
    size_t seen = 0;
    for (const size_t len : {33u, 30u, 12u}) {
      const auto kc = slice_tokens(k, kKv, kS, kD, seen, seen + len);
      const auto vc = slice_tokens(v, kKv, kS, kD, seen, seen + len);
      const auto qc = slice_tokens(q, kHeads, kS, kD, seen + len - kW, seen + len);
      const Tensor3 qt = view(qc, kHeads, kW, kD);
      cache.update(view(kc, kKv, len, kD), view(vc, kKv, len, kD), &qt, UpdateKind::prefill);
      seen += len;
    }
    cache.end_prompt();
    caches.push_back(std::move(cache));
  }
  return caches;
}

std::vector<int32_t> tokens_of(size_t n) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 37) % 301);
  return t;
}

void expect_same_cache(const LayerCache& a, const LayerCache& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(a.offset(), b.offset()) << what;
  EXPECT_EQ(a.compressions(), b.compressions()) << what;
  EXPECT_EQ(a.stats().bytes_stored, b.stats().bytes_stored) << what;
  for (size_t h = 0; h < kKv; ++h) {
    EXPECT_TRUE(std::ranges::equal(a.positions(h), b.positions(h))) << what;
    std::vector<float> ka(a.size() * kD), kb(a.size() * kD), va(a.size() * kD), vb(a.size() * kD);
    a.read_keys(h, ka.data());
    b.read_keys(h, kb.data());
    a.read_values(h, va.data());
    b.read_values(h, vb.data());
    EXPECT_EQ(0, std::memcmp(ka.data(), kb.data(), ka.size() * sizeof(float))) << what;
    EXPECT_EQ(0, std::memcmp(va.data(), vb.data(), va.size() * sizeof(float))) << what;
  }
}

// Decode-style appends and attention through both caches: identical outputs, bit for bit.
void expect_same_continuation(LayerCache& a, LayerCache& b, uint64_t seed,
                              const std::string& what) {
  for (size_t step = 0; step < 12; ++step) {  // crosses the KIVI residual (R = 8) boundary
    const auto k = random_normal(kKv * kD, seed + 3 * step);
    const auto v = random_normal(kKv * kD, seed + 3 * step + 1);
    const auto q = random_normal(kHeads * kD, seed + 3 * step + 2);
    std::vector<float> out_a(kHeads * kD), out_b(kHeads * kD);
    a.attend(out_a.data(), view(q, kHeads, 1, kD), view(k, kKv, 1, kD), view(v, kKv, 1, kD));
    b.attend(out_b.data(), view(q, kHeads, 1, kD), view(k, kKv, 1, kD), view(v, kKv, 1, kD));
    ASSERT_EQ(0, std::memcmp(out_a.data(), out_b.data(), out_a.size() * sizeof(float)))
        << what << " step " << step;
    a.update(view(k, kKv, 1, kD), view(v, kKv, 1, kD));
    b.update(view(k, kKv, 1, kD), view(v, kKv, 1, kD));
  }
  expect_same_cache(a, b, what + " after decoding");
}

TEST(KvcFile, RoundTripIsExactForEveryPolicyAndCodec) {
  const PolicyKind policies[] = {PolicyKind::full,   PolicyKind::snapkv, PolicyKind::streaming,
                                 PolicyKind::random, PolicyKind::knorm,  PolicyKind::chunkkv};
  const CodecKind codecs[] = {CodecKind::fp16,     CodecKind::kivi2,  CodecKind::kivi4,
                              CodecKind::kivi2r,   CodecKind::kivi4r, CodecKind::kitty,
                              CodecKind::zipcache, CodecKind::gear,   CodecKind::zipcacher,
                              CodecKind::kivi42,   CodecKind::kivi24, CodecKind::kivi42r,
                              CodecKind::kivi32,   CodecKind::kivimix};
  const std::vector<int32_t> tokens = tokens_of(kS);
  const ModelFingerprint fp = fingerprint(3);
  for (const PolicyKind policy : policies) {
    for (const CodecKind codec : codecs) {
      for (const size_t sinks : {size_t{0}, size_t{3}}) {
        if ((codec == CodecKind::fp16 || codec_routes_rows(codec)) && sinks > 0) continue;
        const std::string what = std::string(to_string(policy)) + "+" +
                                 std::string(to_string(codec)) + " sinks " + std::to_string(sinks);
        std::vector<LayerCache> saved = prefilled(make_config(policy, codec, sinks), 100);
        const std::vector<uint8_t> bytes = encode_kvc(fp, tokens, saved);
        KvcExpect expect;
        expect.fingerprint = &fp;
        expect.n_layers = kLayers;
        expect.dims = CacheDims{kHeads, kKv, kD};
        KvcContents loaded = decode_kvc(bytes, expect);
        EXPECT_EQ(loaded.tokens, tokens) << what;
        EXPECT_EQ(loaded.fingerprint, fp) << what;
        EXPECT_EQ(loaded.file_bytes, bytes.size()) << what;
        EXPECT_EQ(loaded.config.policy, policy) << what;
        EXPECT_EQ(loaded.config.codec, codec) << what;
        EXPECT_EQ(loaded.config.kivi_fp16_sinks, sinks) << what;
        EXPECT_EQ(loaded.config.rotation_seed, 77u) << what;
        EXPECT_EQ(loaded.config.kitty_channels, 3u) << what;
        EXPECT_EQ(loaded.config.gear_rank, codec == CodecKind::gear ? 3u : 2u) << what;
        EXPECT_EQ(loaded.config.zip_high_bits, codec_routes_rows(codec) ? 16u : 4u) << what;
        ASSERT_EQ(loaded.caches.size(), kLayers) << what;
        // Written again, the loaded caches give the same bytes: the whole state came back.
        EXPECT_EQ(encode_kvc(fp, tokens, loaded.caches), bytes) << what;
        for (size_t l = 0; l < kLayers; ++l) {
          expect_same_cache(saved[l], loaded.caches[l], what);
          expect_same_continuation(saved[l], loaded.caches[l], 900 + l, what);
        }
      }
    }
  }
}

TEST(KvcFile, WriteIsAtomicAndReadBack) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("snapkv_kvc_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "doc.kvc").string();
  const auto caches = prefilled(make_config(PolicyKind::snapkv, CodecKind::kivi2), 7);
  const std::vector<int32_t> tokens = tokens_of(kS);
  write_kvc(path, fingerprint(1), tokens, caches);
  const KvcContents loaded = read_kvc(path);
  EXPECT_EQ(loaded.file_bytes, fs::file_size(path));
  for (size_t l = 0; l < kLayers; ++l) expect_same_cache(caches[l], loaded.caches[l], "file");
  size_t n_files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n_files;
  EXPECT_EQ(n_files, 1u);  // no temporary file left behind
  // A target in a missing directory: an io error and nothing written.
  try {
    write_kvc((dir / "missing" / "x.kvc").string(), fingerprint(1), tokens, caches);
    ADD_FAILURE() << "write into a missing directory succeeded";
  } catch (const KvcError& e) {
    EXPECT_EQ(e.kind(), KvcErrorKind::io) << e.what();
  }
  try {
    read_kvc((dir / "absent.kvc").string());
    ADD_FAILURE() << "read of a missing file succeeded";
  } catch (const KvcError& e) {
    EXPECT_EQ(e.kind(), KvcErrorKind::io) << e.what();
  }
  fs::remove_all(dir);
}

TEST(KvcFile, WriterRefusesCachesItCannotRepresent) {
  const std::vector<int32_t> tokens = tokens_of(kS);
  LayerCache open(CacheDims{kHeads, kKv, kD}, make_config(PolicyKind::snapkv, CodecKind::fp16));
  const auto k = random_normal(kKv * kS * kD, 1), v = random_normal(kKv * kS * kD, 2);
  open.update(view(k, kKv, kS, kD), view(v, kKv, kS, kD), nullptr, UpdateKind::prefill);
  ASSERT_TRUE(open.prompt_open());
  std::vector<LayerCache> caches;
  caches.push_back(std::move(open));
  EXPECT_THROW(encode_kvc(fingerprint(0), tokens, caches), std::invalid_argument);
  caches[0].end_prompt();
  EXPECT_NO_THROW(encode_kvc(fingerprint(0), tokens, caches));
  EXPECT_THROW(encode_kvc(fingerprint(0), tokens_of(kS - 1), caches), std::invalid_argument);
  EXPECT_THROW(encode_kvc(fingerprint(0), {}, caches), std::invalid_argument);
  EXPECT_THROW(encode_kvc(fingerprint(0), tokens, std::vector<LayerCache>{}),
               std::invalid_argument);
}

// ---- malformed files ------------------------------------------------------------------------

struct Valid {
  std::vector<uint8_t> bytes;
  ModelFingerprint fp = fingerprint(9);
};

const Valid& valid_file(CodecKind codec) {
  static std::map<CodecKind, Valid> files;
  auto it = files.find(codec);
  if (it == files.end()) {
    Valid v;
    const auto caches = prefilled(make_config(PolicyKind::snapkv, codec, 2), 42);
    v.bytes = encode_kvc(v.fp, tokens_of(kS), caches);
    it = files.emplace(codec, std::move(v)).first;
  }
  return it->second;
}

// Recomputes the checksum after an edit, so that the payload checks behind it are reached.
void reseal(std::vector<uint8_t>& bytes) {
  const size_t from = offsetof(KvcHeader, model_fingerprint);
  const Sha256Digest sum = sha256(std::span<const uint8_t>(bytes).subspan(from));
  std::memcpy(bytes.data() + offsetof(KvcHeader, checksum), sum.data(), sum.size());
}

template <class T>
void poke(std::vector<uint8_t>& bytes, size_t offset, T value) {
  ASSERT_LE(offset + sizeof(T), bytes.size());
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

void expect_kind(const std::vector<uint8_t>& bytes, KvcErrorKind kind, const std::string& what,
                 const KvcExpect& expect = {}) {
  try {
    decode_kvc(bytes, expect);
    ADD_FAILURE() << what << ": accepted, expected " << to_string(kind);
  } catch (const KvcError& e) {
    EXPECT_EQ(e.kind(), kind) << what << ": " << e.what();
    if (std::getenv("KVC_PRINT")) std::fprintf(stderr, "%s: %s\n", what.c_str(), e.what());
    EXPECT_EQ(std::string(e.what()).rfind("[", 0), 0u) << e.what();
  }
}

// Offsets inside the payload of valid_file(): the config, the model record (no note), the tokens,
// then layer 0 (no decode window: decode_budget 0), KV head 0.
constexpr size_t kConfigAt = sizeof(KvcHeader);
constexpr size_t kAllocationAt = kConfigAt + sizeof(KvcConfigRecord);
constexpr size_t kModelAt = kAllocationAt + sizeof(KvcAllocationRecord);
constexpr size_t kTokensAt = kModelAt + sizeof(KvcModelRecord);
constexpr size_t kLayer0At = kTokensAt + kS * sizeof(int32_t);
constexpr size_t kDecode0At = kLayer0At + sizeof(KvcLayerRecord);
constexpr size_t kHead0At = kDecode0At + sizeof(KvcDecodeRecord);
constexpr size_t kPositions0At = kHead0At + sizeof(KvcHeadRecord);

TEST(KvcFile, TruncatedFilesAreNamed) {
  const Valid& v = valid_file(CodecKind::kivi4);
  for (const size_t keep : {size_t{0}, size_t{5}, size_t{100}, size_t{127}, size_t{128},
                            kLayer0At + 3, v.bytes.size() / 2, v.bytes.size() - 1}) {
    const std::vector<uint8_t> cut(v.bytes.begin(),
                                   v.bytes.begin() + static_cast<std::ptrdiff_t>(keep));
    expect_kind(cut, KvcErrorKind::truncated, "cut at " + std::to_string(keep));
  }
}

TEST(KvcFile, WrongMagicVersionAndModelAreNamed) {
  const Valid& v = valid_file(CodecKind::fp16);
  std::vector<uint8_t> b = v.bytes;
  b[0] = 'G';
  expect_kind(b, KvcErrorKind::not_kvc, "magic");
  b = v.bytes;
  poke<uint32_t>(b, offsetof(KvcHeader, version), kKvcVersion + 1);
  expect_kind(b, KvcErrorKind::wrong_version, "version");
  try {
    decode_kvc(b);
  } catch (const KvcError& e) {
    EXPECT_NE(std::string(e.what()).find("newer than this build"), std::string::npos) << e.what();
  }
  poke<uint32_t>(b, offsetof(KvcHeader, version), kKvcOldestVersion - 1);
  expect_kind(b, KvcErrorKind::wrong_version, "version 0");

  const ModelFingerprint other = fingerprint(10);
  KvcExpect expect;
  expect.fingerprint = &other;
  expect_kind(v.bytes, KvcErrorKind::wrong_model, "fingerprint", expect);
  KvcExpect dims;
  dims.fingerprint = &v.fp;
  dims.n_layers = kLayers + 1;
  expect_kind(v.bytes, KvcErrorKind::wrong_model, "layers", dims);
  dims.n_layers = kLayers;
  dims.dims = CacheDims{kHeads, kKv, kD + 1};
  expect_kind(v.bytes, KvcErrorKind::wrong_model, "head_dim", dims);
  dims.dims = CacheDims{kHeads, kKv, kD};
  EXPECT_NO_THROW(decode_kvc(v.bytes, dims));
}

TEST(KvcFile, CorruptedPayloadIsCaughtByTheChecksum) {
  const Valid& v = valid_file(CodecKind::kivi2);
  for (const size_t at : {offsetof(KvcHeader, model_fingerprint), offsetof(KvcHeader, n_tokens),
                          kConfigAt + 1, kPositions0At + 2, v.bytes.size() - 1}) {
    std::vector<uint8_t> b = v.bytes;
    b[at] ^= 0x10;
    expect_kind(b, KvcErrorKind::corrupted, "flip at " + std::to_string(at));
  }
  std::vector<uint8_t> b = v.bytes;
  b.push_back(0);
  expect_kind(b, KvcErrorKind::malformed, "trailing byte");
}

TEST(KvcFile, MalformedPayloadsWithAValidChecksumAreNamed) {
  const Valid& v = valid_file(CodecKind::kivi2);
  const std::vector<std::pair<std::string, std::function<void(std::vector<uint8_t>&)>>> edits = {
      {"unknown policy name", [](auto& b) { std::memcpy(b.data() + kConfigAt, "snapkv9", 7); }},
      {"invalid config (window 0)",
       [](auto& b) { poke<uint64_t>(b, kConfigAt + offsetof(KvcConfigRecord, window), 0); }},
      {"flag not 0/1", [](auto& b) { b[kConfigAt + offsetof(KvcConfigRecord, causal)] = 7; }},
      {"negative token", [](auto& b) { poke<int32_t>(b, kTokensAt, -1); }},
      {"unknown head allocation",
       [](auto& b) { std::memcpy(b.data() + kAllocationAt, "sideways", 8); }},
      {"ada_floor out of range",
       [](auto& b) {
         poke<double>(b, kAllocationAt + offsetof(KvcAllocationRecord, ada_floor), 2.0);
       }},
      {"codec fields unused by the codec (kivi2)",
       [](auto& b) {
         poke<uint32_t>(b, kAllocationAt + offsetof(KvcAllocationRecord, codec_count), 1);
       }},
      {"decode window without a decode budget",
       [](auto& b) { poke<uint64_t>(b, kDecode0At + offsetof(KvcDecodeRecord, n_recent), 1); }},
      {"decode re-selections without a decode budget",
       [](auto& b) {
         poke<uint64_t>(b, kDecode0At + offsetof(KvcDecodeRecord, decode_reselections), 1);
       }},
      {"layer tokens seen", [](auto& b) { poke<uint64_t>(b, kLayer0At, uint64_t{kS + 1}); }},
      {"budget 2^64 - 1",
       [](auto& b) {
         poke<uint64_t>(b, kConfigAt + offsetof(KvcConfigRecord, budget), ~uint64_t{0});
       }},
      {"compressions 2^63", [](auto& b) { poke<uint64_t>(b, kLayer0At + 8, uint64_t{1} << 63); }},
      {"rows above the tokens", [](auto& b) { poke<uint64_t>(b, kHead0At, uint64_t{kS + 1}); }},
      {"huge rows", [](auto& b) { poke<uint64_t>(b, kHead0At, ~uint64_t{0}); }},
      {"positions not increasing",
       [](auto& b) { poke<int64_t>(b, kPositions0At + 8, int64_t{0}); }},
      {"position past the prompt", [](auto& b) { poke<int64_t>(b, kPositions0At, int64_t{1000}); }},
      {"key record length", [](auto& b) { poke<uint64_t>(b, kHead0At + 8, ~uint64_t{0} / 2); }},
      {"zero layers", [](auto& b) { poke<uint32_t>(b, offsetof(KvcHeader, n_layers), 0); }},
      {"too many layers",
       [](auto& b) { poke<uint32_t>(b, offsetof(KvcHeader, n_layers), 1u << 30); }},
      {"heads not a multiple",
       [](auto& b) { poke<uint32_t>(b, offsetof(KvcHeader, n_kv_heads), 3); }},
      {"reserved header bytes", [](auto& b) { b[offsetof(KvcHeader, reserved)] = 1; }},
      {"tokens past the payload",
       [](auto& b) { poke<uint64_t>(b, offsetof(KvcHeader, n_tokens), uint64_t{1} << 40); }},
  };
  for (const auto& [what, edit] : edits) {
    std::vector<uint8_t> b = v.bytes;
    edit(b);
    reseal(b);
    expect_kind(b, KvcErrorKind::malformed, what);
  }
}

// The KIVI store record of layer 0, KV head 0's keys: its counts and values are checked too.
TEST(KvcFile, MalformedKiviRecordsAreNamed) {
  const Valid& v = valid_file(CodecKind::kivi2);
  KvcHeadRecord head;
  std::memcpy(&head, v.bytes.data() + kHead0At, sizeof head);
  const size_t key_at = kPositions0At + head.n_rows * sizeof(int64_t);
  KvcKiviStore store;
  std::memcpy(&store, v.bytes.data() + key_at, sizeof store);
  ASSERT_GT(store.n_blocks, 0u);
  ASSERT_GT(store.n_sinks, 0u);
  const size_t sinks_at = key_at + sizeof(KvcKiviStore);
  const size_t blocks_at = sinks_at + (store.n_sinks + store.n_resid) * kD * sizeof(fp16_t);
  const size_t params_at = blocks_at + store.n_blocks * sizeof(KiviKeyBlock);
  const std::vector<std::pair<std::string, std::function<void(std::vector<uint8_t>&)>>> edits = {
      {"sinks above kivi_fp16_sinks",
       [&](auto& b) { poke<uint64_t>(b, key_at + offsetof(KvcKiviStore, sink_slots_left), 5); }},
      {"row counts disagree",
       [&](auto& b) { poke<uint64_t>(b, key_at + offsetof(KvcKiviStore, n_quant), 1); }},
      {"NaN in the sinks", [&](auto& b) { poke<uint16_t>(b, sinks_at, 0x7e00); }},
      {"block holding too many rows",
       [&](auto& b) { poke<uint32_t>(b, blocks_at, uint32_t{100}); }},
      {"block octets out of order",
       [&](auto& b) { poke<uint32_t>(b, blocks_at + 4, uint32_t{3}); }},
      {"negative scale", [&](auto& b) { poke<uint16_t>(b, params_at, 0xbc00); }},
      {"infinite zero point",
       [&](auto& b) { poke<uint16_t>(b, params_at + kD * sizeof(fp16_t), 0x7c00); }},
      {"value store with key blocks",
       [&](auto& b) {
         const size_t value_at = key_at + head.key_bytes;
         poke<uint64_t>(b, value_at + offsetof(KvcKiviStore, n_blocks), 1);
       }},
  };
  for (const auto& [what, edit] : edits) {
    std::vector<uint8_t> b = v.bytes;
    edit(b);
    reseal(b);
    expect_kind(b, KvcErrorKind::malformed, what);
  }
}

}  // namespace
}  // namespace snapkv
