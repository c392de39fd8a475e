// The no-drift rule every quantizing RowStore keeps under repeated eviction, as one shared check
// (codec_contract_test.cpp runs it over every quantizing codec).
//
// Rule: a kept row changes its decoded value at most once in its life (from its fp16 form to its
// quantized form, when an append flushes it or a settle routes it) and never in a retain: eviction
// moves codes and their parameters, it never re-quantizes. The check appends random batches of
// realistic rows (kivi_test::realistic_rows, with outliers), optionally settles them with random
// saliency scores (zipcache's routing; every third settle without scores), keeps a random ~60% of
// the rows, and compares every kept row bit for bit with its previous decode after each step.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <vector>

#include "kv/kivi_test_util.h"
#include "snapkv/kv/core/row_store.h"

namespace snapkv::kv_test {

struct NoDriftStats {
  size_t appended = 0;  // rows appended in all
  size_t compared = 0;  // (row, step) pairs compared with an earlier decode
  size_t changed = 0;   // rows whose decode changed once (got quantized along the way)
  bool failed = false;  // a row changed in a retain, or twice
};

struct NoDriftRun {
  int rounds = 25;
  uint32_t rng_seed = 5;     // batch sizes, kept rows, saliency
  uint32_t data_seed = 500;  // rows of round i: realistic_rows(.., data_seed + i, true)
  bool settle = false;       // call settle() after each append (zipcache, zipcacher)
  bool bytes_shrink = true;  // a retain never grows bytes()
};

inline NoDriftStats check_no_drift(RowStore& s, const NoDriftRun& run, const char* what) {
  const size_t hd = s.head_dim();
  std::mt19937 rng(run.rng_seed);
  std::vector<int> ids;
  std::map<int, std::vector<float>> last;
  std::map<int, int> changes;
  int next_id = 0;
  NoDriftStats st;
  auto observe = [&](bool retain) {
    std::vector<float> y(s.rows() * hd);
    s.read(y.data(), 0, s.rows());
    if (s.rows() != ids.size()) {
      ADD_FAILURE() << what << ": rows " << s.rows() << ", expected " << ids.size();
      st.failed = true;
      return;
    }
    for (size_t r = 0; r < ids.size(); ++r) {
      std::vector<float> row(y.begin() + long(r * hd), y.begin() + long((r + 1) * hd));
      auto it = last.find(ids[r]);
      if (it != last.end()) {
        ++st.compared;
        if (row != it->second) {
          if (retain || ++changes[ids[r]] > 1) {
            ADD_FAILURE() << what << ": row id " << ids[r]
                          << (retain ? " changed in a retain" : " drifted (changed twice)");
            st.failed = true;
          }
        }
      }
      last[ids[r]] = row;
    }
  };
  for (int round = 0; round < run.rounds && !st.failed; ++round) {
    const size_t add = 1 + rng() % 40;
    const std::vector<float> x =
        kivi_test::realistic_rows(add, hd, run.data_seed + unsigned(round), true);
    s.append(x.data(), add);
    for (size_t i = 0; i < add; ++i) ids.push_back(next_id++);
    st.appended += add;
    observe(false);
    if (run.settle) {
      std::vector<float> sal(s.rows());
      for (float& v : sal) v = float(rng() % 1000);
      s.settle(round % 3 == 0 ? std::span<const float>{} : std::span<const float>(sal));
      observe(false);
    }
    std::vector<uint32_t> keep;
    std::vector<int> kept_ids;
    for (uint32_t r = 0; r < ids.size(); ++r) {
      if (rng() % 10 < 6) {
        keep.push_back(r);
        kept_ids.push_back(ids[r]);
      }
    }
    const size_t before = s.bytes();
    s.retain(keep);
    ids = kept_ids;
    if (run.bytes_shrink) {
      EXPECT_LE(s.bytes(), before) << what << " round " << round;
    }
    observe(true);
  }
  st.changed = changes.size();
  return st;
}

}  // namespace snapkv::kv_test
