// Writes the committed .kvc fuzz corpus (tests/kv/kvc_corpus): small valid files for each codec
// (uniform, AdaKV ragged heads, PyramidKV layers, a decode-budget window) and a few named bad
// ones. valid-v1-*.kvc and valid-v2-*.kvc are files of the older versions, kept as they were
// written (the reader still reads them; this tool writes only the current version). Run once when
// the format changes:
//   build/fuzz/kvc_corpus_gen tests/kv/kvc_corpus
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "snapkv/kv/file/kvc_file.h"
#include "snapkv/kv/file/kvc_format.h"

namespace {

using namespace snapkv;

std::vector<uint8_t> make_file(CodecKind codec, PolicyKind policy, size_t sinks, uint64_t seed,
                               HeadAllocation heads = HeadAllocation::uniform,
                               LayerAllocation layers = LayerAllocation::uniform,
                               size_t decode_budget = 0, const std::string& note = {}) {
  constexpr size_t kHeads = 4, kD = 8, kS = 24;
  const size_t kKv = heads == HeadAllocation::ada ? 2 : 1;
  CacheConfig c;
  c.policy = policy;
  c.head_allocation = heads;
  c.layer_allocation = layers;
  c.decode_budget = decode_budget;
  c.decode_interval = 2;
  c.codec = codec;
  c.budget = 12;
  c.window = 4;
  c.n_sink = 2;
  c.chunk_mode = ChunkMode::end_of_prompt;
  c.kivi_group = 4;
  c.kivi_residual = 4;
  c.kivi_fp16_sinks = sinks;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<LayerCache> caches;
  for (size_t l = 0; l < 2; ++l) {
    LayerCache cache(CacheDims{kHeads, kKv, kD}, c, l, 2);
    std::vector<float> k(kKv * kS * kD), v(k.size()), q(kHeads * c.window * kD);
    for (float& x : k) x = dist(rng);
    for (float& x : v) x = dist(rng);
    for (float& x : q) x = dist(rng);
    const Tensor3 qt{q.data(), kHeads, c.window, kD};
    cache.update(Tensor3{k.data(), kKv, kS, kD}, Tensor3{v.data(), kKv, kS, kD},
                 decode_budget > 0 ? &qt : nullptr, UpdateKind::prefill);
    cache.end_prompt();
    caches.push_back(std::move(cache));
  }
  std::vector<int32_t> tokens(kS);
  for (size_t i = 0; i < kS; ++i) tokens[i] = static_cast<int32_t>(i + 3);
  ModelFingerprint fp{};
  fp[0] = 1;
  return encode_kvc(fp, tokens, caches, KvcLabels{"snapkv corpus model", note});
}

void write(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir(argv[1]);
  std::filesystem::create_directories(dir);
  const auto fp16 = make_file(CodecKind::fp16, PolicyKind::snapkv, 0, 1);
  const auto kivi2 = make_file(CodecKind::kivi2, PolicyKind::snapkv, 2, 2);
  const auto kivi4 = make_file(CodecKind::kivi4, PolicyKind::streaming, 0, 3);
  write(dir / "valid-fp16-snapkv.kvc", fp16);
  write(dir / "valid-kivi2-sinks.kvc", kivi2);
  write(dir / "valid-kivi4-streaming.kvc", kivi4);
  write(dir / "valid-full-kivi4.kvc", make_file(CodecKind::kivi4, PolicyKind::full, 0, 4));
  write(dir / "valid-ada-snapkv-fp16.kvc",
        make_file(CodecKind::fp16, PolicyKind::snapkv, 0, 5, HeadAllocation::ada));
  write(dir / "valid-pyramid-knorm-kivi2.kvc",
        make_file(CodecKind::kivi2, PolicyKind::knorm, 0, 6, HeadAllocation::uniform,
                  LayerAllocation::pyramid));
  write(dir / "valid-snapkv-kivimix.kvc",  // head_dim 8: 4 wide key channels, a partial low word
        make_file(CodecKind::kivimix, PolicyKind::snapkv, 2, 8));
  write(dir / "valid-decode-budget-snapkv.kvc",
        make_file(CodecKind::fp16, PolicyKind::snapkv, 0, 7, HeadAllocation::uniform,
                  LayerAllocation::uniform, 10));
  write(dir / "valid-note-fp16-snapkv.kvc",
        make_file(CodecKind::fp16, PolicyKind::snapkv, 0, 9, HeadAllocation::uniform,
                  LayerAllocation::uniform, 0, R"({"chat":1,"messages":[]})"));
  constexpr size_t kModelAt =
      sizeof(KvcHeader) + sizeof(KvcConfigRecord) + sizeof(KvcAllocationRecord);
  auto bad = fp16;
  std::memset(bad.data() + kModelAt, 'n', sizeof(KvcModelRecord::model_name));  // no NUL
  write(dir / "bad-model-name-unterminated.kvc", bad);
  bad = fp16;
  bad[kModelAt + offsetof(KvcModelRecord, note_bytes) + 3] = 1;  // a note past the payload
  write(dir / "bad-note-length.kvc", bad);
  bad = kivi2;
  bad.resize(bad.size() / 2);
  write(dir / "bad-truncated.kvc", bad);
  bad = fp16;
  bad[0] = 'X';
  write(dir / "bad-magic.kvc", bad);
  bad = kivi4;
  bad[offsetof(KvcHeader, version)] = 9;
  write(dir / "bad-version.kvc", bad);
  bad = kivi2;
  bad.push_back(0);
  write(dir / "bad-trailing.kvc", bad);
  bad = fp16;
  std::memset(bad.data() + sizeof(KvcHeader), 'z', 8);  // policy name
  write(dir / "bad-policy-name.kvc", bad);
  bad = make_file(CodecKind::kivimix, PolicyKind::snapkv, 2, 8);
  // -0.0 in a codec field the codec leaves zero: equal to 0.0, but not the bytes a rewrite gives.
  bad[sizeof(KvcHeader) + sizeof(KvcConfigRecord) + offsetof(KvcAllocationRecord, codec_fraction) +
      7] = 0x80;
  write(dir / "bad-negative-zero-codec-field.kvc", bad);
  return 0;
}
