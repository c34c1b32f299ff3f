// bench_engine: prefill and decode tokens/s of the Kimi-K3 engine on a synthetic checkpoint, for
// one parallel layout per run (docs/PERFORMANCE.md, "Engine tokens/s").
//
//   mpirun -np 2 --oversubscribe build/bin/bench_engine --model-path DIR --tp 2 --label tp2
//
// A plain timed driver, not Google Benchmark: Google Benchmark picks each benchmark's iteration
// count from the process's own clock, so two ranks would run different numbers of Engine::step()
// calls, and every step is a collective over the world (a deadlock at the first mismatch). Fixed
// iteration counts would remove most of what the library adds, and an engine step is not an
// idempotent iteration anyway: every decode step grows the slots' caches. Here every rank runs
// the same steps in lockstep; each timed phase starts after a barrier, its time is the slowest
// rank's, and only rank 0 prints.
//
// Batches are global: `--batches 16` under DP2 is 8 sequences per DP group, so tokens/s are the
// job's. Prefill: every sequence's prompt of --prompt-len tokens fed through Engine::step with at
// most --chunk tokens per DP group per step (0: the whole batch in one step, i.e. a chunked
// prefill size at least as large as the batch), each sequence sampling its first token at the end
// as serving does. Decode: sequences prefilled with a --decode-prompt-len prompt (not timed),
// then --decode-steps steps of one token per sequence, each step feeding back the sampled token.
// Output: one '|' separated row per (phase, batch) with the median and best of --reps
// repetitions; lines starting with '#' describe the run.
//
// Profiling only the timed phases: K3_BENCH_PERF_CTL=CTL[,ACK] names the fifos of
// `perf record -D -1 --control fifo:CTL,ACK` ("%r" in them stands for the rank, so each rank can
// run under its own perf); sampling is enabled around each timed phase.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <boost/program_options.hpp>
#include <tbb/blocked_range.h>
#include <tbb/parallel_reduce.h>

#include "apps/common/layout_options.h"
#include "common/error.h"
#include "dist/collectives.h"
#include "dist/env.h"
#include "dist/groups.h"
#include "dist/runtime.h"
#include "dist/threads.h"
#include "model/engine/engine.h"
#include "tests/model/engine/engine_support.h"

namespace {

using namespace k3;
using model::engine::Engine;
using model::engine::EngineOptions;
using model::engine::StepResult;
using model::engine::StepSequence;
using Clock = std::chrono::steady_clock;
namespace po = boost::program_options;

struct Options {
  std::string model_path;
  dist::LayoutSpec layout;
  std::optional<int> threads;
  std::string label;
  std::vector<int> batches = {1, 16, 64};
  std::vector<std::string> phases = {"prefill", "decode"};
  std::size_t prompt_len = 512;
  std::size_t decode_prompt_len = 32;
  std::size_t decode_steps = 32;
  std::size_t chunk = 0;
  int reps = 3;
  bool header = true;
  bool help = false;
  bool no_repack = false;
};

template <class T>
std::vector<T> split_list(const std::string& text) {
  std::vector<T> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    if constexpr (std::is_same_v<T, int>) {
      std::size_t used = 0;
      int v = 0;
      try {
        v = std::stoi(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != item.size() || v < 1)
        throw UsageError("--batches: '" + item + "' is not a positive integer");
      out.push_back(v);
    } else {
      out.push_back(item);
    }
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  std::string batches = "1,16,64", phases = "prefill,decode";
  po::options_description desc("bench_engine");
  // clang-format off
  desc.add_options()
      ("help", po::bool_switch(&o.help), "this text")
      ("model-path", po::value(&o.model_path),
       "synthetic checkpoint (k3ckpt synth); default: $K3_BENCH_MODEL")
      ("threads", po::value<int>(), "oneTBB threads per rank (default 1, or SLURM_CPUS_PER_TASK)")
      ("label", po::value(&o.label), "configuration name in the table (default: the layout)")
      ("batches", po::value(&batches)->default_value(batches), "global batch sizes")
      ("phases", po::value(&phases)->default_value(phases), "prefill, decode or both")
      ("prompt-len", po::value(&o.prompt_len)->default_value(o.prompt_len),
       "prefill: prompt tokens per sequence")
      ("decode-prompt-len", po::value(&o.decode_prompt_len)->default_value(o.decode_prompt_len),
       "decode: prompt tokens per sequence before the timed steps")
      ("decode-steps", po::value(&o.decode_steps)->default_value(o.decode_steps),
       "decode: timed steps (one token per sequence each)")
      ("chunk", po::value(&o.chunk)->default_value(o.chunk),
       "prefill tokens per DP group per step; 0: the whole batch in one step")
      ("reps", po::value(&o.reps)->default_value(o.reps), "timed repetitions per case")
      ("no-repack", po::bool_switch(&o.no_repack),
       "keep every weight matrix as stored (EngineOptions::repack_weights off; k3eval "
       "--disable-weight-repack), for A/B runs")
      ("no-header", "print no column header");
  // clang-format on
  desc.add(apps::layout_options(o.layout));
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string("bench_engine: ") + e.what());
  }
  if (o.help) {
    std::ostringstream s;
    s << desc;
    std::fputs(s.str().c_str(), stdout);
    return o;
  }
  if (vm.count("threads")) o.threads = vm["threads"].as<int>();
  o.header = vm.count("no-header") == 0;
  o.batches = split_list<int>(batches);
  o.phases = split_list<std::string>(phases);
  for (const auto& p : o.phases)
    if (p != "prefill" && p != "decode")
      throw UsageError("--phases: '" + p + "' is not prefill or decode");
  if (o.model_path.empty()) {
    const char* env = std::getenv("K3_BENCH_MODEL");
    if (env == nullptr || *env == '\0')
      throw UsageError("bench_engine: pass --model-path DIR or set K3_BENCH_MODEL");
    o.model_path = env;
  }
  if (o.prompt_len == 0 || o.decode_prompt_len == 0 || o.decode_steps == 0 || o.reps < 1)
    throw UsageError("bench_engine: lengths, steps and --reps must be at least 1");
  return o;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::string load1() {
  const std::string all = load_average();
  return all.substr(0, all.find(' '));
}

// perf's control fifos (see the header comment); inactive unless K3_BENCH_PERF_CTL is set.
class PerfControl {
 public:
  explicit PerfControl(int rank) {
    const char* env = std::getenv("K3_BENCH_PERF_CTL");
    if (env == nullptr || *env == '\0') return;
    std::string spec = env;
    for (auto at = spec.find("%r"); at != std::string::npos; at = spec.find("%r"))
      spec.replace(at, 2, std::to_string(rank));
    const auto comma = spec.find(',');
    ctl_.open(spec.substr(0, comma));
    if (!ctl_) throw UsageError("K3_BENCH_PERF_CTL: cannot open '" + spec.substr(0, comma) + "'");
    if (comma != std::string::npos) ack_.open(spec.substr(comma + 1));
  }
  void enable() { send("enable"); }
  void disable() { send("disable"); }

 private:
  void send(const char* command) {
    if (!ctl_.is_open()) return;
    ctl_ << command << std::endl;
    std::string reply;
    if (ack_.is_open()) std::getline(ack_, reply);  // perf answers "ack" once applied
  }
  std::ofstream ctl_;
  std::ifstream ack_;
};

// One DP group's part of a global batch: sequences i with i mod groups == its DP rank.
struct Local {
  std::vector<std::size_t> ids;  // global sequence ids
  int slot(std::size_t k) const { return static_cast<int>(k); }
};

class Bench {
 public:
  Bench(const dist::Groups& groups, Engine& engine)
      : groups_(groups), engine_(engine), perf_(groups.world().rank()) {
    const dist::Layout& layout = groups.layout();
    dp_groups_ = layout.group_count(dist::GroupKind::kAttnTp);
    dp_rank_ = layout.coords(groups.world().rank()).dp_rank;
  }

  Local local(int batch) const {
    Local l;
    for (int i = dp_rank_; i < batch; i += dp_groups_) l.ids.push_back(static_cast<std::size_t>(i));
    return l;
  }
  // Sequences per DP group, the largest group first (what sizes the slots).
  static int per_group(int batch, int groups) { return (batch + groups - 1) / groups; }

  // Seconds of the slowest rank for `fn`, started together.
  template <class Fn>
  double timed(Fn&& fn) {
    perf_.enable();
    dist::barrier(groups_.world());
    const auto t0 = Clock::now();
    fn();
    const double mine = std::chrono::duration<double>(Clock::now() - t0).count();
    perf_.disable();
    return dist::allreduce(groups_.world(), mine, dist::ReduceOp::kMax);
  }

  // Feeds each local sequence's prompt, at most `chunk` tokens per step over the group (0: all at
  // once); every rank runs as many steps as the busiest DP group needs. Returns the tokens
  // sampled after each prompt.
  std::vector<std::int32_t> prefill(const Local& l,
                                    const std::vector<std::vector<std::int32_t>>& prompts,
                                    std::size_t chunk) {
    for (std::size_t k = 0; k < l.ids.size(); ++k) engine_.reset_slot(l.slot(k));
    std::size_t mine = 0;
    for (std::size_t id : l.ids) mine += prompts[id].size();
    const std::size_t budget = chunk == 0 ? std::max<std::size_t>(mine, 1) : chunk;
    const auto my_steps = static_cast<std::int64_t>((mine + budget - 1) / budget);
    const std::int64_t steps = dist::allreduce(groups_.world(), my_steps, dist::ReduceOp::kMax);
    std::vector<std::size_t> fed(l.ids.size(), 0);
    std::vector<std::int32_t> first(l.ids.size(), -1);
    std::vector<StepSequence> batch;
    std::vector<std::size_t> which;
    for (std::int64_t s = 0; s < steps; ++s) {
      batch.clear();
      which.clear();
      std::size_t left = budget;
      for (std::size_t k = 0; k < l.ids.size() && left > 0; ++k) {
        const auto& p = prompts[l.ids[k]];
        if (fed[k] == p.size()) continue;
        const std::size_t n = std::min(left, p.size() - fed[k]);
        StepSequence q;
        q.slot = l.slot(k);
        q.tokens = std::span<const std::int32_t>(p).subspan(fed[k], n);
        q.output =
            fed[k] + n == p.size() ? StepSequence::Output::kNextToken : StepSequence::Output::kNone;
        batch.push_back(q);
        which.push_back(k);
        fed[k] += n;
        left -= n;
      }
      const StepResult r = step(batch);
      for (std::size_t i = 0; i < batch.size(); ++i)
        if (r.next[i] >= 0) first[which[i]] = r.next[i];
    }
    return first;
  }

  // `steps` decode steps of one token per local sequence, feeding back the sampled token.
  void decode(const Local& l, std::vector<std::int32_t>& last, std::size_t steps) {
    std::vector<StepSequence> batch(l.ids.size());
    for (std::size_t s = 0; s < steps; ++s) {
      for (std::size_t k = 0; k < l.ids.size(); ++k) {
        batch[k].slot = l.slot(k);
        batch[k].tokens = std::span<const std::int32_t>(&last[k], 1);
        batch[k].output = StepSequence::Output::kNextToken;
      }
      const StepResult r = step(batch);
      for (std::size_t k = 0; k < l.ids.size(); ++k) last[k] = r.next[k];
    }
  }

 private:
  // As the Generator does: the first rank of the attention-TP group decides the sampled tokens.
  StepResult step(std::span<const StepSequence> batch) {
    StepResult r = engine_.step(batch);
    if (groups_.attn_tp().size() > 1 && !r.next.empty())
      dist::bcast(groups_.attn_tp(), std::span<std::int32_t>(r.next), 0);
    return r;
  }

  const dist::Groups& groups_;
  Engine& engine_;
  PerfControl perf_;
  int dp_groups_ = 1;
  int dp_rank_ = 0;
};

struct Row {
  std::string phase;
  int batch = 0;
  std::size_t tokens = 0;  // per repetition, the whole job
  std::vector<double> seconds;
};

void print_row(const std::string& label, const std::string& format, int ranks, int threads,
               const Row& r) {
  std::vector<double> s = r.seconds;
  std::sort(s.begin(), s.end());
  const double median = s[s.size() / 2];
  const auto tps = [&](double sec) { return static_cast<double>(r.tokens) / sec; };
  std::printf(
      "%-22s | %-9s | %5d | %7d | %-7s | %5d | %7zu | %8.3f | %10.1f | %10.1f | %10.1f | %s\n",
      label.c_str(), format.c_str(), ranks, threads, r.phase.c_str(), r.batch, r.tokens, median,
      tps(median), tps(s.front()), tps(s.back()), load1().c_str());
  std::fflush(stdout);
}

// The sum of n 64-bit words, read as a stream with the kernels' prefetch distance (4 KiB ahead,
// quant/kernels_*.cpp). Cloned for AVX2, with which this host reads ~13 GB/s on one core
// against ~11 GB/s for the baseline x86-64 code.
#if defined(__x86_64__)
__attribute__((target_clones("avx2", "default")))
#endif
std::uint64_t sum_words(const std::uint64_t* p, std::size_t n) {
  std::uint64_t lanes[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {  // one cache line
    __builtin_prefetch(p + i + 512);
    for (int l = 0; l < 8; ++l) lanes[l] += p[i + l];
  }
  std::uint64_t sum = 0;
  for (; i < n; ++i) sum += p[i];
  for (std::uint64_t v : lanes) sum += v;
  return sum;
}

// Sustained read bandwidth of this rank with its oneTBB threads, bytes/s: the best of 5 passes
// over a buffer. The ranks measure at the same time, so on a shared host each sees its share of
// the memory system, as in a decode step; together they read 1 GiB (at least 128 MiB each),
// twice this host's 480 MiB L3, so that the figure is DRAM's. The buffer asks for transparent
// huge pages: the weights a decode step streams are mostly views into the mapped checkpoint,
// whose page cache the kernel maps with 2 MiB entries here (FilePmdMapped), and reading on
// 4 KiB pages is ~25 % slower on this host (13 against 16.5-19 GB/s), which would flatter the
// engine.
double read_bandwidth(int ranks) {
  constexpr std::size_t kHugePage = std::size_t{2} << 20;
  const std::size_t bytes = std::max<std::size_t>(
      (std::size_t{1} << 30) / static_cast<std::size_t>(ranks), std::size_t{64} * kHugePage);
  const std::size_t n = bytes / sizeof(std::uint64_t);
  std::unique_ptr<std::uint64_t, decltype(&std::free)> buffer(
      static_cast<std::uint64_t*>(std::aligned_alloc(kHugePage, bytes)), &std::free);
  if (!buffer) throw std::bad_alloc();
#if defined(__linux__)
  madvise(buffer.get(), bytes, MADV_HUGEPAGE);  // advisory: 4 KiB pages if refused
#endif
  std::fill_n(buffer.get(), n, std::uint64_t{1});  // every page mapped before timing
  double best = 0;
  std::uint64_t check = 0;
  for (int pass = 0; pass < 5; ++pass) {
    const auto t0 = Clock::now();
    check += tbb::parallel_reduce(
        tbb::blocked_range<std::size_t>(0, n, std::size_t{1} << 16), std::uint64_t{0},
        [&](const tbb::blocked_range<std::size_t>& r, std::uint64_t sum) {
          return sum + sum_words(buffer.get() + r.begin(), r.size());
        },
        std::plus<>());
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(bytes) / seconds);
  }
  if (check != 5 * n) throw InternalError("read_bandwidth: the buffer did not sum to its size");
  return best;
}

int run(dist::Runtime& runtime, int argc, char** argv) {
  Options o;
  std::optional<dist::ThreadCap> threads;
  std::optional<dist::Layout> layout;
  runtime.collectively([&] {
    o = parse(argc, argv);
    if (o.help) return;
    threads.emplace(o.threads.value_or(dist::default_thread_count(runtime.env())));
    o.layout.world = runtime.world_size();
    layout = dist::Layout::make(o.layout);
  });
  if (o.help) return 0;
  const dist::Groups groups(*layout, runtime.world());
  const bool root = runtime.rank() == 0;
  const int dp_groups = layout->group_count(dist::GroupKind::kAttnTp);

  test::LoadedSlice slice;
  runtime.collectively([&] { slice = test::load_slice(o.model_path, *layout, runtime.rank()); });
  const model::ModelConfig& config = slice.checkpoint->config();
  const std::string format(slice.checkpoint->format().name());

  int max_batch = 1;
  for (int b : o.batches) max_batch = std::max(max_batch, b);
  EngineOptions eo;  // int8 activations (exact = false), chunked KDA prefill
  eo.repack_weights = !o.no_repack;
  eo.slots = Bench::per_group(max_batch, dp_groups);
  eo.context_length =
      std::max(o.prompt_len, o.decode_prompt_len + o.decode_steps + 1) + std::size_t{16};
  std::optional<Engine> engine;
  runtime.collectively([&] { engine.emplace(config, slice.loaded.weights, groups, eo); });
  Bench bench(groups, *engine);
  const std::string label = o.label.empty() ? layout->summary() : o.label;

  // The batch-1 decode roofline: the slowest rank's weight bytes per token over its read
  // bandwidth (both measured here), as tokens/s.
  const std::uint64_t token_bytes =
      model::decode_bytes_per_token(model::weight_tree(slice.loaded.weights, config, *layout),
                                    config);
  dist::barrier(runtime.world());
  const double bandwidth = read_bandwidth(runtime.world_size());
  const double roofline_seconds = dist::allreduce(
      runtime.world(), static_cast<double>(token_bytes) / bandwidth, dist::ReduceOp::kMax);
  const double roofline_tps = 1.0 / roofline_seconds;

  if (root) {
    const std::time_t now = std::time(nullptr);
    char date[32];
    std::strftime(date, sizeof date, "%F %T UTC", std::gmtime(&now));
    std::printf("# %s, %u hardware threads, load average %s\n", date,
                std::thread::hardware_concurrency(), load_average().c_str());
    std::printf("# %s: %s checkpoint %s, %.1f MiB read by rank 0 in %.2f s\n", label.c_str(),
                format.c_str(), o.model_path.c_str(),
                static_cast<double>(slice.loaded.stats.bytes_read) / 1048576.0,
                slice.loaded.stats.total_seconds);
    std::printf(
        "# layout: %s; %d oneTBB thread(s) per rank; prefill %zu tokens/sequence, %s; "
        "decode %zu steps after %zu prompt tokens; %d rep(s)\n",
        layout->summary().c_str(), threads->threads(), o.prompt_len,
        o.chunk == 0 ? "whole batch per step"
                     : ("chunk " + std::to_string(o.chunk) + "/group/step").c_str(),
        o.decode_steps, o.decode_prompt_len, o.reps);
    std::printf(
        "# decode roofline at batch 1: %.1f MiB of weights per token on rank 0 (all dense "
        "weights, %d/%d of the routed experts, one embedding row), read bandwidth %.2f GB/s "
        "with %d thread(s) -> %.1f tok/s (slowest rank)\n",
        static_cast<double>(token_bytes) / 1048576.0, config.num_experts_per_token,
        config.num_experts, bandwidth / 1e9, threads->threads(), roofline_tps);
    if (o.header) {
      std::printf("%-22s | %-9s | %5s | %7s | %-7s | %5s | %7s | %8s | %10s | %10s | %10s | %s\n",
                  "config", "format", "ranks", "threads", "phase", "batch", "tokens", "median s",
                  "tok/s med", "tok/s best", "tok/s worst", "load");
    }
    std::fflush(stdout);
  }

  // Warm-up (untimed): one short prefill and a few decode steps on the largest local batch.
  {
    const auto l = bench.local(max_batch);
    const auto prompts = test::random_prompts(static_cast<std::size_t>(max_batch), 16, 16, 4096, 7);
    auto last = bench.prefill(l, prompts, 0);
    bench.decode(l, last, 2);
  }

  const int vocab = std::min(4096, config.base_vocab_size());
  for (const std::string& phase : o.phases) {
    for (int b : o.batches) {
      const Local l = bench.local(b);
      Row row;
      row.phase = phase;
      row.batch = b;
      for (int rep = 0; rep < o.reps; ++rep) {
        const auto seed = static_cast<std::uint32_t>(1000 * b + rep);
        if (phase == "prefill") {
          const auto prompts = test::random_prompts(static_cast<std::size_t>(b), o.prompt_len,
                                                    o.prompt_len, vocab, seed);
          row.tokens = static_cast<std::size_t>(b) * o.prompt_len;
          row.seconds.push_back(bench.timed([&] { bench.prefill(l, prompts, o.chunk); }));
        } else {
          const auto prompts = test::random_prompts(
              static_cast<std::size_t>(b), o.decode_prompt_len, o.decode_prompt_len, vocab, seed);
          auto last = bench.prefill(l, prompts, 0);
          row.tokens = static_cast<std::size_t>(b) * o.decode_steps;
          row.seconds.push_back(bench.timed([&] { bench.decode(l, last, o.decode_steps); }));
        }
      }
      if (root) print_row(label, format, runtime.world_size(), threads->threads(), row);
      if (root && phase == "decode" && b == 1) {
        std::vector<double> s = row.seconds;
        std::sort(s.begin(), s.end());
        const double median_tps = static_cast<double>(row.tokens) / s[s.size() / 2];
        std::printf("# decode batch 1: %.1f tok/s median = %.2f of the roofline\n", median_tps,
                    median_tps / roofline_tps);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  k3::dist::Runtime runtime(argc, argv);
  return runtime.run([&] { return run(runtime, argc, argv); });
}
