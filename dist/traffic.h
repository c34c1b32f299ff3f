// dist::Traffic: where a rank's time in collectives goes, and how many bytes it sends.
//
// Every collective wrapper of dist/ marks its wait with a WaitScope (dist/watchdog.h), which
// adds the wait's time and the bytes this rank sends to the kind of traffic the main thread is
// in: the engine names it with a TrafficScope around each part of a step (attention, MoE, LM
// head, the step's synchronisation), and a collective outside any scope counts as "other". A
// report takes two snapshots around a stage and gathers the difference from every rank, so a
// user sees the network's share of a run on a real cluster.
//
// Bytes are the data this rank must deliver to the other members, whatever algorithm the MPI
// library picks: an alltoallv's sends to others, an allgather's contribution times (members - 1),
// an allreduce's 2 (P - 1) / P of its buffer (a ring's volume), a bcast's buffer times
// (members - 1) on the root. Main thread only, as every collective.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace k3::dist {

class Comm;

enum class Traffic : int {
  kOther,           // outside any scope: loading, the evaluator's own exchanges
  kEmbedding,       // the vocabulary-parallel embedding's reduction
  kAttentionTp,     // attention's TP reductions (MLA, KDA)
  kDenseMlpTp,      // the dense MLP layers' TP reductions
  kExpertAllToAll,  // MoE: tokens to their experts and back (EP), the MoE-TP and DP gathers
  kLmHead,          // the LM head's logits reduction and the sampled tokens' broadcast
  kDpSync,          // the step's one allreduce over every rank: work left, progress counters
  kDraft,           // the speculative drafter's own forward
};
inline constexpr std::size_t kTrafficKinds = 8;
// "attention TP", "EP all-to-all", "LM head", "DP sync", ...
const char* traffic_name(Traffic kind);

// Names the traffic of the collectives the main thread makes while it lives; nested scopes
// override the outer one until they end.
class TrafficScope {
 public:
  explicit TrafficScope(Traffic kind);
  ~TrafficScope();
  TrafficScope(const TrafficScope&) = delete;
  TrafficScope& operator=(const TrafficScope&) = delete;

 private:
  Traffic previous_;
};

struct TrafficCount {
  double seconds = 0;       // waiting in collectives (the outermost wrapper's wall time)
  std::uint64_t bytes = 0;  // sent to other members
  std::uint64_t calls = 0;  // collectives (outermost wrappers)
};
using TrafficCounts = std::array<TrafficCount, kTrafficKinds>;

// This rank's counts since the process started.
TrafficCounts traffic_counts();
// Adds to the current kind (WaitScope calls these).
void count_traffic_wait(double seconds);
void count_traffic_bytes(std::uint64_t bytes);

// One kind's figures over every rank, for a stage.
struct TrafficRow {
  std::string kind;
  double mean_s = 0;        // mean over ranks of the time waited
  double max_s = 0;         // the most any rank waited
  std::uint64_t bytes = 0;  // sent by all ranks together
  double calls_per_rank = 0;
};
struct TrafficReport {
  int ranks = 0;
  int hosts = 0;
  std::vector<TrafficRow> rows;  // the kinds any rank used, in enum order
};

// Collective over `world`: every rank's counts since `since` (a snapshot this rank took at the
// stage's start); rank 0 gets the report, the other ranks an empty one.
TrafficReport gather_traffic(const Comm& world, const TrafficCounts& since, int hosts);

}  // namespace k3::dist
