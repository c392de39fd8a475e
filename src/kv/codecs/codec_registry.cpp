// The codec registry: which codec specs (kv/core/codec_spec.h) have a store, each under its
// CodecKind tag with the defaults of its parameters, and make_row_store / load_row_store, which
// map a config's spec to its RowStore.
#include <array>
#include <string>

#include "kv/codecs/stores.h"
#include "snapkv/kv/core/codec_spec.h"
#include "snapkv/kv/core/row_store.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

struct BuiltCodec {
  CodecKind kind;
  CodecSpec spec;
  // The codec's own settings of the CacheConfig fields whose default means "the codec's"
  // (kv/core/config.h, "Per-codec defaults").
  size_t kivi_residual;
  size_t kivi_fp16_sinks;
  double zip_salient;
};

using F = CodecFamily;
constexpr size_t kCodecs = 14;
// In CodecKind order. Residual 32 where a 1K prompt's 128 fp16 rows would be 12% of the cache
// (docs/results/codecs-zipcacher/, docs/results/codecs-kivi42/); 4 fp16 sinks where the attention
// sinks carry most of what the 2.5-bit caches lose (docs/results/codecs-25bit/).
constexpr std::array<BuiltCodec, kCodecs> kBuilt{{
    {CodecKind::fp16, {F::fp16, 0, 0, false, false}, 128, 0, 0.0},
    {CodecKind::kivi2, {F::kivi, 2, 2, false, false}, 128, 0, 0.0},
    {CodecKind::kivi4, {F::kivi, 4, 4, false, false}, 128, 0, 0.0},
    {CodecKind::kivi2r, {F::kivi, 2, 2, true, true}, 128, 0, 0.0},
    {CodecKind::kivi4r, {F::kivi, 4, 4, true, true}, 128, 0, 0.0},
    {CodecKind::kitty, {F::kitty, 2, 2, false, false}, 128, 0, 0.0},
    {CodecKind::zipcache, {F::zipcache, 0, 0, false, false}, 128, 0, 0.2},
    {CodecKind::gear, {F::gear, 0, 0, false, false}, 128, 0, 0.0},
    // Keys plain: zipcache's per-channel key scales already tame outlier channels, and rotated
    // keys measured worse (docs/results/codecs-zipcacher/).
    {CodecKind::zipcacher, {F::zipcache, 0, 0, false, true}, 32, 0, 0.7},
    {CodecKind::kivi42, {F::kivi, 4, 2, false, false}, 32, 4, 0.0},
    {CodecKind::kivi24, {F::kivi, 2, 4, false, false}, 32, 0, 0.0},
    {CodecKind::kivi42r, {F::kivi, 4, 2, false, true}, 32, 0, 0.0},
    {CodecKind::kivi32, {F::kivi, 3, 2, false, false}, 32, 4, 0.0},
    {CodecKind::kivimix, {F::kivimix, 2, 2, false, false}, 32, 4, 0.0},
}};

constexpr bool tags_in_order() {
  for (size_t i = 0; i < kBuilt.size(); ++i) {
    if (static_cast<size_t>(kBuilt[i].kind) != i) return false;
  }
  return true;
}
static_assert(tags_in_order(), "kBuilt lists every CodecKind once, in enum order");

const BuiltCodec& entry(CodecKind k) {
  const auto i = static_cast<size_t>(k);
  if (i >= kBuilt.size()) {
    throw_invalid("kv", "codec is not a built codec", std::to_string(i), built_codec_names());
  }
  return kBuilt[i];
}

// The canonical names, printed once by the grammar.
const std::array<std::string, kCodecs>& names() {
  static const std::array<std::string, kCodecs> out = [] {
    std::array<std::string, kCodecs> n;
    for (size_t i = 0; i < kBuilt.size(); ++i) n[i] = codec_name(kBuilt[i].spec);
    return n;
  }();
  return out;
}

// The config a rotated codec's stores quantize with: the spec without its rotation, the outer
// codec's defaults resolved first (zipcacher's residual 32 and salient 0.7 are not zipcache's).
CacheConfig unrotated_config(const CacheConfig& config) {
  CacheConfig c = config;
  c.kivi_residual = kivi_residual_of(config);
  c.zip_salient = zip_salient_of(config);
  c.kivi_fp16_sinks = kivi_fp16_sinks_of(config);
  CodecSpec plain = codec_spec(config.codec);
  plain.rotate_keys = plain.rotate_values = false;
  c.codec = codec_kind(plain);
  return c;
}

bool role_rotated(const CodecSpec& s, RowRole role) {
  return role == RowRole::key ? s.rotate_keys : s.rotate_values;
}

std::unique_ptr<RowStore> make_plain(const CacheConfig& config, RowRole role, size_t head_dim) {
  switch (codec_spec(config.codec).family) {
    case F::fp16:
      return make_fp16_row_store(head_dim);
    case F::kivi:
    case F::kitty:
    case F::kivimix:
      return make_kivi_row_store(config, role, head_dim);
    case F::zipcache:
      return make_zipcache_row_store(config, role, head_dim);
    case F::gear:
      return make_gear_row_store(config, role, head_dim);
  }
  throw_invalid("kv", "codec family unknown", std::string(to_string(config.codec)),
                built_codec_names());
}

std::unique_ptr<RowStore> load_plain(const CacheConfig& config, RowRole role, size_t head_dim,
                                     std::span<const uint8_t> record) {
  switch (codec_spec(config.codec).family) {
    case F::fp16:
      return load_fp16_row_store(head_dim, record);
    case F::kivi:
    case F::kitty:
    case F::kivimix:
      return load_kivi_row_store(config, role, head_dim, record);
    case F::zipcache:
      return load_zipcache_row_store(config, role, head_dim, record);
    case F::gear:
      return load_gear_row_store(config, role, head_dim, record);
  }
  throw_invalid("kv", "codec family unknown", std::string(to_string(config.codec)),
                built_codec_names());
}

}  // namespace

const CodecSpec& codec_spec(CodecKind k) {
  return entry(k).spec;
}

bool codec_is_built(CodecKind k) {
  return static_cast<size_t>(k) < kBuilt.size();
}

CodecKind codec_kind(const CodecSpec& spec) {
  for (const BuiltCodec& b : kBuilt) {
    if (b.spec == spec) return b.kind;
  }
  const std::string name = codec_name(spec);
  throw_invalid("kv", "codec '" + name + "' (" + describe(spec) + ") has no store",
                "'" + name + "'", "a built codec: " + std::string(built_codec_names()));
}

std::span<const CodecKind> built_codecs() {
  static const std::array<CodecKind, kCodecs> out = [] {
    std::array<CodecKind, kCodecs> k{};
    for (size_t i = 0; i < kBuilt.size(); ++i) k[i] = kBuilt[i].kind;
    return k;
  }();
  return out;
}

std::string_view built_codec_names() {
  static const std::string out = [] {
    std::string s;
    for (const std::string& n : names()) {
      if (!s.empty()) s += '|';
      s += n;
    }
    return s;
  }();
  return out;
}

std::string_view to_string(CodecKind k) {
  if (!codec_is_built(k)) return "unknown";
  return names()[static_cast<size_t>(k)];
}

CodecKind parse_codec(std::string_view s) {
  return codec_kind(parse_codec_spec(s));
}

int codec_kivi_bits(CodecKind k, bool key_role) {
  const CodecSpec& s = codec_spec(k);
  return key_role ? s.key_bits : s.value_bits;
}

bool codec_is_rotated(CodecKind k) {
  return codec_spec(k).rotated();
}

bool codec_routes_rows(CodecKind k) {
  return codec_spec(k).family == F::zipcache;
}

size_t codec_default_kivi_residual(CodecKind k) {
  return entry(k).kivi_residual;
}

size_t codec_default_kivi_fp16_sinks(CodecKind k) {
  return entry(k).kivi_fp16_sinks;
}

double codec_default_zip_salient(CodecKind k) {
  return entry(k).zip_salient;
}

std::unique_ptr<RowStore> make_row_store(const CacheConfig& config, RowRole role, size_t head_dim) {
  if (head_dim == 0) throw_invalid("codec", "head_dim must be positive", "0", ">= 1");
  const CodecSpec& spec = codec_spec(config.codec);
  if (!spec.rotated()) return make_plain(config, role, head_dim);
  const CacheConfig plain = unrotated_config(config);
  if (!role_rotated(spec, role)) return make_plain(plain, role, head_dim);
  return make_rotated_row_store(make_plain(plain, role, head_dim), config.rotation_seed);
}

std::unique_ptr<RowStore> load_row_store(const CacheConfig& config, RowRole role, size_t head_dim,
                                         std::span<const uint8_t> record) {
  if (head_dim == 0) throw_invalid("codec", "head_dim must be positive", "0", ">= 1");
  const CodecSpec& spec = codec_spec(config.codec);
  if (!spec.rotated()) return load_plain(config, role, head_dim, record);
  const CacheConfig plain = unrotated_config(config);
  if (!role_rotated(spec, role)) return load_plain(plain, role, head_dim, record);
  return load_rotated_row_store(config.rotation_seed, record, [&](std::span<const uint8_t> rest) {
    return load_plain(plain, role, head_dim, rest);
  });
}

}  // namespace snapkv
