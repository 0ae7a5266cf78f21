// search.cpp — the search strategies (see search.h): successive halving with its final stage, and
// exhaustive measurement. Both profile one candidate per layer shape first and pick alike.
#include "trainscope/tuner/search.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "trainscope/common/error.h"
#include "trainscope/tuner/profile.h"

namespace trainscope::tuner {
namespace {

// Round 0 (profiles, then the best of the re-ranked space), observation and the pick: what both
// strategies share. A subclass says what follows a finished round (afterRound).
class RoundSearch : public SearchStrategy {
 public:
  RoundSearch(const std::vector<Candidate>& all, const Cluster& c, const SearchOptions& o, size_t round0_size) : o_(o) {
    for (const auto& cand : all)
      if (cand.rejected.empty()) valid_.push_back(cand.id);
    const size_t first_round = size_t(std::max<int64_t>(1, o.first_round));
    std::set<std::string> shapes;
    for (int64_t id : valid_)
      if (shapes.size() < first_round && shapes.insert(shapeKey(all[size_t(id)].plan, c)).second)
        profiles_.push_back(id);
    round0_size_ = std::min(valid_.size(), std::max(round0_size, profiles_.size()));
    planned_ = int64_t(round0_size_);
  }

  const std::vector<int64_t>& profiles() const override { return profiles_; }
  int64_t planned() const override { return planned_; }

  std::optional<TrialBatch> nextBatch(const StudyState& s) override {
    if (!started_) {
      started_ = true;
      round_set_ = profiles_;
      return TrialBatch{0, steps_, SearchStage::Profile, profiles_};
    }
    if (round_ == 0 && !filled_) {
      filled_ = true;
      std::vector<int64_t> fill = fillRound0(s);
      round_set_.insert(round_set_.end(), fill.begin(), fill.end());
      if (!fill.empty()) return TrialBatch{0, steps_, SearchStage::Halving, fill};
    }
    if (!afterRound(s)) return std::nullopt;
    measured_.clear();
    ++round_;
    return TrialBatch{round_, steps_, round_ >= final_from_ ? SearchStage::Final : SearchStage::Halving, round_set_};
  }

  void observe(const TrialRecord& t) override {
    if (t.status != TrialStatus::Ok) return;
    ok_.push_back(t);
    measured_.emplace_back(pooledStepTime(ok_, t.candidate), t.candidate);
  }

  // Among candidates none of whose trials failed and whose every ok trial stayed within the memory
  // per rank: the ones that got furthest (every finalist counts as furthest once it ran in the final
  // stage), and of them the fastest by pooled step time.
  std::optional<int64_t> pick(const std::vector<TrialRecord>& trials, int64_t memory_bytes) const override {
    std::map<int64_t, const TrialRecord*> latest;
    for (const auto& t : trials)
      if (!latest.count(t.candidate) || latest[t.candidate]->round < t.round) latest[t.candidate] = &t;
    std::set<int64_t> unfit;  // a trial failed, or peaked over the memory per rank
    for (const auto& t : trials)
      if ((t.status != TrialStatus::Ok && t.status != TrialStatus::Running) ||
          (t.status == TrialStatus::Ok && t.peak_bytes > memory_bytes))
        unfit.insert(t.candidate);
    const auto level = [&](const TrialRecord* x) { return std::min(x->round, final_from_); };
    const TrialRecord* best = nullptr;
    for (const auto& [cand, t] : latest) {
      if (t->status != TrialStatus::Ok || unfit.count(cand)) continue;
      if (!best || level(t) > level(best) ||
          (level(t) == level(best) && pooledStepTime(trials, cand) < pooledStepTime(trials, best->candidate)))
        best = t;
    }
    return best ? std::optional<int64_t>(best->candidate) : std::nullopt;
  }

 protected:
  // Sets round_set_ and steps_ for the next round (final_from_ when it starts the final stage);
  // false when the search is over. measured_ holds this round's ok trials, in running order.
  virtual bool afterRound(const StudyState& s) = 0;

  // The rest of round 0: the best of the re-ranked space that is not a profile.
  std::vector<int64_t> fillRound0(const StudyState& s) const {
    std::vector<int64_t> order = valid_;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return s.candidates[size_t(a)].predicted_step_s < s.candidates[size_t(b)].predicted_step_s;
    });
    const std::set<int64_t> taken(profiles_.begin(), profiles_.end());
    std::vector<int64_t> fill;
    for (int64_t id : order)
      if (profiles_.size() + fill.size() < round0_size_ && !taken.count(id)) fill.push_back(id);
    return fill;
  }

  SearchOptions o_;
  std::vector<int64_t> valid_, profiles_;
  size_t round0_size_ = 0;
  int64_t planned_ = 0;
  bool started_ = false, filled_ = false;
  int64_t round_ = 0, steps_ = 0;
  int64_t final_from_ = std::numeric_limits<int64_t>::max();  // the final stage's first round
  std::vector<int64_t> round_set_;                            // the current round's candidates, all of them
  std::vector<std::pair<double, int64_t>> measured_;          // this round's ok trials: pooled step time, id
  std::vector<TrialRecord> ok_;                               // every ok trial so far
};

class ExhaustiveSearch : public RoundSearch {
 public:
  ExhaustiveSearch(const std::vector<Candidate>& all, const Cluster& c, const SearchOptions& o)
      : RoundSearch(all, c, o, all.size()) {
    steps_ = o.base_steps << 2;
  }

 protected:
  bool afterRound(const StudyState&) override { return false; }
};

class HalvingSearch : public RoundSearch {
 public:
  HalvingSearch(const std::vector<Candidate>& all, const Cluster& c, const SearchOptions& o)
      : RoundSearch(all, c, o, size_t(std::max<int64_t>(1, o.first_round))) {
    steps_ = o.base_steps;
    // The halving stops once it would leave `finalists` or fewer: then the final stage.
    for (size_t n = round0_size_; n > 1;) {
      const size_t keep = (n + 1) / 2;
      if (keep <= finalists() && o.final_rounds > 0) {
        planned_ += int64_t(std::min(n, finalists())) * o.final_rounds;
        break;
      }
      planned_ += int64_t(keep);
      n = keep;
    }
  }

 protected:
  size_t finalists() const { return size_t(std::max<int64_t>(2, o_.finalists)); }

  bool afterRound(const StudyState& s) override {
    if (round_ >= final_from_) {
      // The final stage: the same finalists again, in the opposite order, so that a host that drifts
      // slower or faster over the stage weighs on each of them alike. A finalist whose trial failed
      // (crash, hang, out of memory) leaves the stage.
      if (round_ + 1 >= final_from_ + o_.final_rounds) return false;
      round_set_.clear();
      for (auto it = measured_.rbegin(); it != measured_.rend(); ++it) round_set_.push_back(it->second);
      return round_set_.size() > 1;
    }
    std::sort(measured_.begin(), measured_.end());
    if (measured_.size() <= 1) return false;
    // Successive halving keeps the faster half, by each one's pooled step time. Where that would
    // leave `finalists` or fewer, the best `finalists` instead run final_rounds trials each,
    // alternately and at one length: two processes of one configuration differ by up to ±15% on a
    // shared host, and a single trial of each would let that noise, not the configuration, decide.
    size_t keep = (measured_.size() + 1) / 2;
    const bool to_final = keep <= finalists() && o_.final_rounds > 0;
    if (to_final) keep = std::min(measured_.size(), finalists());
    const std::set<int64_t> ran(round_set_.begin(), round_set_.end());  // ok or not
    round_set_.clear();
    for (size_t i = 0; i < keep; ++i) round_set_.push_back(measured_[i].second);
    // Twice as long each round; the final stage's trials as long as the last round's, at least four
    // times the first's (what decides there is the number of processes, not their length).
    steps_ = to_final ? std::max(steps_, o_.base_steps << 2) : steps_ * 2;
    if (to_final) final_from_ = round_ + 1;
    if (round_ == 0) promote(s, ran, to_final);
    return true;
  }

  // The refitted model may point past round 0: candidates never run whose shape was measured and
  // whose composed step time beats the slowest survivor join the next round (at most half as many as
  // survive), so a configuration the analytic ranking misplaced still gets measured.
  void promote(const StudyState& s, const std::set<int64_t>& ran, bool to_final) {
    const double cut = measured_[round_set_.size() - 1].first;
    std::vector<std::pair<double, int64_t>> promising;
    for (int64_t id : valid_) {
      const Candidate& v = s.candidates[size_t(id)];
      if (!ran.count(id) && v.time_measured && v.predicted_step_s < cut) promising.emplace_back(v.predicted_step_s, id);
    }
    std::sort(promising.begin(), promising.end());
    const size_t room = std::max<size_t>(1, round_set_.size() / 2);
    for (size_t i = 0; i < promising.size() && i < room; ++i) round_set_.push_back(promising[i].second);
    planned_ += int64_t(std::min(promising.size(), room)) * (to_final ? o_.final_rounds : 1);
  }
};

}  // namespace

const char* toString(SearchStage s) {
  switch (s) {
    case SearchStage::Profile:
      return "profile";
    case SearchStage::Halving:
      return "halving";
    case SearchStage::Final:
      return "final";
  }
  return "?";
}

const char* searchNames() { return "halving|exhaustive"; }

std::unique_ptr<SearchStrategy> makeSearch(const std::string& name, const std::vector<Candidate>& all, const Cluster& c,
                                           const SearchOptions& o, const std::string& field) {
  if (name == "halving") return std::make_unique<HalvingSearch>(all, c, o);
  if (name == "exhaustive") return std::make_unique<ExhaustiveSearch>(all, c, o);
  throw UserError(field, "unknown value \"" + name + "\"", std::string("use one of ") + searchNames());
}

}  // namespace trainscope::tuner
