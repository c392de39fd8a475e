// chunkkv (ChunkKV-adapted): rows are grouped into chunks of chunk_size consecutive ORIGINAL
// positions (chunk id = position / chunk_size; after an earlier eviction a chunk may hold fewer
// candidates). Sinks (and the window with keep_window) are kept first; every other chunk is scored
// by the sum of its rows' SnapKV scores and chunks are taken whole, best first (ties to the earlier
// chunk). When the next chunk in that order does not fit in the slots left, its best rows (by
// score, ties to the earlier row) fill the remaining slots exactly and selection stops, so the
// result always has min(budget, n_rows) rows like every other policy.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kv/policies/policies.h"
#include "snapkv/kv/core/snapkv_score.h"
#include "snapkv/ops/topk.h"

namespace snapkv {
namespace {

struct Chunk {
  size_t begin = 0;  // candidate index range [begin, end) of the chunk's non-forced rows
  size_t end = 0;
  double score = 0.0;
};

class ChunkKVPolicy final : public EvictionPolicy {
 public:
  explicit ChunkKVPolicy(const CacheConfig& config) : config_(config) {}
  PolicyKind kind() const override { return PolicyKind::chunkkv; }

  SelectionResult select(const SelectionInput& in) override {
    SelectionResult result;
    result.scores = snapkv_candidate_scores(in, config_);
    const size_t n = in.n_rows;
    const size_t n_keep = std::min(selection_budget(in, config_), n);
    const size_t head = std::min(config_.n_sink, n);
    const size_t tail_begin = std::max(head, n - kept_window_rows(config_, n));
    std::vector<uint32_t> keep;
    keep.reserve(n_keep);
    for (size_t i = 0; i < head; ++i) keep.push_back(static_cast<uint32_t>(i));
    for (size_t i = tail_begin; i < n; ++i) keep.push_back(static_cast<uint32_t>(i));
    // Budget >= forced rows is guaranteed by CacheConfig::validate; select_rows would throw too.
    size_t slots = n_keep > keep.size() ? n_keep - keep.size() : 0;

    // Chunks over the free rows [head, tail_begin), contiguous runs of equal chunk id.
    std::vector<Chunk> chunks;
    const auto chunk_id = [&](size_t i) {
      const uint64_t pos = in.positions != nullptr ? static_cast<uint64_t>(in.positions[i]) : i;
      return pos / config_.chunk_size;
    };
    for (size_t i = head; i < tail_begin; ++i) {
      if (chunks.empty() || chunk_id(i) != chunk_id(chunks.back().begin)) {
        chunks.push_back({i, i, 0.0});
      }
      chunks.back().end = i + 1;
      chunks.back().score += static_cast<double>(result.scores[i]);
    }
    std::vector<size_t> order(chunks.size());
    for (size_t c = 0; c < order.size(); ++c) order[c] = c;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return chunks[a].score > chunks[b].score; });
    for (const size_t c : order) {
      if (slots == 0) break;
      const Chunk& chunk = chunks[c];
      const size_t len = chunk.end - chunk.begin;
      if (len <= slots) {
        for (size_t i = chunk.begin; i < chunk.end; ++i) keep.push_back(static_cast<uint32_t>(i));
        slots -= len;
      } else {  // the budget cuts this chunk: its best rows fill what is left
        const std::vector<uint32_t> best =
            topk_indices(result.scores.data() + chunk.begin, len, slots);
        for (const uint32_t j : best) keep.push_back(static_cast<uint32_t>(chunk.begin + j));
        slots = 0;
      }
    }
    std::sort(keep.begin(), keep.end());
    result.keep = std::move(keep);
    return result;
  }

  std::unique_ptr<EvictionPolicy> clone() const override {
    return std::make_unique<ChunkKVPolicy>(*this);
  }

 private:
  CacheConfig config_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_chunkkv_policy(const CacheConfig& config) {
  return std::make_unique<ChunkKVPolicy>(config);
}

}  // namespace snapkv
