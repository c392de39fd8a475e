// The .kvc compressed prompt-cache file, version 3: the byte layout, pinned by static_assert.
// Reading and writing live in kv/file/kvc_file.h; this header only fixes what the bytes are.
//
// All integers are little-endian, fp16 values IEEE binary16; records follow each other with no
// padding (readers copy, never cast into the file). A file is:
//
//   KvcHeader                              128 bytes (below)
//   payload (KvcHeader::payload_bytes):
//     KvcConfigRecord                      the CacheConfig every layer was built with
//     KvcAllocationRecord                  (v2) its allocation and decode-budget fields
//     KvcModelRecord                       (v3) the model's general.name, the note's length
//     uint8   note[note_bytes]             (v3) bytes of the writer's caller, returned as they
//                                          are (`snapkv chat` /save: the conversation, as JSON;
//                                          empty for `snapkv compress`)
//     int32   tokens[n_tokens]             the token ids the cache has seen (a prompt; for a
//                                          saved chat, the conversation so far)
//     for each layer l < n_layers:
//       KvcLayerRecord                     tokens seen, compressing updates
//       KvcDecodeRecord                    (v2) decode-time re-selections, recent-query rows
//       int64   recent_positions[n_recent] (v2) positions of the decode-time query window
//       fp32    recent_queries[n_recent][n_heads][head_dim]  (v2) its queries
//       for each KV head h < n_kv_heads:
//         KvcHeadRecord                    rows kept, bytes of the two store records
//                                          (n_rows may differ between heads only with
//                                          head_allocation ada: AdaKV's ragged heads)
//         int64   positions[n_rows]        strictly increasing, < tokens_seen - position_shift
//         key store record                 key_bytes bytes   (see "Store records")
//         value store record               value_bytes bytes
//   (the payload ends exactly there: trailing bytes are an error)
//
// The checksum is the SHA-256 of every byte from KvcHeader::model_fingerprint to the end of the
// file (so the dimensions, the token count and the whole payload are covered; the magic, version
// and sizes before it are checked on their own).
//
// Store records hold a RowStore's exact state (RowStore::save), so that a loaded store decodes,
// dots and goes on appending bit for bit like the one that was saved:
//   fp16 codec:   KvcFp16Store, then fp16 rows[rows][head_dim]
//   kivi2/kivi4:  KvcKiviStore, then, in this order,
//                 fp16  sinks[n_sinks][head_dim]
//                 fp16  residual[n_resid][head_dim]
//                 keys only:   KiviKeyBlock blocks[n_blocks]
//                              fp16 key_params[n_blocks][2][head_dim]    (scales, then zeros)
//                              uint8 key_words[n_octets][head_dim][bits] (kv/codecs/kivi.h word
//                              layout)
//                 values only: uint8 value_codes[n_quant][ceil(head_dim/8) * bits]
//                              KiviParams value_params[n_quant][ceil(head_dim/G)]
//   (a value store has n_blocks == n_octets == 0). The layouts are those of
//   include/snapkv/kv/codecs/kivi.h.
//   kitty:        as kivi2; key stores add, after key_words (K = kitty_channels),
//                 uint16 boost_channels[n_blocks][K]   (increasing channel indices per block)
//                 fp16   boost_values[n_quant][K]      (those channels of each quantized row)
//   kivi2r/kivi4r: KvcRotatedStore (the rotation seed, == the config's rotation_seed), then the
//                 kivi2/kivi4 record of the rotated rows (kv/codecs/rotation.h).
//   zipcacher:    keys: the zipcache record; values: KvcRotatedStore, then the zipcache record
//                 of the rotated rows.
//   kivi42/kivi24/kivi32: the kivi record at each role's width (kivi42: keys as kivi4, values as
//                 kivi2; kivi24 the mirror; kivi32: keys at 3 bits, key_words of 3 bytes per
//                 word, values as kivi2); kivi_residual is written resolved (kv/core/config.h
//                 defaults).
//   kivimix:      as kivi2; key stores add, after key_words and kitty's (empty) arrays
//                 (W = head_dim / 2),
//                 uint16 wide_channels[n_blocks][W]       (increasing channel indices per block)
//                 uint8  wide_low[n_quant][ceil(W/8) * 2] (2-bit words of the low code halves;
//                                                          codes past W zero)
//   kivi42r:      keys: the kivi4 key record; values: KvcRotatedStore, then the kivi2 value record
//                 of the rotated rows.
//   gear:         the kivi record (at gear_bits), then KvcGearCorrection and the correction
//                 arrays of include/snapkv/kv/codecs/gear.h.
//   zipcache:     KvcZipStore, then the arrays listed in include/snapkv/kv/codecs/zipcache.h.
// gear / zipcache parameters live in KvcAllocationRecord::codec_* (version 2) (zeros for the other
// codecs):
//   gear:     codec_fraction = gear_sparse, codec_count = gear_rank, codec_bits = gear_bits
//   zipcache: codec_fraction = zip_salient, codec_count = 0,         codec_bits = zip_high_bits
//
// Layer l is restored as layer l of n_layers (its random seed and its PyramidKV share follow).
//
// Version history:
//   1  first. No allocation or decode-budget fields: every head holds the same row count.
//   2  adds KvcAllocationRecord (head/layer allocation, ada_floor, pyramid_beta, decode_budget,
//      decode_interval) and per layer KvcDecodeRecord with the decode-time query window, so
//      AdaKV / PyramidKV caches and decode-budget caches restore exactly.
//   3  adds KvcModelRecord and the note: the model's general.name, so that a cache loaded with
//      another model is refused naming both models (the fingerprint still decides), and the
//      caller's note.
// Writers write kKvcVersion only. Readers accept every version from kKvcOldestVersion to
// kKvcVersion: a version-1 file reads as a version-2 one with uniform allocation and no decode
// budget (those fields did not exist, so this is what it meant); any other version, older or newer,
// is KvcErrorKind wrong_version naming the versions this reader knows. Version-1 and version-2
// files read with an empty model name and note; rewritten, they become version-3 files. The enum
// names inside the records are those of kv/core/config.h's to_string, so new codecs or policies
// never renumber anything.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace snapkv {

static_assert(std::endian::native == std::endian::little, ".kvc files are little-endian");

inline constexpr char kKvcMagic[8] = {'S', 'N', 'A', 'P', 'K', 'V', 'C', '\n'};
inline constexpr uint32_t kKvcVersion = 3;        // what write_kvc writes
inline constexpr uint32_t kKvcOldestVersion = 1;  // the oldest version read_kvc still reads

struct KvcHeader {
  char magic[8];                  // kKvcMagic
  uint32_t version;               // kKvcVersion
  uint32_t header_bytes;          // sizeof(KvcHeader)
  uint64_t payload_bytes;         // file size - header_bytes
  uint8_t checksum[32];           // SHA-256 of bytes [offsetof(model_fingerprint), end of file)
  uint8_t model_fingerprint[32];  // gguf/fingerprint.h: header + sampled weight bytes
  uint32_t n_layers;
  uint32_t n_heads;
  uint32_t n_kv_heads;
  uint32_t head_dim;
  uint64_t n_tokens;
  // n_tokens minus the position the next token takes (LayerCache::next_position(), the same in
  // every layer): 0 unless the cache was re-indexed to run past the model's context
  // (LayerCache::reindex), and then < n_tokens; every stored position is below
  // n_tokens - position_shift. Files written before this field existed hold 0 here, which is
  // what they meant.
  uint64_t position_shift;
  uint8_t reserved[8];  // zero
};
static_assert(sizeof(KvcHeader) == 128, "KvcHeader is 128 bytes");
static_assert(offsetof(KvcHeader, checksum) == 24, "checksum follows the sizes");
static_assert(offsetof(KvcHeader, model_fingerprint) == 56, "the checksum covers from byte 56");
static_assert(offsetof(KvcHeader, n_tokens) == 104, "KvcHeader field order");

// CacheConfig with its enums spelled as the names of kv/core/config.h's to_string (NUL-padded), so
// that a file never depends on enum numbering.
struct KvcConfigRecord {
  char policy[32];
  char codec[16];
  char pool[16];
  char query_source[16];
  char chunk_mode[16];
  uint64_t budget;
  uint64_t window;
  uint64_t n_sink;
  uint64_t kernel;
  uint64_t seed;
  uint64_t chunk_size;
  uint64_t kivi_group;
  uint64_t kivi_residual;
  uint64_t kivi_fp16_sinks;
  uint8_t keep_window;      // 0 or 1
  uint8_t causal;           // 0 or 1
  uint8_t pad[6];           // zero
  uint64_t rotation_seed;   // kivi2r/kivi4r/zipcacher (was reserved: old files read as 0)
  uint64_t kitty_channels;  // kitty (likewise)
};
static_assert(sizeof(KvcConfigRecord) == 192, "KvcConfigRecord is 192 bytes");
static_assert(offsetof(KvcConfigRecord, budget) == 96, "names first, then the numbers");
static_assert(offsetof(KvcConfigRecord, keep_window) == 168, "KvcConfigRecord field order");
static_assert(offsetof(KvcConfigRecord, rotation_seed) == 176, "codec fields replace reserved");

// Version 2: the CacheConfig fields added after version 1 (after KvcConfigRecord).
struct KvcAllocationRecord {
  char head_allocation[16];   // "uniform" | "ada"
  char layer_allocation[16];  // "uniform" | "pyramid"
  double ada_floor;           // IEEE binary64
  double pyramid_beta;        // IEEE binary64
  uint64_t decode_budget;     // 0 = off
  uint64_t decode_interval;
  double codec_fraction;  // gear_sparse | zip_salient, else 0 (see "Store records")
  uint32_t codec_count;   // gear_rank, else 0
  uint32_t codec_bits;    // gear_bits | zip_high_bits, else 0
};
static_assert(sizeof(KvcAllocationRecord) == 80, "KvcAllocationRecord is 80 bytes");
static_assert(offsetof(KvcAllocationRecord, ada_floor) == 32, "names first, then the numbers");
static_assert(offsetof(KvcAllocationRecord, codec_fraction) == 64, "codec fields replace reserved");

// Version 3, after KvcAllocationRecord.
struct KvcModelRecord {
  char model_name[64];  // general.name, NUL-padded ("" when the model has none); a longer name
                        // is cut to 63 bytes at a UTF-8 character boundary
  uint64_t note_bytes;  // bytes of the note that follows, <= kKvcMaxNoteBytes
};
static_assert(sizeof(KvcModelRecord) == 72, "KvcModelRecord is 72 bytes");
inline constexpr uint64_t kKvcMaxNoteBytes = uint64_t{16} << 20;  // 16 MiB

struct KvcLayerRecord {
  uint64_t tokens_seen;   // == KvcHeader::n_tokens
  uint64_t compressions;  // LayerCache::compressions()
};
static_assert(sizeof(KvcLayerRecord) == 16, "KvcLayerRecord is 16 bytes");

// Version 2, after each KvcLayerRecord: the decode-time budget's state (config.decode_budget > 0;
// both 0 otherwise). n_recent <= config.window.
struct KvcDecodeRecord {
  uint64_t decode_reselections;  // LayerCache::decode_reselections() (<= compressions)
  uint64_t n_recent;             // rows of the recent-query window that follow
};
static_assert(sizeof(KvcDecodeRecord) == 16, "KvcDecodeRecord is 16 bytes");

struct KvcHeadRecord {
  uint64_t n_rows;       // retained rows of this KV head
  uint64_t key_bytes;    // bytes of the key store record that follows the positions
  uint64_t value_bytes;  // bytes of the value store record after it
};
static_assert(sizeof(KvcHeadRecord) == 24, "KvcHeadRecord is 24 bytes");

struct KvcFp16Store {
  uint64_t rows;
};
static_assert(sizeof(KvcFp16Store) == 8, "KvcFp16Store is 8 bytes");

struct KvcRotatedStore {
  uint64_t rotation_seed;
};
static_assert(sizeof(KvcRotatedStore) == 8, "KvcRotatedStore is 8 bytes");

struct KvcKiviStore {
  uint64_t n_sinks;          // fp16 sink rows
  uint64_t n_quant;          // quantized rows
  uint64_t n_resid;          // fp16 residual rows
  uint64_t sink_slots_left;  // rows still routed to the sinks (n_sinks + this <= kivi_fp16_sinks)
  uint64_t n_blocks;         // key blocks (0 for values)
  uint64_t n_octets;         // key code octets over all blocks (0 for values)
};
static_assert(sizeof(KvcKiviStore) == 48, "KvcKiviStore is 48 bytes");

struct KvcGearCorrection {
  uint64_t rank;        // == gear_rank
  uint64_t n_segments;  // residual flushes with surviving rows
  uint64_t n_sparse;    // sparse entries over all rows
};
static_assert(sizeof(KvcGearCorrection) == 24, "KvcGearCorrection is 24 bytes");

struct KvcZipStore {
  uint64_t n_quant;     // quantized rows
  uint64_t n_high;      // of which high precision
  uint64_t n_pending;   // fp16 rows not yet quantized
  uint64_t n_segments;  // flushed segments with surviving rows
};
static_assert(sizeof(KvcZipStore) == 32, "KvcZipStore is 32 bytes");

}  // namespace snapkv
