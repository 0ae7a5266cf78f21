// trainscope/viewer/finders.h — go-to for every finder: the search results as a sortable list that
// next / prev walk, the event a SQL result row names, a query's rows as a track of their own, the
// slowest instance of a name (a diff row's), and what encloses an event that has no flame of its own
// (a collective: the ranges on its rank's threads where it was issued and where it ended).
//
// What it is: plain data in, plain data out, so the tests run the code the screen uses.
// What it is not: anything that draws (the app's view_finders.cpp shows and clicks these).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainscope/viewer/query.h"
#include "trainscope/viewer/stats.h"
#include "trainscope/viewer/table.h"
#include "trainscope/viewer/view_state.h"

namespace trainscope::viewer {

// --- the search results list ---
enum class MatchColumn { Name, Rank, Track, Start, Duration };
const char* matchColumnName(MatchColumn c);                       // "name", "rank", "track", "start", "duration"
std::optional<MatchColumn> parseMatchColumn(const std::string& s);  // nullopt: no such column

// The matches of a search in the list's order: `order` indexes SearchResult::matches (sorted by start).
// By start ascending the list is the matches' own order. Ties keep the start order (stable).
struct MatchList {
  std::vector<uint32_t> order;
  MatchColumn by = MatchColumn::Start;
  bool descending = false;
};
MatchList sortMatches(const Trace& trace, const SearchResult& s, MatchColumn by, bool descending);
// The list position after (dir > 0) or before (dir < 0) `pos`, wrapping; -1 when the list is empty.
// pos < 0 (nothing picked yet): the first row (dir > 0) or the last (dir < 0).
int64_t stepInList(const MatchList& l, int64_t pos, int dir);
// Where match `m` (an index into SearchResult::matches) sits in the list; -1 when absent.
int64_t positionOf(const MatchList& l, int64_t m);

// One row of the list as shown: the name (as recorded), rank, track label, start from the trace's
// start and duration, both in ns.
struct MatchRow {
  std::string name;
  int64_t rank = 0;
  std::string track;
  int64_t start_ns = 0, duration_ns = 0;
};
MatchRow matchRow(const Trace& trace, const EventRef& r);

// --- SQL rows that name an event, and a query shown as a track ---
// The event a result row names: columns `rank` and `start_ns` (also `ts`), and when present `end_ns`
// or `dur_ns` and `name` to tell apart events that start together; names matched case-insensitively.
// nullopt with `why` set when the row names none (no such columns, not numbers, no event there).
std::optional<EventRef> sqlRowEvent(const Trace& trace, const Table& t, size_t row, std::string* why = nullptr);

// A query's rows as a track (Perfetto's debug track): each row with `start_ns` and `end_ns` (or
// `dur_ns`) an interval named by its `name` column (else "row N"), nested into lanes as a thread's
// ranges are. Rows without numbers are skipped and counted. `error` says why there is no track.
struct QueryTrack {
  std::string query;  // what it shows (its label)
  std::vector<std::string> names;  // Event::name indexes these
  Track track;
  int64_t skipped = 0;  // rows without a start and an end
  std::string error;
  bool ok() const { return error.empty(); }
};
QueryTrack queryTrack(const Table& t, const std::string& query);

// --- a name's slowest instance (a diff row's) ---
// The longest event of `group` named `name` (as recorded) in `trace`; with a window (absolute ns),
// among the events overlapping it. nullopt when there is none.
std::optional<EventRef> slowestInstance(const Trace& trace, StatGroup group, const std::string& name,
                                        std::optional<std::pair<int64_t, int64_t>> window = std::nullopt);

// --- what encloses an event ---
// A thread's event: its flame parents (query.h's enclosing). An event on a track with no flame of
// its own (a collective, a step): the ranges on its rank's CPU threads that hold its start (where it
// was issued) and those that hold its end (where it ended, e.g. waited for in grad_sync), outermost
// first. Device work (kernels, copies) has none by time: the GPU runs behind its launches (see the
// launch's own enclosing ranges).
struct Enclosing {
  std::vector<EventRef> at_start, at_end;
  bool by_time = false;  // found on the rank's threads by time (not the event's own flame)
};
Enclosing enclosingOf(const Trace& trace, const EventRef& r);

// Script commands of the finders: `matches COLUMN [asc|desc]`, `match K`, `sqlrow K`,
// `sqltrack show|remove`, `diffrow K`, `click search|sql|diff K` and `click search|sql|diff header
// COLUMN` (a real mouse click on a row or a header: the app's view_clicks.cpp), taken out and checked
// here; the rest parsed by `rest`.
std::vector<ScriptCommand> parseFinderScript(
    const std::string& text, const std::string& file,
    std::vector<ScriptCommand> (*rest)(const std::string&, const std::string&));

}  // namespace trainscope::viewer
