// The server's store of prefilled prompts (serve/cache_store.h).
#include "snapkv/serve/cache_store.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>
#include <system_error>
#include <utility>

#include "snapkv/kv/core/spec.h"
#include "snapkv/model/prompt_cache_bytes.h"
#include "snapkv/util/sha256.h"

namespace snapkv::serve {
namespace {

namespace fs = std::filesystem;

// "name=value;" for every option of `config` (resolved), budget left out when asked.
std::string config_text(const CacheConfig& config, bool with_budget) {
  std::string out;
  for (const auto& [name, value] : config_record(config, true)) {
    if (!with_budget && name == "budget") continue;
    out += std::string(name) + "=" + format_option_value(value) + ";";
  }
  return out;
}

std::string method_of(const CacheConfig& config) {
  std::string m(to_string(config.policy));
  if (config.codec != CodecKind::fp16) m += "+" + std::string(to_string(config.codec));
  return m;
}

constexpr char kMagic[8] = {'S', 'N', 'K', 'V', 'S', 'T', 'R', '1'};

void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

StoreError corrupt(const std::string& id, const std::string& what) {
  return StoreError(StoreError::Kind::corrupt,
                    format_error("serve", "stored prompt '" + id + "'", what,
                                 "an entry written by `snapkv serve`"));
}

}  // namespace

std::string content_id(const ModelFingerprint& fingerprint, std::span<const int32_t> tokens,
                       const CacheConfig& config) {
  Sha256 h;
  const std::string head = "snapkv-prompt-v1;" + config_text(config, true);
  h.update(fingerprint);
  h.update({reinterpret_cast<const uint8_t*>(head.data()), head.size()});
  std::vector<uint8_t> bytes(tokens.size() * 4);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto t = static_cast<uint32_t>(tokens[i]);
    for (int b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<uint8_t>(t >> (8 * b));
  }
  h.update(bytes);
  return "kv-" + to_hex(h.finish()).substr(0, 32);
}

bool prefix_extendable(const CacheConfig& config) {
  return config.policy == PolicyKind::full && config.codec == CodecKind::fp16 &&
         config.decode_budget == 0;
}

bool valid_store_name(const std::string& name) {
  if (name.empty() || name.size() > 128 || name.front() == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

CacheStore::CacheStore(const LlamaModel& model, SessionOptions session_options, StoreLimits limits,
                       std::string cache_dir, std::unique_ptr<BlobStore> shared)
    : model_(model),
      session_options_(std::move(session_options)),
      limits_(limits),
      dir_(std::move(cache_dir)),
      shared_(std::move(shared)),
      fingerprint_(model_fingerprint(model)) {}

std::shared_ptr<StoredPrompt> CacheStore::load_file(const std::string& id,
                                                    const std::string& path) {
  PromptCache loaded = load_prompt_cache(model_, path, session_options_);
  const CacheStats stats = loaded.session.cache_stats();
  auto entry = std::make_shared<StoredPrompt>(StoredPrompt{id,
                                                           std::move(loaded.tokens),
                                                           loaded.config,
                                                           method_of(loaded.config),
                                                           std::move(loaded.session),
                                                           {},
                                                           true,
                                                           stats.bytes_stored,
                                                           stats.bytes_full_fp16,
                                                           path,
                                                           0});
  std::error_code ec;
  const auto when = fs::last_write_time(path, ec);
  if (!ec) {
    const auto since = std::chrono::duration_cast<std::chrono::system_clock::duration>(
        when - fs::file_time_type::clock::now());
    entry->created = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now() + since);
  }
  return entry;
}

std::vector<std::string> CacheStore::scan_dir() {
  std::vector<std::string> log;
  if (dir_.empty()) return log;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) {
    fs::create_directories(dir_, ec);
    if (ec) {
      throw_runtime("serve", "--cache-dir", "'" + dir_ + "' (" + ec.message() + ")",
                    "a directory the server can create and write");
    }
    return log;
  }
  std::vector<fs::path> paths;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    if (e.path().extension() == ".kvc") paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  for (const fs::path& p : paths) {
    const std::string id = p.stem().string();
    const std::string name = p.filename().string();
    if (!valid_store_name(id)) {
      log.push_back("skipped " + name + ": not a valid cache id ([A-Za-z0-9._-], 1 to 128)");
      continue;
    }
    if (!fs::is_regular_file(fs::symlink_status(p, ec))) {
      log.push_back("skipped " + name + ": not a regular file in the directory");
      continue;
    }
    try {
      const std::shared_ptr<StoredPrompt> e = load_file(id, p.string());
      files_[id] = Listed{id,        e->tokens.size(), e->config,
                          e->method, e->kv_bytes,      e->kv_bytes_full_fp16,
                          e->path,   e->created,       false};
      log.push_back("indexed " + name + " as '" + id + "' (" + std::to_string(e->tokens.size()) +
                    " tokens, " + e->method + ")");
    } catch (const KvcError& e) {
      log.push_back("skipped " + name + ": " +
                    (e.kind() == KvcErrorKind::wrong_model ? "made for another model: " : "") +
                    e.what());
    } catch (const std::exception& e) {
      log.push_back("skipped " + name + ": " + e.what());
    }
  }
  return log;
}

void CacheStore::touch(const std::string& id) {
  const auto it = memory_.find(id);
  if (it == memory_.end()) return;
  lru_.splice(lru_.begin(), lru_, it->second.at);
}

std::shared_ptr<const StoredPrompt> CacheStore::get(const std::string& id) {
  if (!valid_store_name(id)) return nullptr;
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = memory_.find(id);
    if (it != memory_.end()) {
      touch(id);
      return it->second.entry;
    }
    const auto f = files_.find(id);
    if (f != files_.end()) path = f->second.path;
  }
  std::shared_ptr<StoredPrompt> loaded;
  if (path.empty() && !dir_.empty()) {
    const fs::path p = fs::path(dir_) / (id + ".kvc");
    std::error_code ec;
    if (fs::is_regular_file(fs::symlink_status(p, ec))) path = p.string();
  }
  if (!path.empty()) {
    loaded = load_file(id, path);
  } else if (shared_) {
    const std::optional<std::vector<uint8_t>> bytes = shared_->get(id);
    if (!bytes) return nullptr;
    loaded = decode(id, *bytes);
  } else {
    return nullptr;
  }
  std::vector<std::shared_ptr<const StoredPrompt>> evicted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!memory_.count(id)) {
      lru_.push_front(id);
      memory_[id] = Held{loaded, lru_.begin()};
      bytes_ += loaded->memory_bytes();
      if (loaded->document && !loaded->path.empty()) {
        files_[id] = Listed{id,
                            loaded->tokens.size(),
                            loaded->config,
                            loaded->method,
                            loaded->kv_bytes,
                            loaded->kv_bytes_full_fp16,
                            loaded->path,
                            loaded->created,
                            false};
      }
      evict_locked(evicted);
    }
  }
  spill(evicted);
  return loaded;
}

CacheStore::PrefixMatch CacheStore::find_prefix(std::span<const int32_t> tokens,
                                                const CacheConfig& config, size_t min_tokens) {
  PrefixMatch best;
  if (!prefix_extendable(config) || tokens.size() < 2) return best;
  const size_t lowest = std::max<size_t>(min_tokens, 1);
  const std::string want = config_text(config, false);
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [id, held] : memory_) {
    const StoredPrompt& e = *held.entry;
    if (!prefix_extendable(e.config) || config_text(e.config, false) != want) continue;
    const size_t n = std::min(e.tokens.size(), tokens.size() - 1);
    const size_t common = static_cast<size_t>(
        std::mismatch(e.tokens.begin(), e.tokens.begin() + static_cast<std::ptrdiff_t>(n),
                      tokens.begin())
            .first -
        e.tokens.begin());
    if (common < lowest || common <= best.tokens) continue;
    best = {held.entry, common};
  }
  if (best.entry) touch(best.entry->id);
  return best;
}

void CacheStore::evict_locked(std::vector<std::shared_ptr<const StoredPrompt>>& spilled) {
  while (!lru_.empty() && (memory_.size() > limits_.max_entries || bytes_ > limits_.max_bytes)) {
    const std::string id = lru_.back();
    lru_.pop_back();
    const auto it = memory_.find(id);
    bytes_ -= it->second.entry->memory_bytes();
    if (it->second.entry->document && !dir_.empty() && !files_.count(id)) {
      spilled.push_back(it->second.entry);
    }
    memory_.erase(it);
  }
}

void CacheStore::spill(const std::vector<std::shared_ptr<const StoredPrompt>>& evicted) {
  for (const auto& e : evicted) {
    const std::string path = (fs::path(dir_) / (e->id + ".kvc")).string();
    try {
      save_prompt_cache(path, e->session, e->tokens);
    } catch (const std::exception&) {
      continue;  // not kept on disk: the entry is gone from this server (the shared store may have
                 // it)
    }
    std::lock_guard<std::mutex> lock(mutex_);
    files_[e->id] =
        Listed{e->id, e->tokens.size(), e->config, e->method, e->kv_bytes, e->kv_bytes_full_fp16,
               path,  e->created,       false};
  }
}

void CacheStore::put(std::shared_ptr<const StoredPrompt> entry) {
  std::vector<std::shared_ptr<const StoredPrompt>> evicted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = memory_.find(entry->id);
    if (it != memory_.end()) {
      bytes_ -= it->second.entry->memory_bytes();
      lru_.erase(it->second.at);
      memory_.erase(it);
    }
    lru_.push_front(entry->id);
    memory_[entry->id] = Held{entry, lru_.begin()};
    bytes_ += entry->memory_bytes();
    if (entry->document && !entry->path.empty()) {
      files_[entry->id] = Listed{entry->id,     entry->tokens.size(), entry->config,
                                 entry->method, entry->kv_bytes,      entry->kv_bytes_full_fp16,
                                 entry->path,   entry->created,       false};
    }
    evict_locked(evicted);
  }
  spill(evicted);
  if (shared_) shared_->put(entry->id, encode(*entry));
}

bool CacheStore::erase(const std::string& id) {
  if (!valid_store_name(id)) return false;
  bool found = false;
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = memory_.find(id);
    if (it != memory_.end()) {
      bytes_ -= it->second.entry->memory_bytes();
      lru_.erase(it->second.at);
      path = it->second.entry->path;
      memory_.erase(it);
      found = true;
    }
    const auto f = files_.find(id);
    if (f != files_.end()) {
      path = f->second.path;
      files_.erase(f);
    }
  }
  if (path.empty() && !dir_.empty()) path = (fs::path(dir_) / (id + ".kvc")).string();
  std::error_code ec;
  if (!path.empty() && fs::remove(path, ec)) found = true;
  if (shared_ && shared_->get(id)) {
    shared_->remove(id);
    found = true;
  }
  return found;
}

std::vector<CacheStore::Listed> CacheStore::list() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, Listed> out = files_;
  for (const auto& [id, held] : memory_) {
    const StoredPrompt& e = *held.entry;
    if (!e.document) continue;
    out[id] = Listed{id,     e.tokens.size(), e.config, e.method, e.kv_bytes, e.kv_bytes_full_fp16,
                     e.path, e.created,       true};
  }
  std::vector<Listed> v;
  for (auto& [id, l] : out) v.push_back(std::move(l));
  return v;
}

size_t CacheStore::memory_entries() {
  std::lock_guard<std::mutex> lock(mutex_);
  return memory_.size();
}

size_t CacheStore::memory_bytes() {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

std::vector<uint8_t> CacheStore::encode(const StoredPrompt& entry) {
  const std::string meta = nlohmann::json{
      {"id", entry.id},
      {"method", entry.method},
      {"document", entry.document},
      {"created",
       entry.created}}.dump();
  const std::vector<uint8_t> kvc = encode_prompt_cache(entry.session, entry.tokens);
  std::vector<uint8_t> out(kMagic, kMagic + 8);
  put_u64(out, meta.size());
  out.insert(out.end(), meta.begin(), meta.end());
  put_u64(out, kvc.size());
  out.insert(out.end(), kvc.begin(), kvc.end());
  put_u64(out, entry.logits.size());
  const size_t at = out.size();
  out.resize(at + 4 * entry.logits.size());
  std::memcpy(out.data() + at, entry.logits.data(), 4 * entry.logits.size());
  return out;
}

std::shared_ptr<StoredPrompt> CacheStore::decode(const std::string& id,
                                                 std::span<const uint8_t> bytes) {
  size_t at = 0;
  auto take = [&](size_t n, const char* what) {
    if (bytes.size() - at < n) throw corrupt(id, std::string("cut short in its ") + what);
    const std::span<const uint8_t> s = bytes.subspan(at, n);
    at += n;
    return s;
  };
  auto u64 = [&](const char* what) {
    const std::span<const uint8_t> s = take(8, what);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{s[i]} << (8 * i);
    return v;
  };
  if (std::memcmp(take(8, "magic").data(), kMagic, 8) != 0) throw corrupt(id, "a wrong magic");
  const std::span<const uint8_t> meta_bytes = take(u64("metadata size"), "metadata");
  const auto meta = nlohmann::json::parse(meta_bytes.begin(), meta_bytes.end(), nullptr, false);
  if (!meta.is_object() || !meta.contains("id") || !meta["id"].is_string() || meta["id"] != id ||
      !meta.contains("method") || !meta["method"].is_string() || !meta.contains("document") ||
      !meta["document"].is_boolean()) {
    throw corrupt(id, "metadata that is not this entry's");
  }
  const std::span<const uint8_t> kvc = take(u64("cache size"), "cache");
  const uint64_t n_logits = u64("logits count");
  if (n_logits != 0 && n_logits != model_.config().n_vocab) {
    throw corrupt(id, std::to_string(n_logits) + " logits for a vocabulary of " +
                          std::to_string(model_.config().n_vocab));
  }
  const std::span<const uint8_t> logit_bytes = take(4 * n_logits, "logits");
  if (at != bytes.size()) throw corrupt(id, "trailing bytes");
  PromptCache loaded = decode_prompt_cache(model_, kvc, session_options_);
  std::vector<float> logits(n_logits);
  std::memcpy(logits.data(), logit_bytes.data(), logit_bytes.size());
  const CacheStats stats = loaded.session.cache_stats();
  const std::time_t created = meta.contains("created") && meta["created"].is_number_integer()
                                  ? meta["created"].get<std::time_t>()
                                  : 0;
  return std::make_shared<StoredPrompt>(
      StoredPrompt{id, std::move(loaded.tokens), loaded.config, meta["method"].get<std::string>(),
                   std::move(loaded.session), std::move(logits), meta["document"].get<bool>(),
                   stats.bytes_stored, stats.bytes_full_fp16, "", created});
}

}  // namespace snapkv::serve
