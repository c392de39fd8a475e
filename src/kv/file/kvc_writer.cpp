// Writing .kvc files (kv/file/kvc_file.h): the header, the config, the tokens and every layer's
// heads in the layout of kv/file/kvc_format.h, then an atomic replace of the target.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "kv/file/kvc_bytes.h"
#include "snapkv/kv/file/kvc_file.h"
#include "snapkv/kv/file/kvc_format.h"
#include "snapkv/util/output_file.h"
#include "snapkv/util/sha256.h"
#include "snapkv/util/text.h"

namespace snapkv {
namespace {

constexpr const char* kComponent = "kvc";

template <size_t N>
void put_name(char (&field)[N], std::string_view name) {
  SNAPKV_CHECK(name.size() < N);  // the enum names are short
  std::memset(field, 0, N);
  std::memcpy(field, name.data(), name.size());
}

KvcConfigRecord config_record(const CacheConfig& c) {
  KvcConfigRecord r{};
  put_name(r.policy, to_string(c.policy));
  put_name(r.codec, to_string(c.codec));
  put_name(r.pool, to_string(c.pool));
  put_name(r.query_source, to_string(c.query_source));
  put_name(r.chunk_mode, to_string(c.chunk_mode));
  r.budget = c.budget;
  r.window = c.window;
  r.n_sink = c.n_sink;
  r.kernel = c.kernel;
  r.seed = c.seed;
  r.chunk_size = c.chunk_size;
  r.kivi_group = c.kivi_group;
  r.kivi_residual = kivi_residual_of(c);
  r.kivi_fp16_sinks = kivi_fp16_sinks_of(c);  // resolved (kv/core/config.h defaults)
  r.rotation_seed = c.rotation_seed;
  r.kitty_channels = c.kitty_channels;
  r.keep_window = c.keep_window ? 1 : 0;
  r.causal = c.causal ? 1 : 0;
  return r;
}

KvcAllocationRecord allocation_record(const CacheConfig& c) {
  KvcAllocationRecord r{};
  put_name(r.head_allocation, to_string(c.head_allocation));
  put_name(r.layer_allocation, to_string(c.layer_allocation));
  r.ada_floor = c.ada_floor;
  r.pyramid_beta = c.pyramid_beta;
  r.decode_budget = c.decode_budget;
  r.decode_interval = c.decode_interval;
  if (c.codec == CodecKind::gear) {
    r.codec_fraction = c.gear_sparse;
    r.codec_count = static_cast<uint32_t>(c.gear_rank);
    r.codec_bits = static_cast<uint32_t>(c.gear_bits);
  } else if (codec_routes_rows(c.codec)) {
    r.codec_fraction = zip_salient_of(c);
    r.codec_bits = static_cast<uint32_t>(c.zip_high_bits);
  }
  return r;
}

bool same_config(const CacheConfig& a, const CacheConfig& b) {
  const KvcConfigRecord ra = config_record(a), rb = config_record(b);
  const KvcAllocationRecord xa = allocation_record(a), xb = allocation_record(b);
  return std::memcmp(&ra, &rb, sizeof ra) == 0 && std::memcmp(&xa, &xb, sizeof xa) == 0;
}

void check_caches(std::span<const int32_t> tokens, std::span<const LayerCache> caches) {
  if (tokens.empty()) throw_invalid(kComponent, "no prompt tokens", "0", ">= 1 token");
  if (caches.empty()) throw_invalid(kComponent, "no layer caches", "0", ">= 1 layer");
  const LayerCache& first = caches[0];
  for (size_t l = 0; l < caches.size(); ++l) {
    const LayerCache& c = caches[l];
    const CacheDims& d = c.dims();
    if (d.n_heads != first.dims().n_heads || d.n_kv_heads != first.dims().n_kv_heads ||
        d.head_dim != first.dims().head_dim || !same_config(c.config(), first.config())) {
      throw_invalid(kComponent, "layer " + num(l) + " differs from layer 0",
                    "other dimensions or config", "one CacheConfig and shape for every layer");
    }
    // Layer l is restored as layer l of caches.size() (kv/file/kvc_format.h): the random policy's
    // seed and the PyramidKV share must be those.
    const bool pyramid = c.config().layer_allocation == LayerAllocation::pyramid;
    if (c.layer_index() != l || (pyramid && c.n_layers() != caches.size())) {
      throw_invalid(kComponent, "layer " + num(l) + " was built as another layer",
                    "layer_index " + num(c.layer_index()) + ", n_layers " + num(c.n_layers()),
                    "layer_index " + num(l) + (pyramid ? ", n_layers " + num(caches.size()) : ""));
    }
    if (c.prompt_open()) {
      throw_invalid(kComponent, "layer " + num(l) + " has an open prompt",
                    "prefill rows not compressed yet", "end_prompt() before writing");
    }
    if (c.next_position() != caches[0].next_position()) {
      throw_invalid(kComponent, "layer " + num(l) + " next position", num(c.next_position()),
                    "layer 0's " + num(caches[0].next_position()) + " (one numbering per model)");
    }
    if (c.offset() != tokens.size()) {
      throw_invalid(kComponent, "layer " + num(l) + " tokens seen", num(c.offset()),
                    "the " + num(tokens.size()) + " prompt tokens");
    }
    if (d.n_heads > UINT32_MAX || d.head_dim > UINT32_MAX || caches.size() > UINT32_MAX) {
      throw_invalid(kComponent, "dimensions too large", num(d.n_heads), "< 2^32");
    }
  }
}

}  // namespace

std::string_view to_string(KvcErrorKind kind) {
  switch (kind) {
    case KvcErrorKind::io:
      return "io";
    case KvcErrorKind::truncated:
      return "truncated";
    case KvcErrorKind::not_kvc:
      return "not_kvc";
    case KvcErrorKind::wrong_version:
      return "wrong_version";
    case KvcErrorKind::wrong_model:
      return "wrong_model";
    case KvcErrorKind::corrupted:
      return "corrupted";
    case KvcErrorKind::malformed:
      return "malformed";
  }
  return "unknown";
}

std::string kvc_model_name(std::string_view name) {
  name = name.substr(0, name.find('\0'));
  constexpr size_t kMax = sizeof(KvcModelRecord::model_name) - 1;
  if (name.size() <= kMax) return std::string(name);
  size_t n = kMax;
  // Back up over UTF-8 continuation bytes (10xxxxxx) so no character is cut in half.
  while (n > 0 && (static_cast<uint8_t>(name[n]) & 0xC0) == 0x80) --n;
  return std::string(name.substr(0, n));
}

std::vector<uint8_t> encode_kvc(const ModelFingerprint& fingerprint,
                                std::span<const int32_t> tokens, std::span<const LayerCache> caches,
                                const KvcLabels& labels) {
  check_caches(tokens, caches);
  if (labels.note.size() > kKvcMaxNoteBytes) {
    throw_invalid(kComponent, "note too long", num(labels.note.size()) + " bytes",
                  "<= " + num(kKvcMaxNoteBytes) + " bytes");
  }
  const CacheDims& dims = caches[0].dims();
  std::vector<uint8_t> out(sizeof(KvcHeader));
  kvc::append_pod(out, config_record(caches[0].config()));
  kvc::append_pod(out, allocation_record(caches[0].config()));
  KvcModelRecord model{};
  const std::string name = kvc_model_name(labels.model_name);
  std::memcpy(model.model_name, name.data(), name.size());
  model.note_bytes = labels.note.size();
  kvc::append_pod(out, model);
  kvc::append_array(out, labels.note.data(), labels.note.size());
  kvc::append_array(out, tokens.data(), tokens.size());
  for (const LayerCache& cache : caches) {
    kvc::append_pod(out, KvcLayerRecord{cache.offset(), cache.compressions()});
    const LayerCache::DecodeWindow recent = cache.decode_window();
    kvc::append_pod(out, KvcDecodeRecord{recent.reselections, recent.positions.size()});
    kvc::append_array(out, recent.positions.data(), recent.positions.size());
    kvc::append_array(out, recent.queries.data(), recent.queries.size());
    for (size_t h = 0; h < dims.n_kv_heads; ++h) {
      const std::span<const int64_t> pos = cache.positions(h);
      const size_t head_at = out.size();
      kvc::append_pod(out, KvcHeadRecord{});
      kvc::append_array(out, pos.data(), pos.size());
      const size_t key_at = out.size();
      cache.keys(h).save(out);
      const size_t value_at = out.size();
      cache.values(h).save(out);
      const KvcHeadRecord head{pos.size(), value_at - key_at, out.size() - value_at};
      std::memcpy(out.data() + head_at, &head, sizeof head);
    }
  }
  KvcHeader header{};
  std::memcpy(header.magic, kKvcMagic, sizeof header.magic);
  header.version = kKvcVersion;
  header.header_bytes = sizeof(KvcHeader);
  header.payload_bytes = out.size() - sizeof(KvcHeader);
  std::memcpy(header.model_fingerprint, fingerprint.data(), fingerprint.size());
  header.n_layers = static_cast<uint32_t>(caches.size());
  header.n_heads = static_cast<uint32_t>(dims.n_heads);
  header.n_kv_heads = static_cast<uint32_t>(dims.n_kv_heads);
  header.head_dim = static_cast<uint32_t>(dims.head_dim);
  header.n_tokens = tokens.size();
  header.position_shift = tokens.size() - caches[0].next_position();
  std::memcpy(out.data(), &header, sizeof header);
  const size_t covered = offsetof(KvcHeader, model_fingerprint);
  const Sha256Digest sum = sha256(std::span<const uint8_t>(out).subspan(covered));
  std::memcpy(out.data() + offsetof(KvcHeader, checksum), sum.data(), sum.size());
  return out;
}

void write_kvc(const std::string& path, const ModelFingerprint& fingerprint,
               std::span<const int32_t> tokens, std::span<const LayerCache> caches,
               const KvcLabels& labels) {
  const std::vector<uint8_t> bytes = encode_kvc(fingerprint, tokens, caches, labels);
  // util's one writer: a temporary file beside the target, fsync, rename; a .kvc is mapped when
  // read, so anything but a regular file (or no file) at the path is refused.
  try {
    OutputFile out = OutputFile::open(path, kComponent, ".kvc file", Seek::required);
    out.write(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    out.commit();
  } catch (const RuntimeError& e) {
    throw KvcError(KvcErrorKind::io, e.what());
  }
}

}  // namespace snapkv
