// The server's store of prefilled prompts: content-addressed sessions, each the state right after
// its prompt was prefilled (and compressed), cloned per request so that no prompt is prefilled
// twice. Three tiers: memory (LRU, bounded in entries and bytes), the --cache-dir directory of
// .kvc files, and an optional shared BlobStore (Redis) that other replicas read too.
//
// Ids: a prompt the server prefilled is named "kv-" + the first 32 hex digits of the SHA-256 of
// (model fingerprint, cache config with every option resolved, token ids), so two replicas of one
// model name the same prompt and config alike; a .kvc file of the directory is named by its stem.
// Names are [A-Za-z0-9._-]{1,128}, not starting with '.': no path separators, no "..".
//
// Reuse rules (find_prefix): the stored prompt that shares the longest common token prefix (L
// tokens) with a new prompt is cut to those L tokens (LlamaSession::truncated; the entry itself
// is untouched) and extended by the rest only when both configs keep every row exactly (policy
// full, codec fp16, no decode-time budget) and agree on every other option: such a cache after
// a prefix holds exactly the rows a prefill of the longer prompt computes for those positions. A
// compressed
// cache cannot be extended by a prefix match in general: its policy chose rows using the prefix's
// own last queries and budget, which a prefill of the longer prompt would choose differently;
// compressed prompts are reused only on an exact match (same tokens, same config).
//
// Promises: memory holds at most max_entries entries and max_bytes bytes of KV, tokens and
// logits (the least recently used go first; an entry alone over max_bytes is not kept in memory);
// an evicted document is written to the directory as <id>.kvc when there is one; every entry is
// written to the shared store when it is put. Reads from the directory or the shared store are
// validated for this model (a damaged or foreign entry is a StoreError corrupt or a KvcError, never
// a crash). Thread-safe.
// Leaves out: HTTP (serve/server.cpp maps the errors), expiry in the shared store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "snapkv/model/llama.h"
#include "snapkv/model/prompt_cache.h"
#include "snapkv/serve/blob_store.h"

namespace snapkv::serve {

struct StoredPrompt {
  std::string id;
  std::vector<int32_t> tokens;  // the prompt
  CacheConfig config;           // how its cache was built
  std::string method;           // the method name asked for, or the policy[+codec] of a file
  LlamaSession session;         // right after the prompt; clone() it per request
  std::vector<float> logits;    // the last prompt position's [n_vocab]; empty when not known
  bool document = false;        // made by POST /v1/caches or read from a file: listed
  size_t kv_bytes = 0, kv_bytes_full_fp16 = 0;
  std::string path;  // its .kvc in the directory, when written or read there
  std::time_t created = 0;

  size_t memory_bytes() const { return kv_bytes + 4 * (tokens.size() + logits.size()); }
};

// The id of `tokens` prefilled with `config` on the model of `fingerprint`.
std::string content_id(const ModelFingerprint& fingerprint, std::span<const int32_t> tokens,
                       const CacheConfig& config);
// Whether a cache built with `config` keeps every row exactly (find_prefix's condition).
bool prefix_extendable(const CacheConfig& config);
// Whether `name` is a valid id (see the file comment).
bool valid_store_name(const std::string& name);

struct StoreLimits {
  size_t max_entries = 64;
  size_t max_bytes = size_t{2} << 30;
};

class CacheStore {
 public:
  // The model must outlive the store. cache_dir "" = none; shared may be null.
  CacheStore(const LlamaModel& model, SessionOptions session_options, StoreLimits limits,
             std::string cache_dir, std::unique_ptr<BlobStore> shared);

  // Indexes every *.kvc file of the directory made for this model (each read and checked once);
  // returns one line per file skipped (bad name, another model, damaged) and per file indexed.
  std::vector<std::string> scan_dir();

  // The entry named `id`: memory, then <dir>/<id>.kvc, then the shared store; null when none has
  // it. Throws StoreError / KvcError for an entry that is there but unreadable.
  std::shared_ptr<const StoredPrompt> get(const std::string& id);
  // The memory entry with a config find_prefix may extend to `config` (see the file comment)
  // whose tokens share the longest common prefix with `tokens`, and that prefix's length L, with
  // min_tokens <= L < tokens.size() (at least one token is left to run, so its logits are
  // fresh); {null, 0} when none. The entry may be longer than L (it diverges after L).
  struct PrefixMatch {
    std::shared_ptr<const StoredPrompt> entry;
    size_t tokens = 0;
  };
  PrefixMatch find_prefix(std::span<const int32_t> tokens, const CacheConfig& config,
                          size_t min_tokens = 1);
  // Adds (or replaces) an entry: memory, evicting the least recently used, and the shared store.
  // A shared store that fails is reported by a StoreError after the entry is in memory.
  void put(std::shared_ptr<const StoredPrompt> entry);
  // Removes an entry from memory, its directory file (when the server wrote or read it there)
  // and the shared store; false when none of them had it.
  bool erase(const std::string& id);
  // Documents: in memory, and indexed in the directory but not loaded.
  struct Listed {
    std::string id;
    size_t prompt_tokens = 0;
    CacheConfig config;
    std::string method;
    size_t kv_bytes = 0, kv_bytes_full_fp16 = 0;
    std::string path;
    std::time_t created = 0;
    bool in_memory = false;
  };
  std::vector<Listed> list();

  size_t memory_entries();
  size_t memory_bytes();
  const std::string& cache_dir() const { return dir_; }
  const ModelFingerprint& fingerprint() const { return fingerprint_; }  // computed once
  const BlobStore* shared() const { return shared_.get(); }

  // A stored prompt as bytes for the shared store (its .kvc, logits, metadata), and back.
  static std::vector<uint8_t> encode(const StoredPrompt& entry);
  std::shared_ptr<StoredPrompt> decode(const std::string& id, std::span<const uint8_t> bytes);

 private:
  void touch(const std::string& id);
  void evict_locked(std::vector<std::shared_ptr<const StoredPrompt>>& spill);
  void spill(const std::vector<std::shared_ptr<const StoredPrompt>>& evicted);
  std::shared_ptr<StoredPrompt> load_file(const std::string& id, const std::string& path);

  const LlamaModel& model_;
  SessionOptions session_options_;
  StoreLimits limits_;
  std::string dir_;
  std::unique_ptr<BlobStore> shared_;
  ModelFingerprint fingerprint_;

  std::mutex mutex_;
  std::list<std::string> lru_;  // most recent first
  struct Held {
    std::shared_ptr<const StoredPrompt> entry;
    std::list<std::string>::iterator at;
  };
  std::map<std::string, Held> memory_;
  size_t bytes_ = 0;
  std::map<std::string, Listed> files_;  // documents in the directory, by id
};

}  // namespace snapkv::serve
