// finders.cpp — the search results list, SQL rows as events and as a track, a name's slowest
// instance, what encloses an event, and the finders' script commands (see finders.h).
#include "trainscope/viewer/finders.h"

#include <algorithm>
#include <cctype>
#include <iomanip>
#include <map>
#include <sstream>

#include "trainscope/common/error.h"
#include "trainscope/viewer/lod.h"
#include "trainscope/viewer/names.h"

namespace trainscope::viewer {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A whole integer (SQLite prints integers as such); nullopt for anything else.
std::optional<int64_t> integer(const std::string& s) {
  if (s.empty()) return std::nullopt;
  try {
    size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used == s.size()) return int64_t(v);
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// The first column named one of `names` (case-insensitive); -1 when none.
int column(const Table& t, std::initializer_list<const char*> names) {
  for (const char* n : names)
    for (size_t c = 0; c < t.columns.size(); ++c)
      if (lower(t.columns[c]) == n) return int(c);
  return -1;
}

// The columns that give a row's interval: its start, and its end or duration.
struct IntervalColumns {
  int start = -1, end = -1, dur = -1, name = -1;
  explicit IntervalColumns(const Table& t)
      : start(column(t, {"start_ns", "ts", "start"})), end(column(t, {"end_ns", "end"})),
        dur(column(t, {"dur_ns", "duration_ns", "dur"})), name(column(t, {"name"})) {}
  std::optional<int64_t> endOf(const std::vector<std::string>& row, int64_t start) const {
    if (end >= 0)
      if (auto e = integer(row[size_t(end)])) return e;
    if (dur >= 0)
      if (auto d = integer(row[size_t(dur)])) return start + *d;
    return std::nullopt;
  }
};

}  // namespace

const char* matchColumnName(MatchColumn c) {
  switch (c) {
    case MatchColumn::Name: return "name";
    case MatchColumn::Rank: return "rank";
    case MatchColumn::Track: return "track";
    case MatchColumn::Start: return "start";
    case MatchColumn::Duration: return "duration";
  }
  return "start";
}

std::optional<MatchColumn> parseMatchColumn(const std::string& s) {
  for (MatchColumn c : {MatchColumn::Name, MatchColumn::Rank, MatchColumn::Track, MatchColumn::Start, MatchColumn::Duration})
    if (s == matchColumnName(c)) return c;
  return std::nullopt;
}

MatchList sortMatches(const Trace& trace, const SearchResult& s, MatchColumn by, bool descending) {
  MatchList l;
  l.by = by, l.descending = descending;
  l.order.resize(s.matches.size());
  for (uint32_t i = 0; i < l.order.size(); ++i) l.order[i] = i;
  // Names and track labels compared once per distinct id, not once per comparison.
  std::map<uint32_t, size_t> name_rank, track_rank;
  if (by == MatchColumn::Name || by == MatchColumn::Track) {
    std::vector<std::pair<std::string, uint32_t>> keys;
    std::map<uint32_t, bool> seen;
    for (const EventRef& m : s.matches) {
      const uint32_t id = by == MatchColumn::Name ? trace.event(m).name : m.track;
      if (!seen.emplace(id, true).second) continue;
      keys.push_back({by == MatchColumn::Name ? trace.names[id] : trace.tracks[id].label, id});
    }
    std::sort(keys.begin(), keys.end());
    auto& rank_of = by == MatchColumn::Name ? name_rank : track_rank;
    for (size_t i = 0; i < keys.size(); ++i) rank_of[keys[i].second] = i;
  }
  auto key = [&](uint32_t i) -> int64_t {
    const EventRef& m = s.matches[i];
    switch (by) {
      case MatchColumn::Name: return int64_t(name_rank[trace.event(m).name]);
      case MatchColumn::Rank: return trace.tracks[m.track].rank;
      case MatchColumn::Track: return int64_t(track_rank[m.track]);
      case MatchColumn::Start: return trace.event(m).start;
      case MatchColumn::Duration: return trace.event(m).duration();
    }
    return 0;
  };
  std::vector<int64_t> keys(l.order.size());
  for (uint32_t i = 0; i < keys.size(); ++i) keys[i] = key(i);
  std::stable_sort(l.order.begin(), l.order.end(), [&](uint32_t a, uint32_t b) {
    return descending ? keys[a] > keys[b] : keys[a] < keys[b];
  });
  return l;
}

int64_t stepInList(const MatchList& l, int64_t pos, int dir) {
  const int64_t n = int64_t(l.order.size());
  if (n == 0) return -1;
  if (pos < 0 || pos >= n) return dir < 0 ? n - 1 : 0;
  return ((pos + (dir < 0 ? -1 : 1)) % n + n) % n;
}

int64_t positionOf(const MatchList& l, int64_t m) {
  for (size_t i = 0; i < l.order.size(); ++i)
    if (int64_t(l.order[i]) == m) return int64_t(i);
  return -1;
}

MatchRow matchRow(const Trace& trace, const EventRef& r) {
  const Event& e = trace.event(r);
  const Track& t = trace.tracks[r.track];
  return {trace.names[e.name], t.rank, t.label, e.start - trace.begin, e.duration()};
}

std::optional<EventRef> sqlRowEvent(const Trace& trace, const Table& t, size_t row, std::string* why) {
  auto fail = [&](const std::string& w) -> std::optional<EventRef> {
    if (why) *why = w;
    return std::nullopt;
  };
  if (row >= t.rows.size()) return fail("no row " + std::to_string(row));
  const IntervalColumns cols(t);
  const int rank_col = column(t, {"rank"});
  if (rank_col < 0 || cols.start < 0) return fail("the query has no rank and start_ns columns to find an event by");
  const auto& cells = t.rows[row];
  const auto rank = integer(cells[size_t(rank_col)]);
  const auto start = integer(cells[size_t(cols.start)]);
  if (!rank || !start) return fail("row " + std::to_string(row) + "'s rank or start_ns is not a whole number");
  const auto end = cols.endOf(cells, *start);
  // A name only tells apart events that start (and end) together: the name itself first, then a
  // collective named by its op ("all_reduce" for the timeline's "all_reduce (dp)"), then any.
  const std::string* name = cols.name >= 0 ? &cells[size_t(cols.name)] : nullptr;
  std::optional<EventRef> first, prefixed;
  for (const RankGroup& g : trace.ranks) {
    if (g.rank != *rank) continue;
    for (size_t ti : g.tracks) {
      const Track& tr = trace.tracks[ti];
      for (uint32_t li = 0; li < tr.lanes.size(); ++li) {
        const auto& ev = tr.lanes[li].events;
        auto it = std::partition_point(ev.begin(), ev.end(), [&](const Event& e) { return e.start < *start; });
        for (; it != ev.end() && it->start == *start; ++it) {
          if (end && it->end != *end) continue;
          const EventRef ref{uint32_t(ti), li, uint32_t(it - ev.begin())};
          const std::string& raw = trace.names[it->name];
          if (!name || *name == raw || *name == demangle(raw)) return ref;
          if (!prefixed && raw.rfind(*name + " (", 0) == 0) prefixed = ref;
          if (!first) first = ref;
        }
      }
    }
  }
  if (prefixed) return prefixed;
  if (first) return first;
  return fail("rank " + std::to_string(*rank) + " has no event starting at " + std::to_string(*start) + " ns");
}

QueryTrack queryTrack(const Table& t, const std::string& query) {
  QueryTrack q;
  q.query = query;
  const IntervalColumns cols(t);
  if (cols.start < 0 || (cols.end < 0 && cols.dur < 0)) {
    q.error = "a track needs start_ns and end_ns (or dur_ns) columns, in ns on the run's clock";
    return q;
  }
  std::map<std::string, uint32_t> ids;
  std::vector<Event> events;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const auto& row = t.rows[i];
    const auto start = integer(row[size_t(cols.start)]);
    const auto end = start ? cols.endOf(row, *start) : std::nullopt;
    if (!start || !end || *end < *start) {
      ++q.skipped;
      continue;
    }
    const std::string name = cols.name >= 0 ? row[size_t(cols.name)] : "row " + std::to_string(i);
    auto [it, fresh] = ids.emplace(name, uint32_t(q.names.size()));
    if (fresh) q.names.push_back(name);
    Event e;
    e.start = *start, e.end = *end, e.name = it->second, e.kind = EventKind::Range;
    events.push_back(e);
  }
  if (events.empty()) {
    q.error = "no row has a start and an end (" + std::to_string(q.skipped) + " rows skipped)";
    return q;
  }
  q.track.kind = TrackKind::Thread;
  q.track.rank = -1;
  q.track.label = "query";
  buildLanes(q.track, std::move(events));
  return q;
}

std::optional<EventRef> slowestInstance(const Trace& trace, StatGroup group, const std::string& name,
                                        std::optional<std::pair<int64_t, int64_t>> window) {
  std::vector<char> hit(trace.names.size());
  bool any = false;
  for (size_t i = 0; i < trace.names.size(); ++i) any |= bool(hit[i] = trace.names[i] == name);
  if (!any) return std::nullopt;
  std::optional<EventRef> best;
  int64_t longest = -1;
  for (uint32_t ti = 0; ti < trace.tracks.size(); ++ti) {
    const Track& t = trace.tracks[ti];
    for (uint32_t li = 0; li < t.lanes.size(); ++li) {
      const Lane& l = t.lanes[li];
      auto [i0, i1] = window ? overlapping(l, window->first, window->second) : std::make_pair(0u, uint32_t(l.events.size()));
      for (uint32_t i = i0; i < i1; ++i) {
        const Event& e = l.events[i];
        if (!hit[e.name] || e.kind == EventKind::Step || groupOf(e.kind) != group || e.duration() <= longest) continue;
        longest = e.duration();
        best = EventRef{ti, li, i};
      }
    }
  }
  return best;
}

namespace {

// The ranges of `rank`'s CPU threads that hold time t (start <= t < end; at_end: start < t <= end),
// outermost first, thread by thread in display order.
std::vector<EventRef> rangesAt(const Trace& trace, int64_t rank, int64_t t, bool at_end) {
  std::vector<EventRef> out;
  for (const RankGroup& g : trace.ranks) {
    if (g.rank != rank) continue;
    for (size_t ti : g.tracks) {
      const Track& tr = trace.tracks[ti];
      if (tr.kind != TrackKind::Thread) continue;
      for (uint32_t li = 0; li < tr.lanes.size(); ++li) {
        const auto& ev = tr.lanes[li].events;
        // A lane's events never overlap: only the last one starting before t can hold it.
        auto it = std::partition_point(ev.begin(), ev.end(),
                                       [&](const Event& e) { return at_end ? e.start < t : e.start <= t; });
        if (it == ev.begin()) continue;
        --it;
        if (it->kind == EventKind::Range && (at_end ? it->end >= t : it->end > t))
          out.push_back({uint32_t(ti), li, uint32_t(it - ev.begin())});
      }
    }
  }
  return out;
}

}  // namespace

Enclosing enclosingOf(const Trace& trace, const EventRef& r) {
  Enclosing out;
  const Track& t = trace.tracks[r.track];
  const Event& e = trace.event(r);
  if (e.kind != EventKind::Collective) {
    out.at_start = out.at_end = enclosing(trace, r);
    return out;
  }
  // A collective's row is on the rank's `collectives` track, which holds no ranges: its flame has
  // nothing above it. What encloses it are the ranges of the threads that issued and waited for it.
  out.by_time = true;
  out.at_start = rangesAt(trace, t.rank, e.start, false);
  out.at_end = rangesAt(trace, t.rank, e.end, true);
  return out;
}

std::vector<ScriptCommand> parseFinderScript(
    const std::string& text, const std::string& file,
    std::vector<ScriptCommand> (*rest)(const std::string&, const std::string&)) {
  const auto ours = [](const std::string& op) {
    return op == "matches" || op == "match" || op == "sqlrow" || op == "sqltrack" || op == "diffrow" || op == "click";
  };
  const auto check = [](const ScriptCommand& c, const std::string& where) {
    if (c.op == "matches" && (c.args.empty() || c.args.size() > 2 || !parseMatchColumn(c.args[0]) ||
                              (c.args.size() == 2 && c.args[1] != "asc" && c.args[1] != "desc")))
      throw UserError("--script", where + ": matches takes a column (name, rank, track, start or duration) and asc or desc",
                      "e.g. matches duration desc");
    if (c.op == "sqltrack" && (c.args.size() != 1 || (c.args[0] != "show" && c.args[0] != "remove")))
      throw UserError("--script", where + ": sqltrack takes show or remove", "run a query first: sql \"SELECT ...\"");
    // click TABLE ROW | click TABLE header COLUMN: a real click on a row or a header of search, sql or diff;
    // Statistics (stats): on a header only (a row click there searches its name: use `search`).
    if (c.op == "click") {
      const bool table = !c.args.empty() && (c.args[0] == "search" || c.args[0] == "sql" || c.args[0] == "diff");
      const bool stats_header = c.args.size() == 3 && c.args[0] == "stats" && c.args[1] == "header";
      const auto row = c.args.size() == 2 ? integer(c.args[1]) : std::nullopt;
      if (!stats_header && (!table || !((row && *row >= 0) || (c.args.size() == 3 && c.args[1] == "header"))))
        throw UserError("--script", where + ": click takes a table (search, sql or diff) and a row number (from 0), "
                                            "or the table (those, or stats), header and a column name",
                        "e.g. click search 0, click search header duration, click stats header count");
    }
    if (c.op == "match" || c.op == "sqlrow" || c.op == "diffrow") {
      const auto k = c.args.size() == 1 ? integer(c.args[0]) : std::nullopt;
      if (!k || *k < 0)
        throw UserError("--script", where + ": " + c.op + " takes a row number (from 0)", "e.g. " + c.op + " 0");
    }
  };
  return parseScriptPart(text, file, ours, check, rest);
}

}  // namespace trainscope::viewer
