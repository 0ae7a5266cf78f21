// trainscope/viewer/table.h — the viewer's tables as plain text cells, and as CSV: what "copy as CSV"
// puts on the clipboard and the `csv` script command writes (RFC 4180: comma-separated, a field with
// a comma, quote or line break quoted, quotes doubled, CRLF-free "\n" line ends). Numbers are exact —
// integer nanoseconds, not the rounded durations drawn — so a spreadsheet or a test gets the data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/viewer/diff.h"
#include "trainscope/viewer/query.h"
#include "trainscope/viewer/stats.h"

namespace trainscope::viewer {

struct Table {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;  // each as long as columns
};

std::string csvField(const std::string& s);
std::string toCsv(const Table& t);

// The Statistics table as shown (one group; a rank, kAllRanks or kEachRank; sorted): name, rank
// ("all" over all ranks), count, total/self/min/median/p99/max/mean in ns, and for a range the share
// of the range per rank.
Table statsTable(const Statistics& s, const Trace& trace, StatGroup g, int64_t rank, StatSort by = StatSort::Total,
                 bool descending = true);
// A range's rows of every table, largest total first (Details' per-name table): table, name, rank,
// count, total_ns (inside the range), share_of_range_per_rank.
Table rangeNamesTable(const Statistics& s, const Trace& trace, int64_t rank);
// The per-name diff of two runs: group, name, count and time in A and B, B − A.
Table diffTable(const RunDiff& d);
// The per-step comparison: step, A and B (ns, empty where a run lacks the step), B − A.
Table stepsTable(const std::vector<StepDiff>& steps);

}  // namespace trainscope::viewer
