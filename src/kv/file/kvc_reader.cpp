// Reading .kvc files (kv/file/kvc_file.h): the checks run in the order the file comment promises,
// each failure a KvcError of its kind, and nothing from the payload is used before its length was
// checked against what is left.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "kv/file/kvc_bytes.h"
#include "snapkv/kv/core/row_store.h"
#include "snapkv/kv/core/spec.h"
#include "snapkv/kv/file/kvc_file.h"
#include "snapkv/kv/file/kvc_format.h"
#include "snapkv/util/mapped_file.h"
#include "snapkv/util/sha256.h"
#include "snapkv/util/text.h"

namespace snapkv {
namespace {

constexpr const char* kComponent = "kvc";

[[noreturn]] void fail(KvcErrorKind kind, std::string_view what, std::string_view got,
                       std::string_view expected) {
  throw KvcError(kind, format_error(kComponent, what, got, expected));
}

template <size_t N>
std::string_view get_name(const char (&field)[N], const char* name) {
  const size_t len = strnlen(field, N);
  if (len == N)
    fail(KvcErrorKind::malformed, std::string(name) + " is not NUL-terminated", "no NUL",
         "a name shorter than " + num(N));
  for (size_t i = len; i < N; ++i) {
    if (field[i] != 0) {
      fail(KvcErrorKind::malformed, std::string(name) + " padding", "non-zero bytes", "zeros");
    }
  }
  return {field, len};
}

CacheConfig parse_config(const KvcConfigRecord& r) {
  CacheConfig c;
  try {
    c.policy = parse_policy(get_name(r.policy, "config policy"));
    c.codec = parse_codec(get_name(r.codec, "config codec"));
    c.pool = parse_pool(get_name(r.pool, "config pool"));
    c.query_source = parse_query_source(get_name(r.query_source, "config query_source"));
    c.chunk_mode = parse_chunk_mode(get_name(r.chunk_mode, "config chunk_mode"));
  } catch (const std::invalid_argument& e) {
    fail(KvcErrorKind::malformed, "config names a value this build does not know", e.what(),
         "kv/core/config.h names");
  }
  for (size_t i = 0; i < sizeof r.pad; ++i) {
    if (r.pad[i] != 0) fail(KvcErrorKind::malformed, "config padding", "non-zero bytes", "zeros");
  }
  if (r.keep_window > 1 || r.causal > 1) {
    fail(KvcErrorKind::malformed, "config flags",
         "keep_window " + num(r.keep_window) + ", causal " + num(r.causal), "0 or 1");
  }
  // Sizes a writer can produce: at most the spec's row limit (kv/core/spec.h), never saturated.
  const double max_budget = find_cache_option("budget")->max;
  if (static_cast<double>(r.budget) > max_budget) {
    fail(KvcErrorKind::malformed, "config budget", num(r.budget),
         "<= " + num(static_cast<uint64_t>(max_budget)) + " rows per KV head (kv/core/spec.h)");
  }
  c.budget = r.budget;
  c.window = r.window;
  c.n_sink = r.n_sink;
  c.kernel = r.kernel;
  c.seed = r.seed;
  c.chunk_size = r.chunk_size;
  c.kivi_group = r.kivi_group;
  c.kivi_residual = r.kivi_residual;
  c.kivi_fp16_sinks = r.kivi_fp16_sinks;
  c.rotation_seed = r.rotation_seed;
  c.kitty_channels = static_cast<size_t>(std::min<uint64_t>(r.kitty_channels, SIZE_MAX));
  c.keep_window = r.keep_window == 1;
  c.causal = r.causal == 1;
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    fail(KvcErrorKind::malformed, "config is not valid", e.what(), "a valid CacheConfig");
  }
  // The writer stores the per-codec defaults resolved (kv/core/config.h), never their sentinels: a
  // sentinel here would be read as the codec's default and written back as a different value.
  if (r.kivi_residual != kivi_residual_of(c) || r.kivi_fp16_sinks != kivi_fp16_sinks_of(c)) {
    fail(KvcErrorKind::malformed, "config kivi_residual / kivi_fp16_sinks",
         num(r.kivi_residual) + " / " + num(r.kivi_fp16_sinks) + " (unresolved codec defaults)",
         num(kivi_residual_of(c)) + " / " + num(kivi_fp16_sinks_of(c)));
  }
  return c;
}

// Version 2's allocation and decode-budget fields, into a config parsed from KvcConfigRecord
// (validated again here, since these fields take part in CacheConfig::validate()).
void parse_allocation(const KvcAllocationRecord& r, CacheConfig& c) {
  try {
    c.head_allocation = parse_head_allocation(get_name(r.head_allocation, "head_allocation"));
    c.layer_allocation = parse_layer_allocation(get_name(r.layer_allocation, "layer_allocation"));
  } catch (const std::invalid_argument& e) {
    fail(KvcErrorKind::malformed, "allocation names a value this build does not know", e.what(),
         "kv/core/config.h names");
  }
  if (c.codec == CodecKind::gear) {
    c.gear_sparse = r.codec_fraction;
    c.gear_rank = r.codec_count;
    c.gear_bits = r.codec_bits;
  } else if (codec_routes_rows(c.codec)) {
    c.zip_salient = r.codec_fraction;
    c.zip_high_bits = r.codec_bits;
  }
  if (codec_routes_rows(c.codec)
          ? r.codec_count != 0
          : c.codec != CodecKind::gear &&
                // Bitwise: -0.0 would pass "!= 0.0" and not survive a rewrite.
                (std::bit_cast<uint64_t>(r.codec_fraction) != 0 || r.codec_count != 0 ||
                 r.codec_bits != 0)) {
    fail(KvcErrorKind::malformed, "allocation record codec fields", "values unused by the codec",
         "zeros");
  }
  c.ada_floor = r.ada_floor;
  c.pyramid_beta = r.pyramid_beta;
  c.decode_budget = r.decode_budget;
  c.decode_interval = r.decode_interval;
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    fail(KvcErrorKind::malformed, "config is not valid", e.what(), "a valid CacheConfig");
  }
}

// Header checks that need nothing but the bytes: size, magic, version, payload length, checksum.
KvcHeader check_header(std::span<const uint8_t> bytes, bool verify_checksum) {
  if (bytes.size() < sizeof kKvcMagic) {
    fail(KvcErrorKind::truncated, "file shorter than the magic", num(bytes.size()) + " bytes",
         ">= " + num(sizeof(KvcHeader)) + " bytes");
  }
  if (std::memcmp(bytes.data(), kKvcMagic, sizeof kKvcMagic) != 0) {
    fail(KvcErrorKind::not_kvc, "not a .kvc file (magic)", "other bytes", "\"SNAPKVC\\n\"");
  }
  if (bytes.size() < sizeof(KvcHeader)) {
    fail(KvcErrorKind::truncated, "file shorter than its header", num(bytes.size()) + " bytes",
         ">= " + num(sizeof(KvcHeader)) + " bytes");
  }
  KvcHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  if (h.version < kKvcOldestVersion || h.version > kKvcVersion) {
    fail(KvcErrorKind::wrong_version,
         h.version > kKvcVersion ? "a .kvc format version newer than this build reads"
                                 : "an unsupported old .kvc format version",
         num(h.version),
         "a version from " + num(kKvcOldestVersion) + " to " + num(kKvcVersion) +
             (h.version > kKvcVersion ? " (write the file again with this build's snapkv)" : ""));
  }
  if (h.header_bytes != sizeof(KvcHeader)) {
    fail(KvcErrorKind::malformed, "header size", num(h.header_bytes), num(sizeof(KvcHeader)));
  }
  const size_t payload = bytes.size() - sizeof(KvcHeader);
  if (h.payload_bytes > payload) {
    fail(KvcErrorKind::truncated, "payload shorter than the header says", num(payload) + " bytes",
         num(h.payload_bytes) + " bytes");
  }
  if (h.payload_bytes < payload) {
    fail(KvcErrorKind::malformed, "bytes after the payload",
         num(payload - h.payload_bytes) + " extra bytes", "0");
  }
  if (verify_checksum) {
    const Sha256Digest sum = sha256(bytes.subspan(offsetof(KvcHeader, model_fingerprint)));
    if (std::memcmp(sum.data(), h.checksum, sum.size()) != 0) {
      fail(KvcErrorKind::corrupted, "checksum mismatch", to_hex(sum), "the SHA-256 in the header");
    }
  }
  for (const uint8_t b : h.reserved) {
    if (b != 0) fail(KvcErrorKind::malformed, "header reserved bytes", "non-zero", "zeros");
  }
  if (h.position_shift != 0 && h.position_shift >= h.n_tokens) {
    fail(KvcErrorKind::malformed, "position shift", num(h.position_shift),
         "0, or < the " + num(h.n_tokens) + " tokens (a re-indexed cache)");
  }
  return h;
}

// The model record's name, for a message (checked in full by read_model_record later).
std::string file_model_name(std::span<const uint8_t> bytes, const KvcHeader& h) {
  if (h.version < 3) return "(a version-" + num(h.version) + " file names no model)";
  const size_t at = sizeof(KvcHeader) + sizeof(KvcConfigRecord) + sizeof(KvcAllocationRecord);
  if (bytes.size() < at + sizeof(KvcModelRecord::model_name)) return "(no model name)";
  const char* name = reinterpret_cast<const char*>(bytes.data() + at);
  const std::string s(name, strnlen(name, sizeof(KvcModelRecord::model_name) - 1));
  return s.empty() ? "(no general.name)" : "'" + s + "'";
}

void check_expect(std::span<const uint8_t> bytes, const KvcHeader& h, const KvcExpect& expect) {
  if (expect.fingerprint != nullptr && std::memcmp(expect.fingerprint->data(), h.model_fingerprint,
                                                   expect.fingerprint->size()) != 0) {
    ModelFingerprint got;
    std::memcpy(got.data(), h.model_fingerprint, got.size());
    const std::string want_name = expect.model_name.empty()
                                      ? "(no general.name)"
                                      : "'" + kvc_model_name(expect.model_name) + "'";
    fail(KvcErrorKind::wrong_model, "cache was written for another model (fingerprint)",
         "model " + file_model_name(bytes, h) + ", fingerprint " + to_hex(got),
         "model " + want_name + ", fingerprint " + to_hex(*expect.fingerprint));
  }
  const auto check = [](size_t want, size_t got, const char* what) {
    if (want != 0 && want != got) fail(KvcErrorKind::wrong_model, what, num(got), num(want));
  };
  check(expect.n_layers, h.n_layers, "layer count differs from the model's");
  check(expect.dims.n_heads, h.n_heads, "n_heads differs from the model's");
  check(expect.dims.n_kv_heads, h.n_kv_heads, "n_kv_heads differs from the model's");
  check(expect.dims.head_dim, h.head_dim, "head_dim differs from the model's");
}

// One layer's records; the reader is positioned at its KvcLayerRecord.
LayerCache read_layer(kvc::ByteReader& in, const KvcHeader& h, const CacheConfig& config,
                      const CacheDims& dims, size_t layer) {
  const auto rec = in.pod<KvcLayerRecord>("layer record");
  if (rec.tokens_seen != h.n_tokens) {
    fail(KvcErrorKind::malformed, "layer " + num(layer) + " tokens seen", num(rec.tokens_seen),
         "the " + num(h.n_tokens) + " prompt tokens");
  }
  // A cache compresses at most once per update, and every update brings at least one token.
  if (rec.compressions > rec.tokens_seen) {
    fail(KvcErrorKind::malformed, "layer " + num(layer) + " compressions", num(rec.compressions),
         "<= the " + num(rec.tokens_seen) + " tokens seen (at most one per update)");
  }
  LayerCache::DecodeWindow recent;
  if (h.version >= 2) {
    const auto dec = in.pod<KvcDecodeRecord>("decode record");
    const size_t limit = config.decode_budget > 0 ? config.window : 0;
    if (dec.n_recent > limit) {  // bounds the arrays below before they are read
      fail(KvcErrorKind::malformed, "layer " + num(layer) + " decode window rows",
           num(dec.n_recent), "<= " + num(limit) + " (window with decode_budget, else 0)");
    }
    const size_t n_recent = static_cast<size_t>(dec.n_recent);
    recent.reselections = static_cast<size_t>(dec.decode_reselections);
    recent.positions = in.array<int64_t>(n_recent, "decode window positions");
    recent.queries = in.array<float>(
        kvc::checked_mul(n_recent, kvc::checked_mul(dims.n_heads, dims.head_dim, "queries"),
                         "decode window queries"),
        "decode window queries");
  }
  const bool ragged = config.head_allocation != HeadAllocation::uniform;
  std::vector<std::vector<int64_t>> positions(dims.n_kv_heads);
  std::vector<std::unique_ptr<RowStore>> keys(dims.n_kv_heads), values(dims.n_kv_heads);
  for (size_t kv = 0; kv < dims.n_kv_heads; ++kv) {
    const std::string where = "layer " + num(layer) + " KV head " + num(kv);
    const auto head = in.pod<KvcHeadRecord>("head record");
    if (head.n_rows > h.n_tokens || (!ragged && kv > 0 && head.n_rows != positions[0].size())) {
      fail(KvcErrorKind::malformed, where + " rows", num(head.n_rows),
           "<= " + num(h.n_tokens) + " tokens" +
               (ragged ? std::string() : ", the same in every head (head_allocation uniform)"));
    }
    positions[kv] = in.array<int64_t>(static_cast<size_t>(head.n_rows), "positions");
    const std::vector<int64_t>& pos = positions[kv];
    for (size_t i = 0; i < pos.size(); ++i) {
      if (pos[i] < 0 || static_cast<uint64_t>(pos[i]) >= h.n_tokens - h.position_shift ||
          (i > 0 && pos[i] <= pos[i - 1])) {
        fail(KvcErrorKind::malformed, where + " position " + num(i), std::to_string(pos[i]),
             "strictly increasing positions < " + num(h.n_tokens - h.position_shift));
      }
    }
    const std::span<const uint8_t> key_record =
        in.bytes(static_cast<size_t>(std::min<uint64_t>(head.key_bytes, SIZE_MAX)), "key store");
    const std::span<const uint8_t> value_record = in.bytes(
        static_cast<size_t>(std::min<uint64_t>(head.value_bytes, SIZE_MAX)), "value store");
    keys[kv] = load_row_store(config, RowRole::key, dims.head_dim, key_record);
    values[kv] = load_row_store(config, RowRole::value, dims.head_dim, value_record);
    if (keys[kv]->rows() != pos.size() || values[kv]->rows() != pos.size()) {
      fail(KvcErrorKind::malformed, where + " stored rows",
           num(keys[kv]->rows()) + " keys, " + num(values[kv]->rows()) + " values",
           num(pos.size()) + " (one per position)");
    }
  }
  return LayerCache::restore(dims, config, layer, h.n_layers, static_cast<size_t>(rec.tokens_seen),
                             static_cast<size_t>(rec.compressions), std::move(positions),
                             std::move(keys), std::move(values), std::move(recent),
                             static_cast<size_t>(h.position_shift));
}

KvcContents decode_checked(std::span<const uint8_t> bytes, const KvcExpect& expect,
                           bool verify_checksum) {
  const KvcHeader h = check_header(bytes, verify_checksum);
  check_expect(bytes, h, expect);
  if (h.n_layers == 0 || h.n_heads == 0 || h.n_kv_heads == 0 || h.head_dim == 0 ||
      h.n_heads % h.n_kv_heads != 0 || h.n_tokens == 0) {
    fail(KvcErrorKind::malformed, "dimensions",
         "layers " + num(h.n_layers) + ", heads " + num(h.n_heads) + "/" + num(h.n_kv_heads) +
             ", head_dim " + num(h.head_dim) + ", tokens " + num(h.n_tokens),
         "all >= 1, n_heads a multiple of n_kv_heads");
  }
  kvc::ByteReader in(bytes.subspan(sizeof(KvcHeader)));
  KvcContents out;
  std::memcpy(out.fingerprint.data(), h.model_fingerprint, out.fingerprint.size());
  out.config = parse_config(in.pod<KvcConfigRecord>("config record"));
  if (h.version >= 2)
    parse_allocation(in.pod<KvcAllocationRecord>("allocation record"), out.config);
  if (h.version >= 3) {
    const auto model = in.pod<KvcModelRecord>("model record");
    out.model_name = std::string(get_name(model.model_name, "model name"));
    if (model.note_bytes > kKvcMaxNoteBytes) {
      fail(KvcErrorKind::malformed, "note length", num(model.note_bytes),
           "<= " + num(kKvcMaxNoteBytes) + " bytes");
    }
    const std::span<const uint8_t> note = in.bytes(static_cast<size_t>(model.note_bytes), "note");
    out.note.assign(reinterpret_cast<const char*>(note.data()), note.size());
  }
  out.dims = CacheDims{h.n_heads, h.n_kv_heads, h.head_dim};
  out.tokens =
      in.array<int32_t>(static_cast<size_t>(std::min<uint64_t>(h.n_tokens, SIZE_MAX)), "tokens");
  for (size_t i = 0; i < out.tokens.size(); ++i) {
    if (out.tokens[i] < 0) {
      fail(KvcErrorKind::malformed, "token " + num(i), std::to_string(out.tokens[i]), ">= 0");
    }
  }
  // Every layer needs at least its records: bound the count before reserving anything.
  const size_t min_layer = sizeof(KvcLayerRecord) + (h.version >= 2 ? sizeof(KvcDecodeRecord) : 0) +
                           h.n_kv_heads * (sizeof(KvcHeadRecord) + 16);
  if (h.n_layers > in.remaining() / min_layer) {
    fail(KvcErrorKind::malformed, "payload too short for its layers",
         num(in.remaining()) + " bytes", ">= " + num(min_layer) + " per layer");
  }
  out.caches.reserve(h.n_layers);
  for (size_t l = 0; l < h.n_layers; ++l)
    out.caches.push_back(read_layer(in, h, out.config, out.dims, l));
  if (in.remaining() != 0) {
    fail(KvcErrorKind::malformed, "payload longer than its layers",
         num(in.remaining()) + " extra bytes", "0");
  }
  out.file_bytes = bytes.size();
  out.version = h.version;
  return out;
}

}  // namespace

KvcContents decode_kvc(std::span<const uint8_t> bytes, const KvcExpect& expect,
                       bool verify_checksum) {
  try {
    return decode_checked(bytes, expect, verify_checksum);
  } catch (const KvcError&) {
    throw;
  } catch (const RuntimeError& e) {
    // A record ran short of its counts or a store rejected its bytes. The file itself has the
    // length its header says (checked first), so this is a malformed payload, not a truncation.
    throw KvcError(KvcErrorKind::malformed, e.what());
  } catch (const std::invalid_argument& e) {  // LayerCache::restore or a store refused the parts
    throw KvcError(KvcErrorKind::malformed, e.what());
  }
}

KvcContents read_kvc(const std::string& path, const KvcExpect& expect) {
  // stat before open: opening a FIFO would wait for a writer; a .kvc is mapped, so only a
  // regular file will do.
  const std::string problem = regular_file_problem(path);
  if (!problem.empty()) fail(KvcErrorKind::io, "cannot open", path + ": " + problem, "a .kvc file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    fail(KvcErrorKind::io, "cannot open", path + ": " + std::strerror(errno), "a readable file");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(KvcErrorKind::io, "not a regular file", path, "a .kvc file");
  }
  // The file is mapped, not copied: the stores copy out what they keep, and each page is read
  // once (the checksum pass), so a load reads the file's bytes once and holds no second copy.
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return decode_kvc({}, expect);  // names the truncation
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping stays valid
  if (map == MAP_FAILED) {
    fail(KvcErrorKind::io, "cannot map", path + ": " + std::strerror(map_errno), "a readable file");
  }
  ::madvise(map, size, MADV_SEQUENTIAL);
  struct Unmap {
    void* p;
    size_t n;
    ~Unmap() { ::munmap(p, n); }
  } unmap{map, size};
  return decode_kvc(std::span<const uint8_t>(static_cast<const uint8_t*>(map), size), expect);
}

}  // namespace snapkv
