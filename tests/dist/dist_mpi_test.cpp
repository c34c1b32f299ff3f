// dist under MPI: groups built for every valid layout of this world size and checked against the
// layout, node discovery, typed collectives, the collective error policy and the MPI thread rule.
// Runs under mpirun with 1, 8 and 64 ranks (see tests/dist/CMakeLists.txt).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include <numeric>
#include <random>
#include <thread>

#include "dist/collectives.h"
#include "dist/groups.h"
#include "dist/threads.h"
#include "dist/traffic.h"
#include "tests/support/mpi_test.h"

namespace k3::dist {
namespace {

using test::runtime;

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

// Every communicator's rank is the coordinate the layout promises, and a sum over it counts its
// members (a collective on every group proves the group is usable, not only well-formed).
void check_groups(const Groups& groups) {
  const Layout& layout = groups.layout();
  const int me = runtime().rank();
  const RankCoords c = layout.coords(me);
  SCOPED_TRACE(layout.summary());
  EXPECT_EQ(groups.tp().rank(), c.tp_rank);
  EXPECT_EQ(groups.attn_tp().rank(), c.attn_tp_rank);
  EXPECT_EQ(groups.attn_dp().rank(), c.dp_rank);
  EXPECT_EQ(groups.moe_ep().rank(), c.moe_ep_rank);
  EXPECT_EQ(groups.moe_tp().rank(), c.moe_tp_rank);
  EXPECT_EQ(groups.node().rank(), c.local_rank);
  for (GroupKind kind : kAllGroupKinds) {
    EXPECT_EQ(groups.get(kind).size(), layout.group_size(kind));
    EXPECT_EQ(allreduce(groups.get(kind), 1, ReduceOp::kSum), layout.group_size(kind));
  }
}

TEST(Groups, EveryValidLayoutOfThisWorld) {
  const int world = runtime().world_size();
  int built = 0;
  for (int dp : divisors(world)) {
    for (bool dp_attention : {false, true}) {
      const int tp = dp_attention ? world : world / dp;
      for (int ep : divisors(tp)) {
        LayoutSpec spec;
        spec.world = world;
        spec.tp = tp;
        spec.dp = dp;
        spec.ep = ep;
        spec.enable_dp_attention = dp_attention;
        spec.enable_dp_lm_head = dp_attention;
        // Simulated nodes of one attention-TP group each, as SGLang places them.
        spec.ranks_per_node = dp_attention ? world / dp : tp;
        Groups groups(Layout::make(spec), runtime().world());
        check_groups(groups);
        ++built;
      }
    }
  }
  EXPECT_GE(built, 1);
}

TEST(Groups, ProductionLayoutOnSimulatedNodes) {
  const int world = runtime().world_size();
  if (world != 64) GTEST_SKIP() << "the TP64/DP4/EP64 layout needs 64 ranks";
  LayoutSpec spec;
  spec.world = 64;
  spec.tp = 64;
  spec.dp = 4;
  spec.ep = 64;
  spec.enable_dp_attention = true;
  spec.enable_dp_lm_head = true;
  spec.enable_shared_experts_attn_tp = true;
  spec.enable_dense_mlp_attn_tp = true;
  spec.ranks_per_node = 16;
  const NodeInfo nodes = runtime().discover_nodes(16);
  EXPECT_TRUE(nodes.simulated);
  EXPECT_EQ(nodes.node_count, 4);
  EXPECT_EQ(nodes.node, runtime().rank() / 16);
  Groups groups(Layout::make(spec), runtime().world());
  check_groups(groups);
  EXPECT_EQ(groups.attn_tp().size(), 16);
  EXPECT_EQ(groups.moe_ep().size(), 64);
  EXPECT_EQ(groups.moe_ep().rank(), runtime().rank());
  // Each attention-TP group is exactly one simulated node.
  EXPECT_EQ(allgather(groups.attn_tp(), runtime().rank()),
            allgather(groups.node(), runtime().rank()));
}

TEST(Nodes, DiscoversOneHostOrSimulatedBlocks) {
  const int world = runtime().world_size();
  const NodeInfo real = runtime().discover_nodes(0);
  EXPECT_FALSE(real.simulated);
  EXPECT_EQ(real.node_count, 1);  // the tests run on one host
  EXPECT_EQ(real.local_size, world);
  EXPECT_EQ(real.local_rank, runtime().rank());
  ASSERT_EQ(real.node_hosts.size(), 1u);
  EXPECT_EQ(real.node_hosts[0], runtime().env().hostname);
  for (int rpn : divisors(world)) {
    const NodeInfo sim = runtime().discover_nodes(rpn);
    EXPECT_TRUE(sim.simulated);
    EXPECT_EQ(sim.node_count, world / rpn);
    EXPECT_EQ(sim.node, runtime().rank() / rpn);
    EXPECT_EQ(sim.local_rank, runtime().rank() % rpn);
    EXPECT_EQ(static_cast<int>(sim.node_hosts.size()), world / rpn);
  }
}

TEST(Collectives, AllreduceAllgatherBcast) {
  const Comm& world = runtime().world();
  const int n = world.size();
  const int me = world.rank();
  std::vector<double> v = {1.0 * me, 2.0, -1.0 * me};
  allreduce(world, std::span<double>(v), ReduceOp::kSum);
  const double sum = n * (n - 1) / 2.0;
  EXPECT_EQ(v, (std::vector<double>{sum, 2.0 * n, -sum}));
  EXPECT_EQ(allreduce(world, static_cast<std::int64_t>(me), ReduceOp::kMax), n - 1);
  EXPECT_EQ(allreduce(world, me, ReduceOp::kMin), 0);

  std::vector<int> expected(n);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(allgather(world, me), expected);

  std::string text = me == n - 1 ? std::string(100000, 'k') + "3eval" : "";
  bcast(world, text, n - 1);
  EXPECT_EQ(text.size(), 100005u);
  EXPECT_EQ(text.substr(99998), "kk3eval");
  std::array<float, 3> floats = {0, 0, 0};
  if (me == 0) floats = {1.5f, -2.5f, 3.25f};
  bcast(world, std::span<float>(floats), 0);
  EXPECT_EQ(floats, (std::array<float, 3>{1.5f, -2.5f, 3.25f}));
}

// Each collective's wait and bytes land in the kind of traffic its scope names: bytes as the
// data this rank must deliver to the others, the outermost wrapper counted once as a call, and
// the report gathers every rank's difference since a snapshot.
TEST(Traffic, CountsEachCollectiveInItsScopesKind) {
  const Comm& world = runtime().world();
  const int n = world.size();
  const int me = world.rank();
  const TrafficCounts before = traffic_counts();
  {
    const TrafficScope scope(Traffic::kExpertAllToAll);
    std::vector<int> counts(static_cast<std::size_t>(n), 3);  // 3 floats to every member
    std::vector<float> send(static_cast<std::size_t>(3 * n), 1.0f);
    alltoallv(world, std::span<const float>(send), std::span<const int>(counts), counts);
    {
      const TrafficScope inner(Traffic::kLmHead);  // overrides until it ends
      std::vector<float> v(100, 1.0f);
      allreduce_sum_ordered(world, std::span<float>(v));
    }
    std::vector<std::int32_t> ids(4, 0);
    if (me == 0) ids = {1, 2, 3, 4};
    bcast(world, std::span<std::int32_t>(ids), 0);
  }
  const TrafficCounts after = traffic_counts();
  auto delta = [&](Traffic k) {
    const auto i = static_cast<std::size_t>(k);
    return TrafficCount{after[i].seconds - before[i].seconds, after[i].bytes - before[i].bytes,
                        after[i].calls - before[i].calls};
  };
  const TrafficCount ep = delta(Traffic::kExpertAllToAll);
  const std::uint64_t others = static_cast<std::uint64_t>(n - 1);
  EXPECT_EQ(ep.calls, 2u);  // the alltoallv and the bcast
  EXPECT_EQ(ep.bytes, others * 3 * sizeof(float) + (me == 0 ? others * 4 * sizeof(std::int32_t) : 0));
  EXPECT_GE(ep.seconds, 0.0);
  const TrafficCount head = delta(Traffic::kLmHead);
  if (n == 1) {
    EXPECT_EQ(head.calls, 0u);  // one member: nothing to exchange, no collective
  } else {
    EXPECT_EQ(head.calls, 1u);  // the reduce-scatter nested inside counts no second call
    // This member's segment to each other member, and its own summed segment back to them.
    const std::uint64_t segment = 100 * (me + 1) / n - 100 * me / n;
    std::uint64_t not_mine = 0;
    for (int r = 0; r < n; ++r)
      if (r != me) not_mine += 100 * (r + 1) / n - 100 * r / n;
    EXPECT_EQ(head.bytes, (not_mine + others * segment) * sizeof(float));
  }
  EXPECT_EQ(delta(Traffic::kDpSync).calls, 0u);

  const TrafficReport report = gather_traffic(world, before, 1);
  if (me != 0) {
    EXPECT_TRUE(report.rows.empty());
    return;
  }
  EXPECT_EQ(report.ranks, n);
  ASSERT_FALSE(report.rows.empty());
  const auto row = std::find_if(report.rows.begin(), report.rows.end(),
                                [](const TrafficRow& r) { return r.kind == "EP all-to-all"; });
  ASSERT_NE(row, report.rows.end());
  EXPECT_EQ(row->calls_per_rank, 2.0);
  // Every member sent 3 floats to each other one; the root also sent the 4 ids to each.
  EXPECT_EQ(row->bytes, static_cast<std::uint64_t>(n) * others * 3 * sizeof(float) +
                            others * 4 * sizeof(std::int32_t));
  EXPECT_GE(row->max_s, row->mean_s);
}

// Each element is added in rank order, whatever the length: an element's sum is the same bits
// alone and inside any longer call (the engine's batch invariance rests on it). Values whose
// sum depends on the order (large and small magnitudes) show any other order.
TEST(Collectives, OrderedSumAddsInRankOrderAtAnyLength) {
  const Comm& world = runtime().world();
  const int n = world.size();
  const int me = world.rank();
  auto value = [](int rank, std::size_t i) {
    const float big = (rank % 3 == 0 ? 1e8f : -3e7f) * static_cast<float>(1 + i % 7);
    return big + 0.37f * static_cast<float>(rank + 1) + 1e-3f * static_cast<float>(i);
  };
  for (const std::size_t length : {std::size_t{1}, std::size_t(n > 1 ? n - 1 : 1),
                                   std::size_t(n), std::size_t{1000}, std::size_t{100003}}) {
    std::vector<float> v(length);
    for (std::size_t i = 0; i < length; ++i) v[i] = value(me, i);
    allreduce_sum_ordered(world, std::span<float>(v));
    for (std::size_t i = 0; i < length; ++i) {
      float want = value(0, i);
      for (int r = 1; r < n; ++r) want += value(r, i);
      ASSERT_EQ(std::memcmp(&v[i], &want, sizeof want), 0)
          << "length " << length << ", element " << i << ": " << v[i] << " vs " << want;
    }
  }
  std::vector<float> none;
  allreduce_sum_ordered(world, std::span<float>(none));  // empty on every member: a no-op
}

// The reduce-scatter half: member m gets its own segment (counts[m] values, some empty), summed
// in rank order, the same bits as the full ordered allreduce.
TEST(Collectives, OrderedReduceScatterGivesEachMemberItsSegment) {
  const Comm& world = runtime().world();
  const int n = world.size();
  const int me = world.rank();
  std::vector<int> counts(static_cast<std::size_t>(n));
  for (int m = 0; m < n; ++m) counts[static_cast<std::size_t>(m)] = (m * 7) % 5;  // 0 for m = 0
  int total = 0, first = 0;
  for (int m = 0; m < n; ++m) {
    if (m == me) first = total;
    total += counts[static_cast<std::size_t>(m)];
  }
  std::vector<float> v(static_cast<std::size_t>(total));
  for (int i = 0; i < total; ++i)
    v[static_cast<std::size_t>(i)] = (me % 2 ? 1e8f : -3e7f) + 0.37f * static_cast<float>(me + i);
  std::vector<float> full = v;
  allreduce_sum_ordered(world, std::span<float>(full));
  const std::vector<float> mine = reduce_scatter_sum_ordered(world, v, counts);
  ASSERT_EQ(mine.size(), static_cast<std::size_t>(counts[static_cast<std::size_t>(me)]));
  for (std::size_t i = 0; i < mine.size(); ++i)
    EXPECT_EQ(std::memcmp(&mine[i], &full[static_cast<std::size_t>(first) + i], sizeof(float)), 0);
}

TEST(Collectives, VariableLengthGathers) {
  const Comm& world = runtime().world();
  const int me = world.rank();
  // Rank r contributes r elements of value r (rank 0 contributes nothing).
  const std::vector<std::int32_t> mine(me, me);
  std::vector<std::int32_t> expected;
  for (int r = 0; r < world.size(); ++r) expected.insert(expected.end(), r, r);

  const auto all = allgatherv(world, std::span<const std::int32_t>(mine));
  EXPECT_EQ(all.data, expected);
  EXPECT_EQ(all.counts[world.size() - 1], world.size() - 1);
  // With the counts known in advance: the same result without the count exchange.
  std::vector<int> known(world.size());
  for (int r = 0; r < world.size(); ++r) known[r] = r;
  const auto all_known = allgatherv(world, std::span<const std::int32_t>(mine), known);
  EXPECT_EQ(all_known.data, expected);
  EXPECT_EQ(all_known.counts, known);
  known[me] += 1;  // a count that disagrees with this member's contribution, on every rank
  EXPECT_THROW(allgatherv(world, std::span<const std::int32_t>(mine), known), InternalError);

  const int root = world.size() / 2;
  const auto gathered = gatherv(world, std::span<const std::int32_t>(mine), root);
  if (me == root) {
    EXPECT_EQ(gathered.data, expected);
  } else {
    EXPECT_TRUE(gathered.data.empty());
  }
}

TEST(Collectives, AlltoallvWithRandomAndZeroCounts) {
  const Comm& world = runtime().world();
  const int n = world.size();
  const int me = world.rank();
  // count(src, dst) is known to every rank, so each can check what it receives. Some are zero,
  // as for a DP group with no tokens.
  auto count = [](int src, int dst) {
    return ((src * 7 + dst * 3) % 5 == 0) ? 0 : (src + 2 * dst) % 4 + 1;
  };
  auto value = [](int src, int dst, int i) {
    return static_cast<float>(src * 1000 + dst * 10 + i);
  };
  std::vector<int> send_counts(n);
  std::vector<float> send;
  for (int dst = 0; dst < n; ++dst) {
    send_counts[dst] = count(me, dst);
    for (int i = 0; i < send_counts[dst]; ++i) send.push_back(value(me, dst, i));
  }
  const auto got =
      alltoallv(world, std::span<const float>(send), std::span<const int>(send_counts));
  std::vector<float> expected;
  for (int src = 0; src < n; ++src) {
    EXPECT_EQ(got.counts[src], count(src, me));
    for (int i = 0; i < count(src, me); ++i) expected.push_back(value(src, me, i));
  }
  EXPECT_EQ(got.data, expected);
  // The receiver knowing its counts (the engine's combine step): the same exchange in one call.
  std::vector<int> recv_counts(n);
  for (int src = 0; src < n; ++src) recv_counts[src] = count(src, me);
  const auto known = alltoallv(world, std::span<const float>(send),
                               std::span<const int>(send_counts), recv_counts);
  EXPECT_EQ(known.data, expected);
  EXPECT_EQ(known.counts, recv_counts);

  // Everyone empty: still a valid exchange.
  const std::vector<int> zeros(n, 0);
  const auto none = alltoallv(world, std::span<const float>(), std::span<const int>(zeros));
  EXPECT_TRUE(none.data.empty());
}

TEST(Collectives, RefuseInconsistentSendCounts) {
  const Comm& world = runtime().world();
  const std::vector<int> counts(world.size(), 1);
  const std::vector<float> too_few(world.size() - 1 + 0, 0.0f);
  // A local argument error is detected before any communication, on every rank alike.
  EXPECT_THROW(alltoallv(world, std::span<const float>(too_few), std::span<const int>(counts)),
               InternalError);
  const std::vector<int> wrong_size(world.size() + 1, 0);
  EXPECT_THROW(alltoallv(world, std::span<const float>(), std::span<const int>(wrong_size)),
               InternalError);
}

TEST(Collectively, LowestFailingRankReportsAndEveryRankLeavesWithItsCode) {
  const int n = runtime().world_size();
  const int me = runtime().rank();
  // Ranks >= n/2 fail with an input error, the last one with an internal error: the lowest
  // failing rank (n/2) decides the code.
  try {
    runtime().collectively([&] {
      if (me == n - 1 && n > 1) throw InternalError("last rank broke");
      if (me >= n / 2) throw InputError("bad input on rank " + std::to_string(me));
    });
    ADD_FAILURE() << "collectively() returned although some rank failed";
  } catch (const ReportedError& e) {
    EXPECT_EQ(e.exit_code(), ExitCode::kInput);
  }
  // Nobody fails: nothing thrown anywhere.
  EXPECT_NO_THROW(runtime().collectively([] {}));
}

TEST(Collectively, LayoutErrorReachesEveryRank) {
  LayoutSpec spec;
  spec.world = runtime().world_size();
  spec.dp = 3;
  spec.enable_dp_attention = true;
  spec.tp = spec.world;
  if (spec.world % 3 == 0) GTEST_SKIP() << "dp 3 divides this world";
  EXPECT_THROW(runtime().collectively([&] { Layout::make(spec); }), ReportedError);
}

TEST(MainThread, CollectivesOffTheMainThreadAreRefused) {
  bool refused = false;
  std::thread worker([&] {
    try {
      allreduce(runtime().world(), 1, ReduceOp::kSum);
    } catch (const InternalError&) {
      refused = true;
    }
  });
  worker.join();
  EXPECT_TRUE(refused);
}

TEST(ThreadCap, CapsOneTbb) {
  {
    ThreadCap cap(1);
    EXPECT_EQ(ThreadCap::active_parallelism(), 1);
  }
  EXPECT_THROW(ThreadCap(0), UsageError);
}

}  // namespace
}  // namespace k3::dist
