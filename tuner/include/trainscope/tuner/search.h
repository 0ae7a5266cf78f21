// trainscope/tuner/search.h — which candidates a study measures, in what rounds, and which it picks.
//
// A SearchStrategy decides; the driver (tune.cpp) runs. The driver asks for the next batch of
// trials, runs each (or takes it from a resumed study), tells the strategy how each ended, refits
// the models and re-ranks the candidates between batches, and finally asks for the pick. A strategy
// runs nothing, writes nothing and reads no clock: it can be driven by a fake runner (tests/core/
// search_test.cpp).
//
// Both strategies start alike. Round 0 first runs one profile trial per distinct layer shape (the
// best-predicted candidate of each, at most first_round shapes): their traced layer ranges give every
// candidate of that shape a composed step time (profile.h), the driver re-ranks, and the rest of
// round 0 is the best of the re-ranked space.
//   halving      successive halving: the faster half of each round (by pooled step time) runs again
//                twice as long, until `finalists` or fewer would be left; then the best `finalists`
//                run `final_rounds` more trials each, alternately (A B C, then C B A) at one length.
//                After round 0, candidates never run whose composed time beats the slowest survivor
//                join the next round (at most half as many as survive).
//   exhaustive   every valid candidate once, at four times the first round's length (ground truth).
// The pick: a candidate none of whose trials failed and that stayed within the memory per rank;
// among those the ones that got furthest (every finalist counts as furthest), and of them the
// fastest by pooled step time (study.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/tuner/models.h"
#include "trainscope/tuner/space.h"
#include "trainscope/tuner/study.h"

namespace trainscope::tuner {

struct SearchOptions {
  int64_t first_round = 8;   // profile shapes at most, and candidates of round 0
  int64_t base_steps = 3;    // steps of a round-0 trial
  int64_t finalists = 3;     // halving: the final stage's candidates (at least 2)
  int64_t final_rounds = 2;  // halving: final-stage trials of each finalist (0: plain halving)
};

enum class SearchStage { Profile, Halving, Final };
const char* toString(SearchStage s);

// Trials to run one after the other: every candidate once, `steps` steps each, recorded as `round`.
struct TrialBatch {
  int64_t round = 0, steps = 0;
  SearchStage stage = SearchStage::Halving;
  std::vector<int64_t> candidates;  // ids, in running order
};

// What the driver knows between batches: every candidate, its prediction refitted to the trials so far.
struct StudyState {
  const std::vector<Candidate>& candidates;  // indexed by id
};

class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;
  // The candidates profiled first (round 0's first batch), known from the start.
  virtual const std::vector<int64_t>& profiles() const = 0;
  // The next batch; nullopt when the search is over. Called after every trial of the last batch
  // was observed (those the budget skipped are not).
  virtual std::optional<TrialBatch> nextBatch(const StudyState& s) = 0;
  // How one trial of the current batch ended (ok or not), in running order.
  virtual void observe(const TrialRecord& t) = 0;
  // Trials the search expects to run in all, for progress (it grows when candidates are promoted).
  virtual int64_t planned() const = 0;
  // The recommendation from every trial of the study; nullopt when none qualifies.
  virtual std::optional<int64_t> pick(const std::vector<TrialRecord>& trials, int64_t memory_bytes) const = 0;
};

// "halving|exhaustive".
const char* searchNames();
// `name` is one of searchNames() (UserError naming `field` otherwise); `all` is the enumerated space
// (valid candidates first, by predicted step time), `c` the cluster its layer shapes are keyed on.
std::unique_ptr<SearchStrategy> makeSearch(const std::string& name, const std::vector<Candidate>& all, const Cluster& c,
                                           const SearchOptions& o, const std::string& field = "--search");

}  // namespace trainscope::tuner
