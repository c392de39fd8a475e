// Codec names composed from parts. One grammar turns a codec name into a CodecSpec (the family,
// the code bits of keys and of values, which roles are Hadamard-rotated) and prints a spec back
// as its one canonical name:
//
//   codec := "fp16" | "kitty" | "kivimix" | "gear" | "zipcache" [rot] | "kivi" K [V] [rot]
//   K, V  := one digit 1..8: the code bits of the keys and of the values (no V: V = K)
//   rot   := "r"     the family's rotation: keys and values for kivi<K> (one width), the values
//                    only for kivi<K><V> (two widths) and for zipcache
//          | "rk"    the keys only
//          | "rv"    the values only
//          | "rkv"   keys and values
//
// The canonical name writes V only when it differs from K and the rotation as "r" when it is the
// family's, else as rk / rv / rkv: "kivi44" is printed "kivi4", "kivi42rv" is "kivi42r".
// A well-formed name need not have a store. The registry (kv/codecs/codec_registry.cpp) lists the
// built specs, each under a CodecKind tag with the defaults of its parameters (kv/core/config.h,
// "Per-codec defaults"); parse_codec refuses a well-formed name it does not list by name, with
// the built ones. Promises: every name parse_codec_spec accepts prints to a name that parses to
// the same spec, and every canonical name parses to the spec it was printed from.
// Leaves out: the parameters that are not part of a name (group, residual, fp16 sinks,
// kitty_channels, zip_*, gear_*), which are CacheConfig fields.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace snapkv {

enum class CodecFamily {
  fp16,      // rows kept as IEEE binary16
  kivi,      // KIVI: keys per channel, values per token, at K and V code bits (kv/codecs/kivi.h)
  kitty,     // 2-bit KIVI whose largest-magnitude key channels per block stay fp16
  kivimix,   // 2-bit values; keys 4-bit in the widest half of each block's channels, else 2-bit
  zipcache,  // per-row mixed precision routed by the policy's scores (kv/codecs/zipcache.h)
  gear,      // KIVI plus a low-rank and a sparse correction of its error (kv/codecs/gear.h)
};

struct CodecSpec {
  CodecFamily family = CodecFamily::fp16;
  // Code bits of the KIVI store of each role: kivi's K and V; 2 for kitty and kivimix (kivimix's
  // key words are 2-bit, the wide channels' low halves stored beside them); 0 for fp16, zipcache
  // and gear, whose widths are parameters (zip_high_bits, gear_bits).
  int key_bits = 0;
  int value_bits = 0;
  bool rotate_keys = false;    // rows turned by a seeded randomized Hadamard rotation before
  bool rotate_values = false;  // quantization (kv/codecs/rotation.h)

  bool rotated() const { return rotate_keys || rotate_values; }
  bool operator==(const CodecSpec&) const = default;
};

// The built codecs: one tag per entry of the registry (kv/codecs/codec_registry.cpp). A tag's
// name and meaning are its spec's (codec_spec, to_string). CacheConfig::codec holds one.
enum class CodecKind {
  fp16,
  kivi2,
  kivi4,
  kivi2r,
  kivi4r,
  kitty,
  zipcache,
  gear,
  zipcacher,
  kivi42,
  kivi24,
  kivi42r,
  kivi32,
  kivimix
};

// The grammar above, for messages: "fp16|kitty|kivimix|gear|zipcache[r]|kivi<K>[<V>][r|rk|rv|rkv]
// (K, V: code bits 1..8)".
std::string_view codec_grammar();

// Parses a name by the grammar; std::invalid_argument "[kv] unknown codec, got 'name', expected
// <grammar>; built: <names>" when it is malformed. Says nothing of whether the spec is built.
CodecSpec parse_codec_spec(std::string_view name);
// The canonical name of spec (throws std::invalid_argument for a spec no name spells, such as
// kivi with bits outside 1..8).
std::string codec_name(const CodecSpec& spec);
// The parts in words, for messages: "4-bit keys, 2-bit values, values rotated".
std::string describe(const CodecSpec& spec);

// The registry's side (kv/codecs/codec_registry.cpp).
// The spec of a built codec; std::invalid_argument for a value outside the enum.
const CodecSpec& codec_spec(CodecKind k);
// Whether k is a tag of the registry (a CodecKind read from outside may not be).
bool codec_is_built(CodecKind k);
// The built codec of spec; std::invalid_argument "[kv] codec 'name' (<parts>) has no store, got
// 'name', expected a built codec: <names>" when none implements it.
CodecKind codec_kind(const CodecSpec& spec);
// Every built codec, in the registry's order, and their canonical names '|'-separated.
std::span<const CodecKind> built_codecs();
std::string_view built_codec_names();

}  // namespace snapkv
