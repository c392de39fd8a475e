// The server's counters in Prometheus text format (serve/metrics.h).
#include "serve/metrics.h"

#include <cstdio>

namespace snapkv::serve {
namespace {

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

template <typename T>
void sample(std::string& out, const std::string& name, T value) {
  char buf[64];
  if constexpr (std::is_floating_point_v<T>) {
    std::snprintf(buf, sizeof buf, "%.6f", value);
  } else {
    std::snprintf(buf, sizeof buf, "%zu", static_cast<size_t>(value));
  }
  out += name + " " + buf + "\n";
}

}  // namespace

void Metrics::record(const std::string& route, int status, const RequestRecord& r) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{route, status}];
  prompt_tokens_ += r.prompt_tokens;
  completion_tokens_ += r.completion_tokens;
  prefill_s_ += r.prefill_s;
  decode_s_ += r.decode_s;
}

std::string Metrics::prometheus(const Gauges& g) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  family(out, "snapkv_requests_total", "counter", "HTTP requests answered, by route and status.");
  for (const auto& [key, count] : requests_) {
    sample(out,
           "snapkv_requests_total{route=\"" + key.first + "\",status=\"" +
               std::to_string(key.second) + "\"}",
           count);
  }
  family(out, "snapkv_prompt_tokens_total", "counter", "Prompt tokens of completions.");
  sample(out, "snapkv_prompt_tokens_total", prompt_tokens_);
  family(out, "snapkv_generated_tokens_total", "counter", "Tokens generated.");
  sample(out, "snapkv_generated_tokens_total", completion_tokens_);
  family(out, "snapkv_prefill_seconds_total", "counter", "Seconds spent in prefill.");
  sample(out, "snapkv_prefill_seconds_total", prefill_s_);
  family(out, "snapkv_decode_seconds_total", "counter", "Seconds spent generating.");
  sample(out, "snapkv_decode_seconds_total", decode_s_);
  family(out, "snapkv_decode_tokens_per_second", "gauge",
         "Generated tokens per second of generation time, since start.");
  sample(out, "snapkv_decode_tokens_per_second",
         decode_s_ > 0.0 ? static_cast<double>(completion_tokens_) / decode_s_ : 0.0);
  family(out, "snapkv_requests_running", "gauge", "Requests holding a model worker.");
  sample(out, "snapkv_requests_running", g.running);
  family(out, "snapkv_queue_depth", "gauge", "Requests waiting for a model worker.");
  sample(out, "snapkv_queue_depth", g.queued);
  family(out, "snapkv_decode_steps_total", "counter",
         "Batched decode steps (one forward for every running sequence).");
  sample(out, "snapkv_decode_steps_total", g.decode_steps);
  family(out, "snapkv_decode_batch_rows_total", "counter",
         "Sequences decoded in those steps (over steps: the mean batch size).");
  sample(out, "snapkv_decode_batch_rows_total", g.decode_rows);
  family(out, "snapkv_caches", "gauge", "Compressed documents held.");
  sample(out, "snapkv_caches", g.caches);
  family(out, "snapkv_kv_bytes_held", "gauge", "KV bytes of the compressed documents held.");
  sample(out, "snapkv_kv_bytes_held", g.cache_bytes);
  return out;
}

}  // namespace snapkv::serve
