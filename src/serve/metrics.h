// The server's counters and their Prometheus text exposition (GET /metrics), plus the record of
// one request that the per-request log line and the counters are made from.
//
// Promises: record() is thread-safe; prometheus() writes the text format 0.0.4 (# HELP / # TYPE,
// one sample per line) with counters of requests by route and status, prompt and generated
// tokens, prefill and decode seconds, and the values the caller passes (queue depth, running,
// KV bytes held, batched decode steps and the sequences they decoded). Leaves out: histograms.
// Private to serve/.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace snapkv::serve {

// What one request did; filled by the handlers, logged and counted when its response is sent.
struct RequestRecord {
  std::string id;  // the response's id ("" for routes without one)
  size_t prompt_tokens = 0, completion_tokens = 0;
  size_t kv_bytes = 0;  // the compressed cache's bytes (0 when none was built)
  double prefill_s = 0.0, decode_s = 0.0;
  bool reused = false;
};

struct Gauges {
  size_t running = 0, queued = 0, caches = 0, cache_bytes = 0;
  size_t decode_steps = 0, decode_rows = 0;  // the batcher's counts (serve/decode_batcher.h)
};

class Metrics {
 public:
  void record(const std::string& route, int status, const RequestRecord& r);
  std::string prometheus(const Gauges& g) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, size_t> requests_;  // (route, status) -> count
  size_t prompt_tokens_ = 0, completion_tokens_ = 0;
  double prefill_s_ = 0.0, decode_s_ = 0.0;
};

}  // namespace snapkv::serve
