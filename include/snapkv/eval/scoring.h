// Scoring of generated answers as RULER does it (NVIDIA/RULER scripts/eval/synthetic/constants.py).
// string_match_all: for one sample, the fraction of reference answers that occur as
// case-insensitive substrings of the prediction; a task's score is the mean over samples x 100.
// string_match_part: 1 if any reference occurs, else 0 (RULER's QA metric), for completeness.
// Leaves out: generation, normalisation beyond ASCII lower-casing.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace snapkv::eval {

// In [0, 1]. Throws std::invalid_argument when `answers` is empty.
double string_match_all(std::string_view prediction, const std::vector<std::string>& answers);

// 0 or 1. Throws std::invalid_argument when `answers` is empty.
double string_match_part(std::string_view prediction, const std::vector<std::string>& answers);

// Mean of string_match_all over samples, x 100 (RULER's reported figure). predictions[i] is scored
// against answers[i]; throws std::invalid_argument on a size mismatch or no samples.
double score_string_match_all(const std::vector<std::string>& predictions,
                              const std::vector<std::vector<std::string>>& answers);

}  // namespace snapkv::eval
