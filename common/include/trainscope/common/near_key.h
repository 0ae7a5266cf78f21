// trainscope/common/near_key.h — telling a misspelt key from an unknown one: the nearest known key by
// edit distance, and whether it is near enough to be a misspelling. Used where a file's keys are
// checked (workload files, --config).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace trainscope::keys {

// Optimal-string-alignment distance (Levenshtein plus adjacent transpositions): "dropuot" is one
// edit from "dropout", "n_layers" one from "n_layer".
size_t editDistance(const std::string& a, const std::string& b);
// The key of `known` nearest to `key`, and its distance.
std::pair<std::string, size_t> nearestKey(const std::string& key, const std::vector<std::string>& known);
// A probable misspelling: at most two edits, and fewer than a third of the longer word.
bool closeTo(const std::string& key, const std::pair<std::string, size_t>& near);

}  // namespace trainscope::keys
