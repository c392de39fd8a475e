/* snapkv.h: the C ABI of the snapkv KV-cache library, for engines written in C, Rust, Python
 * (ctypes, cffi) or anything else that can call C. It hosts one model's caches (one per layer)
 * built from a configuration, fed with the engine's own K/V (and optionally the real queries of the
 * observation window), and reads attention and accounting back.
 *
 * Promises:
 *  - Shapes are row-major fp32, exactly as the C++ cache contract
 * (include/snapkv/kv/core/layer_cache.h): k, v      [n_kv_heads][n_tokens][head_dim]  rotated by
 * RoPE at positions offset()... q         [n_heads][n_tokens][head_dim] q_window
 * [n_heads][n_window][head_dim]     the chunk's last n_window rotated queries out
 * [n_heads][n_tokens][head_dim]
 *  - Every function returns a snapkv_status; on failure nothing was changed and
 *    snapkv_last_error() returns the message ("[component] what, got X, expected Y") of the last
 *    failure on the calling thread. No C++ exception ever crosses this boundary.
 *  - Values in k and v must be finite with |x| <= 65504 (rows are stored in fp16 or fp16-based
 *    codecs); queries must be finite.
 *  - A snapkv_caches is not safe to mutate from several threads at once; const functions may run
 *    concurrently.
 *
 * Configuration: a string of key=value pairs separated by spaces, commas or semicolons; unnamed
 * keys keep the library defaults (CacheConfig). The command line's sizing and method keys:
 *   method=NAME     the --method grammar (snapkv, snapkv+kivi2, ada-pyramid-keydiff, kvzip, ...):
 *                   sets policy, codec, query source and allocations (keys below override it)
 *   keep=F          kept fraction in (0, 1] of the prompt: budget = max(ceil(F * T), floor);
 *                   snapkv_caches_create needs prompt_tokens=T beside it, the model-level calls
 *                   know T
 *   budget=N        rows kept per KV head (not with keep)
 * The model-level calls (snapkv_generate, snapkv_doc_compress) use the shared defaults when the
 * string names no method, policy, keep or budget: method=snapkv keep=0.2 for a generation,
 * method=kvzip keep=0.2 for a document. Every other key is an option of the cache spec
 * (snapkv/kv/core/spec.h: names, ranges and help; a test holds these lists to it):
 *   policy=full|snapkv|streaming|random|knorm|chunkkv|keydiff|expected_attention|kvzip|
 *         kvzip_plus|kvzap|kvzap_snapkv
 *   codec=fp16|kivi2|kivi4|kivi2r|kivi4r|kitty|zipcache|gear|zipcacher|kivi42|kivi24|kivi42r|
 *         kivi32|kivimix
 *   query_source=auto|queries|keys head_allocation=uniform|ada|duo|duo_ada
 *   layer_allocation=uniform|pyramid
 *   budget=N window=N n_sink=N (or sinks=N) pool=none|max|avg|causal_max kernel=N
 *   keep_window=0|1 causal=0|1 chunk_mode=end_of_prompt|every_chunk chunk_size=N ada_floor=F
 *   pyramid_beta=F duo_streaming=F duo_recent=N prior_weight=F seed=N decode_budget=N
 *   decode_interval=N
 *   kivi_group=N kivi_residual=N
 *   kivi_fp16_sinks=N|-1 rotation_seed=N kitty_channels=N zip_salient=F|-1 zip_high_bits=4|16
 *   gear_bits=2|4 gear_rank=N gear_sparse=F
 * (policies kvzip, kvzip_plus, kvzap and kvzap_snapkv need scores from the model, and
 * head_allocation duo / duo_ada the model's head types: not useful here.)
 * e.g. "policy=snapkv budget=256 window=32 sinks=4 pool=max kernel=31 codec=kivi2".
 *
 * The reference engine (below the caches): snapkv_model_load opens a GGUF model; snapkv_generate
 * runs a prompt and streams the generated text into a callback (the library's one generation
 * loop, model/generation.h, with its defaults); snapkv_doc_compress / snapkv_doc_load /
 * snapkv_doc_save / snapkv_doc_ask are `snapkv compress` / `snapkv ask` (.kvc files).
 * A snapkv_model may be used from several threads at once, a snapkv_doc too (each ask copies
 * it); a model must outlive the documents made or loaded with it.
 *
 * Leaves out: the GGUF reader's own API and the engine's internals (C++ only).
 */
#ifndef SNAPKV_SNAPKV_H
#define SNAPKV_SNAPKV_H

#include <stddef.h>
#include <stdint.h>

#define SNAPKV_VERSION_MAJOR 0
#define SNAPKV_VERSION_MINOR 1
#define SNAPKV_VERSION_PATCH 0
#define SNAPKV_VERSION_STRING "0.1.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH: compare with snapkv_version_number() at run time */
#define SNAPKV_VERSION_NUMBER \
  (SNAPKV_VERSION_MAJOR * 10000 + SNAPKV_VERSION_MINOR * 100 + SNAPKV_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

typedef enum snapkv_status {
  SNAPKV_OK = 0,
  SNAPKV_INVALID_ARGUMENT = 1, /* bad usage: shapes, null pointers, config, layer index */
  SNAPKV_RUNTIME_ERROR = 2,    /* bad data met at run time */
  SNAPKV_OUT_OF_MEMORY = 3,
  SNAPKV_INTERNAL_ERROR = 4 /* a bug: please report the message */
} snapkv_status;

typedef enum snapkv_update_kind {
  SNAPKV_UPDATE_AUTO = 0,    /* n_tokens > 1: prefill chunk, n_tokens == 1: decode step */
  SNAPKV_UPDATE_PREFILL = 1, /* a prefill chunk whatever n_tokens is */
  SNAPKV_UPDATE_DECODE = 2   /* append, never evict */
} snapkv_update_kind;

typedef struct snapkv_model_dims {
  size_t n_layers;
  size_t n_heads;    /* query heads */
  size_t n_kv_heads; /* key/value heads, n_heads % n_kv_heads == 0 */
  size_t head_dim;
} snapkv_model_dims;

typedef struct snapkv_stats {
  size_t tokens_seen;     /* == the next token's absolute position */
  size_t tokens_kept;     /* retained rows per KV head */
  size_t bytes_stored;    /* keys + values, all heads (and layers for the total), codec bytes */
  size_t bytes_full_fp16; /* what an fp16 cache of every seen token would hold */
  double eviction_ratio;  /* seen / kept (1 when nothing was seen) */
  double keep_rate;       /* kept / seen (1 when nothing was seen) */
} snapkv_stats;

/* One model's caches: one per layer, all from one configuration. Opaque. */
typedef struct snapkv_caches snapkv_caches;

/* The library's version at run time: "0.1.0" (SNAPKV_VERSION_STRING of the library built), and
 * its SNAPKV_VERSION_NUMBER. */
const char* snapkv_version(void);
int snapkv_version_number(void);
/* "ok", "invalid argument", "runtime error", "out of memory", "internal error" */
const char* snapkv_status_name(snapkv_status status);
/* The message of the calling thread's last failure ("" if none). Valid until its next call. */
const char* snapkv_last_error(void);

/* Creates the caches of a model. config may be NULL or "" (defaults). *out is set on success. */
snapkv_status snapkv_caches_create(const snapkv_model_dims* dims, const char* config,
                                   snapkv_caches** out);
/* Frees the caches (NULL is allowed). */
void snapkv_caches_free(snapkv_caches* caches);

/* Adds n_tokens tokens to layer `layer`. q_window may be NULL (n_window ignored): the policy then
 * uses the last `window` keys as proxy queries (engine-agnostic mode). kind is a
 * snapkv_update_kind value (an int, so that any value a foreign caller passes is checked). */
snapkv_status snapkv_update(snapkv_caches* caches, size_t layer, const float* k, const float* v,
                            size_t n_tokens, const float* q_window, size_t n_window, int kind);

/* Attention of a chunk's queries over layer `layer`'s retained rows plus the chunk's own rows
 * (causal inside the chunk). Call before snapkv_update with the same k and v. */
snapkv_status snapkv_attend(const snapkv_caches* caches, size_t layer, float* out, const float* q,
                            const float* k, const float* v, size_t n_tokens);

/* The prompt is complete: with chunk_mode=end_of_prompt every layer compresses now. */
snapkv_status snapkv_end_prompt(snapkv_caches* caches);

/* Accounting of one layer, or of all layers (bytes summed, token counts per layer). */
snapkv_status snapkv_layer_stats(const snapkv_caches* caches, size_t layer, snapkv_stats* out);
snapkv_status snapkv_total_stats(const snapkv_caches* caches, snapkv_stats* out);

/* Original positions of the rows layer `layer` keeps for one KV head, increasing. Writes
 * min(capacity, count) positions to out (out may be NULL when capacity is 0) and the full count
 * to *n_out. */
snapkv_status snapkv_kept_positions(const snapkv_caches* caches, size_t layer, size_t kv_head,
                                    int64_t* out, size_t capacity, size_t* n_out);

/* ---- the reference engine: models, generation, compressed documents (.kvc) ------------------ */

typedef struct snapkv_model snapkv_model; /* a GGUF model and its tokenizer. Opaque. */
typedef struct snapkv_doc snapkv_doc;     /* a compressed document (a .kvc in memory). Opaque. */

/* Opens a GGUF model (llama, qwen2, qwen3; memory-mapped). *out is set on success. */
snapkv_status snapkv_model_load(const char* path, snapkv_model** out);
void snapkv_model_free(snapkv_model* model); /* NULL is allowed */
/* The model's cache dimensions, as snapkv_caches_create takes them. */
snapkv_status snapkv_model_dims_of(const snapkv_model* model, snapkv_model_dims* out);

/* Token ids of text: BOS first when add_special and the vocabulary adds it. Writes
 * min(capacity, count) ids (out may be NULL when capacity is 0) and the count to *n_out. */
snapkv_status snapkv_tokenize(const snapkv_model* model, const char* text, int add_special,
                              int32_t* out, size_t capacity, size_t* n_out);
/* Text of n ids: writes at most capacity - 1 bytes and a NUL (when capacity > 0) and the full
 * length to *n_out. */
snapkv_status snapkv_detokenize(const snapkv_model* model, const int32_t* ids, size_t n, char* out,
                                size_t capacity, size_t* n_out);

typedef struct snapkv_generation_params {
  size_t max_tokens;       /* >= 1 */
  float temperature;       /* 0 = greedy */
  float top_p;             /* (0, 1] */
  size_t top_k;            /* 0 = every token */
  float min_p;             /* 0 = off */
  float repeat_penalty;    /* 1 = off */
  size_t repeat_last_n;    /* tokens the penalties look back over */
  float presence_penalty;  /* [-2, 2] */
  float frequency_penalty; /* [-2, 2] */
  uint64_t seed;           /* the sampler's and the random policy's */
  int ignore_eos;          /* non-zero: end-of-generation tokens are banned from sampling */
  const char* const* stop; /* n_stop stop strings (may be NULL when n_stop is 0) */
  size_t n_stop;
  size_t prefill_chunk;          /* tokens per prefill forward */
  const int32_t* logit_bias_ids; /* n_logit_bias token ids (may be NULL when n_logit_bias is 0) */
  const float* logit_bias;       /* their biases, added to the logits first; -INFINITY bans */
  size_t n_logit_bias;
} snapkv_generation_params;

/* Fills *params with the library's shared defaults (model/generation.h, model/sampler.h). */
void snapkv_generation_params_default(snapkv_generation_params* params);

/* Receives each piece of generated text (n bytes, not NUL-terminated; n may be 0 while a possible
 * stop string is held back) and the id of the token that produced it. Return 0 to go on, non-zero
 * to stop (finish reason SNAPKV_FINISH_CANCELLED). */
typedef int (*snapkv_piece_fn)(void* user, const char* text, size_t n, int32_t token);

typedef enum snapkv_finish_reason {
  SNAPKV_FINISH_STOP = 0, /* an end-of-generation token or a stop string */
  SNAPKV_FINISH_LENGTH = 1,
  SNAPKV_FINISH_CONTEXT = 2,
  SNAPKV_FINISH_CANCELLED = 3
} snapkv_finish_reason;

typedef struct snapkv_generation_result {
  size_t prompt_tokens;
  size_t generated_tokens;
  int finish_reason; /* a snapkv_finish_reason */
  snapkv_stats cache;
  double prefill_s;
  double decode_s;
} snapkv_generation_result;

/* Generates from prompt (text, tokenized with BOS as `snapkv run` does) with caches from config
 * (see Configuration; NULL or "": the shared defaults). params NULL: the defaults. on_piece and
 * result may be NULL. */
snapkv_status snapkv_generate(const snapkv_model* model, const char* prompt, const char* config,
                              const snapkv_generation_params* params, snapkv_piece_fn on_piece,
                              void* user, snapkv_generation_result* result);

/* Prefills document once and compresses its cache alone, as `snapkv compress` (config NULL or "":
 * kvzip at keep 0.2). */
snapkv_status snapkv_doc_compress(const snapkv_model* model, const char* document,
                                  const char* config, snapkv_doc** out);
/* Writes the .kvc file (atomically); `snapkv ask --cache` reads it. */
snapkv_status snapkv_doc_save(const snapkv_doc* doc, const char* path);
/* Reads a .kvc file written for this model (another model's is SNAPKV_RUNTIME_ERROR). */
snapkv_status snapkv_doc_load(const snapkv_model* model, const char* path, snapkv_doc** out);
/* Greedy answer from a copy of the document with the question appended, as `snapkv ask`: up to
 * max_tokens tokens, EOS or the first newline. Writes at most capacity - 1 bytes and a NUL, and
 * the full length to *n_out. */
snapkv_status snapkv_doc_ask(const snapkv_doc* doc, const char* question, size_t max_tokens,
                             char* out, size_t capacity, size_t* n_out);
snapkv_status snapkv_doc_stats(const snapkv_doc* doc, snapkv_stats* out);
void snapkv_doc_free(snapkv_doc* doc); /* NULL is allowed */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SNAPKV_SNAPKV_H */
