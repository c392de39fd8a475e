// .kvc files for the caches that version 2 of the format added (kv/file/kvc_format.h): AdaKV's
// and head types' (duo-) ragged heads, PyramidKV's per-layer budgets and the decode-time budget's
// query window all come back bit for bit (positions, decoded rows, the bytes written again,
// attention and appends after), on fp16 and KIVI stores; a version-1 file still reads as the same
// caches; versions outside the known range are named errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kv/kv_test_util.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/kv/file/kvc_file.h"
#include "snapkv/kv/file/kvc_format.h"
#include "snapkv/util/sha256.h"

namespace snapkv {
namespace {

using test::random_normal;
using test::view;

constexpr size_t kHeads = 4, kKv = 2, kS = 90, kD = 8, kW = 6, kLayers = 3;

ModelFingerprint fingerprint() {
  ModelFingerprint f{};
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<uint8_t>(11 * i + 1);
  return f;
}

// Applies a method name's allocation prefix ("ada-snapkv", "pyramid-kvzip") as the CLI does; the
// names that also set the query source (kvzap-snapkv, kvzap-proxy) go through parse_method.
CacheConfig make_config(std::string_view method, CodecKind codec) {
  CacheConfig c;
  if (method.find("kvzap-") != std::string_view::npos) {
    c = parse_method(method, c).config;
  } else {
    c.policy = parse_policy(apply_allocation_prefix(method, c));
  }
  c.codec = codec;
  c.budget = 24;
  c.window = kW;
  c.n_sink = 2;
  c.kernel = 3;
  c.kivi_group = 4;
  c.kivi_residual = 8;
  c.pyramid_beta = 4.0;
  c.duo_recent = 6;
  return c;
}

// kLayers caches (layer l of kLayers) after one prefill of kS tokens, prompt ended; kvzip and kvzap
// get their scores from outside as the model's reconstruction pass or scorer would give them. Head
// 0's keys carry strong rows so that AdaKV moves budget between the heads.
std::vector<LayerCache> prefilled(const CacheConfig& config, uint64_t seed) {
  std::vector<LayerCache> caches;
  for (size_t l = 0; l < kLayers; ++l) {
    LayerCache cache(CacheDims{kHeads, kKv, kD}, config, l, kLayers);
    // Head types (duo-): one streaming head, which one alternating with the layer.
    if (head_allocation_duo(config.head_allocation)) {
      cache.set_head_types(l % 2 == 0 ? std::vector<uint8_t>{1, 0} : std::vector<uint8_t>{0, 1});
    }
    auto k = random_normal(kKv * kS * kD, seed + 10 * l, 0.3f);
    const auto v = random_normal(kKv * kS * kD, seed + 10 * l + 1);
    auto q = random_normal(kHeads * kW * kD, seed + 10 * l + 2, 0.3f);
    for (size_t r = 0; r < kHeads * kW; ++r) q[r * kD] += 2.0f;
    for (size_t i = 10; i < kS - kW; i += 7) k[i * kD] += 3.0f;  // head 0 only
    const Tensor3 qt = view(q, kHeads, kW, kD);
    cache.update(view(k, kKv, kS, kD), view(v, kKv, kS, kD), &qt, UpdateKind::prefill);
    if (policy_takes_external_scores(config.policy)) {
      std::vector<float> scores = random_normal(kKv * cache.size(), seed + 10 * l + 3);
      // kvzap_snapkv's prior is a score kvzap's scorer gives: positive (kv/core/prior_mix.h).
      if (config.policy == PolicyKind::kvzap_snapkv) {
        for (float& x : scores) x = std::abs(x);
      }
      cache.compress_with_scores(scores);
    } else {
      cache.end_prompt();
    }
    caches.push_back(std::move(cache));
  }
  return caches;
}

std::vector<int32_t> tokens() {
  std::vector<int32_t> t(kS);
  for (size_t i = 0; i < kS; ++i) t[i] = static_cast<int32_t>((i * 13) % 97);
  return t;
}

void expect_same_cache(const LayerCache& a, const LayerCache& b, const std::string& what) {
  EXPECT_EQ(a.offset(), b.offset()) << what;
  EXPECT_EQ(a.compressions(), b.compressions()) << what;
  EXPECT_EQ(a.decode_reselections(), b.decode_reselections()) << what;
  EXPECT_EQ(a.layer_budget(), b.layer_budget()) << what;
  EXPECT_EQ(a.stats().bytes_stored, b.stats().bytes_stored) << what;
  for (size_t h = 0; h < kKv; ++h) {
    ASSERT_EQ(a.size(h), b.size(h)) << what << " head " << h;
    EXPECT_TRUE(std::ranges::equal(a.positions(h), b.positions(h))) << what;
    const size_t n = a.size(h) * kD;
    std::vector<float> ka(n), kb(n), va(n), vb(n);
    a.read_keys(h, ka.data());
    b.read_keys(h, kb.data());
    a.read_values(h, va.data());
    b.read_values(h, vb.data());
    EXPECT_EQ(0, std::memcmp(ka.data(), kb.data(), n * sizeof(float))) << what;
    EXPECT_EQ(0, std::memcmp(va.data(), vb.data(), n * sizeof(float))) << what;
  }
  const LayerDecodeWindow wa = a.decode_window(), wb = b.decode_window();
  EXPECT_EQ(wa.positions, wb.positions) << what;
  ASSERT_EQ(wa.queries.size(), wb.queries.size()) << what;
  if (!wa.queries.empty()) {  // bit for bit (memcmp: NaN-safe, and -0 != +0)
    EXPECT_EQ(0, std::memcmp(wa.queries.data(), wb.queries.data(), wa.queries.size() * 4)) << what;
  }
}

// Decode steps with their queries (so a decode budget re-selects) through both caches.
void expect_same_continuation(LayerCache& a, LayerCache& b, uint64_t seed,
                              const std::string& what) {
  for (size_t step = 0; step < 14; ++step) {  // crosses the KIVI residual (R = 8) boundary
    const auto k = random_normal(kKv * kD, seed + 3 * step);
    const auto v = random_normal(kKv * kD, seed + 3 * step + 1);
    const auto q = random_normal(kHeads * kD, seed + 3 * step + 2);
    std::vector<float> out_a(kHeads * kD), out_b(kHeads * kD);
    const Tensor3 qt = view(q, kHeads, 1, kD);
    a.attend(out_a.data(), qt, view(k, kKv, 1, kD), view(v, kKv, 1, kD));
    b.attend(out_b.data(), qt, view(k, kKv, 1, kD), view(v, kKv, 1, kD));
    ASSERT_EQ(0, std::memcmp(out_a.data(), out_b.data(), out_a.size() * sizeof(float)))
        << what << " step " << step;
    a.update(view(k, kKv, 1, kD), view(v, kKv, 1, kD), &qt, UpdateKind::decode);
    b.update(view(k, kKv, 1, kD), view(v, kKv, 1, kD), &qt, UpdateKind::decode);
  }
  expect_same_cache(a, b, what + " after decoding");
}

void expect_round_trip(const CacheConfig& config, const std::string& what) {
  const ModelFingerprint fp = fingerprint();
  std::vector<LayerCache> saved = prefilled(config, 300);
  const std::vector<uint8_t> bytes = encode_kvc(fp, tokens(), saved);
  KvcExpect expect;
  expect.fingerprint = &fp;
  expect.n_layers = kLayers;
  KvcContents loaded = decode_kvc(bytes, expect);
  EXPECT_EQ(loaded.version, kKvcVersion) << what;
  EXPECT_EQ(loaded.config.policy, config.policy) << what;
  EXPECT_EQ(loaded.config.query_source, config.query_source) << what;
  EXPECT_EQ(loaded.config.head_allocation, config.head_allocation) << what;
  EXPECT_EQ(loaded.config.layer_allocation, config.layer_allocation) << what;
  EXPECT_EQ(loaded.config.pyramid_beta, config.pyramid_beta) << what;
  EXPECT_EQ(loaded.config.decode_budget, config.decode_budget) << what;
  EXPECT_EQ(loaded.config.decode_interval, config.decode_interval) << what;
  ASSERT_EQ(loaded.caches.size(), kLayers) << what;
  EXPECT_EQ(encode_kvc(fp, tokens(), loaded.caches), bytes) << what;
  for (size_t l = 0; l < kLayers; ++l) {
    EXPECT_EQ(loaded.caches[l].n_layers(), kLayers) << what;
    expect_same_cache(saved[l], loaded.caches[l], what + " layer " + std::to_string(l));
    expect_same_continuation(saved[l], loaded.caches[l], 700 + l,
                             what + " layer " + std::to_string(l));
  }
}

TEST(KvcAllocation, RaggedAndPyramidCachesRoundTripExactly) {
  for (const char* method :
       {"ada-snapkv", "pyramid-kvzip", "ada-pyramid-snapkv", "ada-kvzap", "pyramid-kvzap",
        "duo-snapkv", "duo-ada-kvzip", "duo-pyramid-kvzap", "duo-ada-pyramid-snapkv",
        "ada-kvzap-proxy", "pyramid-kvzap-snapkv", "kvzap-snapkv", "duo-ada-kvzap-snapkv"}) {
    for (const CodecKind codec : {CodecKind::fp16, CodecKind::kivi2}) {
      const CacheConfig config = make_config(method, codec);
      const std::string what = std::string(method) + "+" + std::string(to_string(codec));
      // The saved caches are what the test is about: ragged heads, different layer budgets.
      const std::vector<LayerCache> probe = prefilled(config, 300);
      if (config.head_allocation != HeadAllocation::uniform) {
        bool ragged = false;
        for (const LayerCache& c : probe) ragged = ragged || c.size(0) != c.size(1);
        ASSERT_TRUE(ragged) << what << ": no layer has heads of different sizes";
      }
      if (config.layer_allocation == LayerAllocation::pyramid) {
        ASSERT_GT(probe.front().stats().rows_kept, probe.back().stats().rows_kept) << what;
      }
      expect_round_trip(config, what);
    }
  }
}

TEST(KvcAllocation, DecodeBudgetWindowRoundTripsExactly) {
  for (const CodecKind codec : {CodecKind::fp16, CodecKind::kivi2}) {
    CacheConfig config = make_config("snapkv", codec);
    config.decode_budget = 20;
    config.decode_interval = 4;
    const std::string what = "decode budget " + std::string(to_string(codec));
    const std::vector<LayerCache> probe = prefilled(config, 300);
    ASSERT_EQ(probe[0].decode_window().positions.size(), kW) << what;
    expect_round_trip(config, what);
  }
}

// ---- versions ---------------------------------------------------------------------------------

void reseal(std::vector<uint8_t>& bytes) {
  const size_t from = offsetof(KvcHeader, model_fingerprint);
  const Sha256Digest sum = sha256(std::span<const uint8_t>(bytes).subspan(from));
  std::memcpy(bytes.data() + offsetof(KvcHeader, checksum), sum.data(), sum.size());
}

template <class T>
T peek(const std::vector<uint8_t>& bytes, size_t at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof value);
  return value;
}

// The version-1 bytes of a current file with uniform allocation, no decode budget and no note: the
// same records without KvcAllocationRecord, KvcModelRecord and the per-layer KvcDecodeRecords.
std::vector<uint8_t> as_version_1(const std::vector<uint8_t>& v2) {
  const KvcHeader header = peek<KvcHeader>(v2, 0);
  std::vector<uint8_t> out(v2.begin(), v2.begin() + sizeof(KvcHeader) + sizeof(KvcConfigRecord));
  size_t at = out.size() + sizeof(KvcAllocationRecord) + sizeof(KvcModelRecord);
  const size_t tokens_end = at + header.n_tokens * sizeof(int32_t);
  out.insert(out.end(), v2.begin() + static_cast<std::ptrdiff_t>(at),
             v2.begin() + static_cast<std::ptrdiff_t>(tokens_end));
  at = tokens_end;
  for (size_t l = 0; l < header.n_layers; ++l) {
    out.insert(out.end(), v2.begin() + static_cast<std::ptrdiff_t>(at),
               v2.begin() + static_cast<std::ptrdiff_t>(at + sizeof(KvcLayerRecord)));
    at += sizeof(KvcLayerRecord);
    EXPECT_EQ(peek<KvcDecodeRecord>(v2, at).n_recent, 0u);
    at += sizeof(KvcDecodeRecord);
    for (size_t h = 0; h < header.n_kv_heads; ++h) {
      const auto head = peek<KvcHeadRecord>(v2, at);
      const size_t end =
          at + sizeof head + head.n_rows * sizeof(int64_t) + head.key_bytes + head.value_bytes;
      out.insert(out.end(), v2.begin() + static_cast<std::ptrdiff_t>(at),
                 v2.begin() + static_cast<std::ptrdiff_t>(end));
      at = end;
    }
  }
  EXPECT_EQ(at, v2.size());
  KvcHeader h1 = header;
  h1.version = 1;
  h1.payload_bytes = out.size() - sizeof(KvcHeader);
  std::memcpy(out.data(), &h1, sizeof h1);
  reseal(out);
  return out;
}

TEST(KvcAllocation, Version1FilesStillReadAsTheSameCaches) {
  for (const CodecKind codec : {CodecKind::fp16, CodecKind::kivi2}) {
    const std::string what = "version 1 " + std::string(to_string(codec));
    CacheConfig config = make_config("snapkv", codec);
    config.pyramid_beta = CacheConfig{}.pyramid_beta;  // a v1 file holds no beta: the default
    std::vector<LayerCache> saved = prefilled(config, 500);
    const std::vector<uint8_t> v2 = encode_kvc(fingerprint(), tokens(), saved);
    const std::vector<uint8_t> v1 = as_version_1(v2);
    ASSERT_EQ(v1.size() + sizeof(KvcAllocationRecord) + sizeof(KvcModelRecord) +
                  kLayers * sizeof(KvcDecodeRecord),
              v2.size());
    KvcContents loaded = decode_kvc(v1);
    EXPECT_EQ(loaded.version, 1u) << what;
    EXPECT_EQ(loaded.config.head_allocation, HeadAllocation::uniform) << what;
    EXPECT_EQ(loaded.config.decode_budget, 0u) << what;
    EXPECT_EQ(encode_kvc(fingerprint(), tokens(), loaded.caches), v2) << what;
    for (size_t l = 0; l < kLayers; ++l) {
      expect_same_cache(saved[l], loaded.caches[l], what);
      expect_same_continuation(saved[l], loaded.caches[l], 800 + l, what);
    }
  }
}

TEST(KvcAllocation, RaggedHeadsNeedAdaInTheConfig) {
  // A version-1 file cannot say ada, so ragged heads in it (or in a uniform v2 file) are refused:
  // here a uniform v2 file whose layer 0 head 1 claims one row fewer than head 0.
  std::vector<LayerCache> saved = prefilled(make_config("snapkv", CodecKind::fp16), 600);
  std::vector<uint8_t> b = encode_kvc(fingerprint(), tokens(), saved);
  const size_t head0 = sizeof(KvcHeader) + sizeof(KvcConfigRecord) + sizeof(KvcAllocationRecord) +
                       sizeof(KvcModelRecord) + kS * sizeof(int32_t) + sizeof(KvcLayerRecord) +
                       sizeof(KvcDecodeRecord);
  const auto h0 = peek<KvcHeadRecord>(b, head0);
  const size_t head1 =
      head0 + sizeof h0 + h0.n_rows * sizeof(int64_t) + h0.key_bytes + h0.value_bytes;
  auto h1 = peek<KvcHeadRecord>(b, head1);
  h1.n_rows -= 1;
  std::memcpy(b.data() + head1, &h1, sizeof h1);
  reseal(b);
  try {
    decode_kvc(b);
    ADD_FAILURE() << "ragged uniform heads accepted";
  } catch (const KvcError& e) {
    EXPECT_EQ(e.kind(), KvcErrorKind::malformed) << e.what();
    EXPECT_NE(std::string(e.what()).find("the same in every head"), std::string::npos) << e.what();
  }
}

// Version 3's labels: the model name and the note come back as written; a version-2 file (the
// same bytes without KvcModelRecord) reads with empty labels and is rewritten as version 3.
TEST(KvcAllocation, Version3LabelsAndVersion2Files) {
  const std::vector<LayerCache> saved = prefilled(make_config("snapkv", CodecKind::kivi2), 900);
  const KvcLabels labels{"Tiny Model 0.1B", R"({"note":"é"})"};
  const std::vector<uint8_t> v3 = encode_kvc(fingerprint(), tokens(), saved, labels);
  KvcContents loaded = decode_kvc(v3);
  EXPECT_EQ(loaded.version, 3u);
  EXPECT_EQ(loaded.model_name, labels.model_name);
  EXPECT_EQ(loaded.note, labels.note);
  EXPECT_EQ(encode_kvc(fingerprint(), tokens(), loaded.caches, {loaded.model_name, loaded.note}),
            v3);

  const std::vector<uint8_t> plain = encode_kvc(fingerprint(), tokens(), saved);
  const size_t model_at = sizeof(KvcHeader) + sizeof(KvcConfigRecord) + sizeof(KvcAllocationRecord);
  std::vector<uint8_t> v2(plain.begin(), plain.begin() + static_cast<std::ptrdiff_t>(model_at));
  v2.insert(v2.end(),
            plain.begin() + static_cast<std::ptrdiff_t>(model_at + sizeof(KvcModelRecord)),
            plain.end());
  KvcHeader h = peek<KvcHeader>(v2, 0);
  h.version = 2;
  h.payload_bytes = v2.size() - sizeof(KvcHeader);
  std::memcpy(v2.data(), &h, sizeof h);
  reseal(v2);
  loaded = decode_kvc(v2);
  EXPECT_EQ(loaded.version, 2u);
  EXPECT_EQ(loaded.model_name, "");
  EXPECT_EQ(loaded.note, "");
  EXPECT_EQ(encode_kvc(fingerprint(), tokens(), loaded.caches), plain);  // the rewrite upgrades
  for (size_t l = 0; l < kLayers; ++l) expect_same_cache(saved[l], loaded.caches[l], "v2");

  // Another model's fingerprint: the message names both models and both fingerprints.
  ModelFingerprint other = fingerprint();
  other[0] ^= 1;
  KvcExpect expect;
  expect.fingerprint = &other;
  expect.model_name = "Other Model";
  const std::vector<std::pair<std::vector<uint8_t>, std::string>> files = {
      {v3, "'Tiny Model 0.1B'"}, {v2, "a version-2 file names no model"}};
  for (const auto& [bytes, file_name] : files) {
    try {
      decode_kvc(bytes, expect);
      ADD_FAILURE() << "another model's cache accepted";
    } catch (const KvcError& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.kind(), KvcErrorKind::wrong_model) << m;
      EXPECT_NE(m.find(file_name), std::string::npos) << m;
      EXPECT_NE(m.find("'Other Model'"), std::string::npos) << m;
      EXPECT_NE(m.find(to_hex(other)), std::string::npos) << m;
      EXPECT_NE(m.find(to_hex(fingerprint())), std::string::npos) << m;
    }
  }
}

TEST(KvcAllocation, ModelNamesAreCutAtACharacterAndNotesBounded) {
  EXPECT_EQ(kvc_model_name("abc"), "abc");
  EXPECT_EQ(kvc_model_name(std::string("ab\0cd", 5)), "ab");
  EXPECT_EQ(kvc_model_name(std::string(70, 'x')), std::string(63, 'x'));
  // 62 ASCII bytes then a 2-byte character: byte 63 would split it, so it is left out whole.
  EXPECT_EQ(kvc_model_name(std::string(62, 'x') + "é" + "tail"), std::string(62, 'x'));
  EXPECT_EQ(kvc_model_name(std::string(61, 'x') + "é" + "tail"), std::string(61, 'x') + "é");
  const std::vector<LayerCache> saved = prefilled(make_config("snapkv", CodecKind::fp16), 901);
  const std::vector<uint8_t> b =
      encode_kvc(fingerprint(), tokens(), saved, {std::string(100, 'n'), ""});
  EXPECT_EQ(decode_kvc(b).model_name, std::string(63, 'n'));
  const KvcLabels huge{"m", std::string(kKvcMaxNoteBytes + 1, 'x')};
  EXPECT_THROW(encode_kvc(fingerprint(), tokens(), saved, huge), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
