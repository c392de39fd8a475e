// The one set of JSON field names every `snapkv` command's --json uses for the same quantities
// (docs/JSON.md is the table; tests/cli/json_schema_cli_test.cpp parses every command's output
// against it), and the helpers that write the shared groups the same way everywhere.
//
// Names: text, tokens, prompt_tokens, generated_tokens, finish_reason, decode_steps; timings in
// seconds as *_s (load_s, prefill_s, decode_s, ttft_s, kvzip_pass_s, write_s); rates as
// *_tokens_per_s (prefill_tokens_per_s, decode_tokens_per_s); cache statistics kept_rows {min,
// mean, max}, kv_bytes, kv_bytes_full_fp16, kv_ratio; the configuration under "config" {cache,
// generation}. Numbers are JSON numbers; an absent quantity is null, never a string.
// Leaves out: writing the JSON (cache_options.h JsonOutput), the eval report's per-cell means
// (mean_*, eval/report.h) and the server's OpenAI fields.
#pragma once

#include <nlohmann/json.hpp>

#include "cache_options.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/model/generation.h"
#include "snapkv/model/llama.h"

namespace snapkv::cli {

// kept_rows {min, mean, max} rows per KV head over every layer and head, kv_bytes,
// kv_bytes_full_fp16 and kv_ratio (kv_bytes / kv_bytes_full_fp16; 1 when nothing was seen) of
// the session's caches, merged into `j`.
void add_kv_stats(nlohmann::json& j, const LlamaSession& session);

// The cache configuration the command ran with: every option of `config` by canonical name (its
// budget the effective one), "method" (as named), "keep" (the fraction, or null when --budget
// sized the cache), prefill_chunk and threads.
nlohmann::json cache_config_json(const CacheOptions& options, const Method& method,
                                 const CacheConfig& config);

// {"cache": ..., "generation": ...} (generation omitted when null).
nlohmann::json config_json(const nlohmann::json& cache, const nlohmann::json& generation);

}  // namespace snapkv::cli
