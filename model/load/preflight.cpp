#include "model/load/preflight.h"

#include <algorithm>
#include <chrono>
#include <string_view>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/fan_out.h"
#include "common/wire.h"
#include "dist/collectives.h"
#include "model/load/wire.h"

namespace k3::model {

namespace {

constexpr int kPlanningRank = 0;

void encode(WireWriter& out, const CheckpointFigures& f) {
  out.put(f.files);
  out.put(f.tensors);
  out.put(f.bytes);
}
void decode(WireReader& in, CheckpointFigures& f) {
  in.get(f.files);
  in.get(f.tensors);
  in.get(f.bytes);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The stages' ends in seconds since preflight began, for the debug line.
struct StageTimes {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  double listed = 0, discovered = 0, read = 0, headers = 0, indexed = 0, bound = 0;
  double now() const { return seconds_since(t0); }
};

// What every rank knows of the checkpoint before any header is read.
struct Manifest {
  std::string root;
  FormatKind kind{};
  std::vector<std::string> listed;  // the files that hold headers
};

// Every header the job read: the planning rank's own and the ones sent to it (others: empty).
struct Headers {
  std::vector<ShardHeader> by_file;
  std::vector<std::string> unreadable;  // per file: the error reading it, or empty
};

// 1. The planning rank finds the format and the files that hold headers (a directory listing,
// no file read); every rank learns them.
Manifest list_files(dist::Runtime& runtime, const PreflightOptions& options, bool planner) {
  std::string manifest;
  runtime.collectively([&] {
    if (!planner) return;
    const FormatKind kind =
        options.load_format ? *options.load_format : detect_format(options.path);
    WireWriter w;
    w.put(options.path.string());
    w.put(kind);
    w.put(header_files(options.path, kind));
    manifest = w.take();
  });
  dist::bcast(runtime.world(), manifest, kPlanningRank);
  WireReader m(manifest);
  Manifest out;
  out.root = m.get<std::string>();
  out.kind = m.get<FormatKind>();
  out.listed = m.get<std::vector<std::string>>();
  return out;
}

// The planning rank decodes the headers the other ranks sent (one nested record per file, on
// several threads).
void receive_headers(const dist::Comm& world, const std::string& sent, bool planner,
                     Headers& headers) {
  const auto gathered =
      dist::gatherv(world, std::span<const char>(sent.data(), sent.size()), kPlanningRank);
  if (!planner) return;
  WireReader in(std::string_view(gathered.data.data(), gathered.data.size()));
  std::vector<std::pair<std::size_t, std::string_view>> records;
  while (!in.done()) {
    const auto f = in.get<std::uint64_t>();
    if (f >= headers.by_file.size()) throw InternalError("preflight: a header of no file arrived");
    in.get(headers.unreadable[f]);
    records.emplace_back(f, in.get_view());
  }
  fan_out(records.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      WireReader record(records[i].second);
      record.get(headers.by_file[records[i].first].tensors);
    }
  });
}

// 2. Each header once, while the planning rank reads the small files (config, index, ModelSlim
// description): the other ranks take the files round-robin and send binary tensor records.
// The planning rank reads only what it alone can use: a GGUF set's first file (its metadata
// holds the config) and, in a job of one rank, everything. A header that cannot be read
// travels as its error: only the planning rank knows whether the index names that file, and
// it reports the first bad file in the checkpoint's order, as a single process would.
Headers read_headers(dist::Runtime& runtime, const PreflightOptions& options, const Manifest& m,
                     std::optional<Checkpoint>& checkpoint, StageTimes& times) {
  const dist::Comm& world = runtime.world();
  const int rank = world.rank();
  const bool planner = rank == kPlanningRank;
  const int readers = std::max(world.size() - 1, 1);
  auto reader_of = [&](std::size_t f) {
    if (world.size() == 1 || header_holds_config(m.kind, f)) return kPlanningRank;
    return 1 + static_cast<int>(f % static_cast<std::size_t>(readers));
  };
  Headers headers{std::vector<ShardHeader>(m.listed.size()),
                  std::vector<std::string>(m.listed.size())};
  WireWriter sent;
  runtime.collectively([&] {
    if (planner) checkpoint.emplace(Checkpoint::discover(options.path, m.kind));
    times.discovered = times.now();
    const Checkpoint reader = Checkpoint::view(m.root, m.kind, {}, m.listed, "");
    for (std::size_t f = 0; f < m.listed.size(); ++f) {
      if (reader_of(f) != rank) continue;
      std::string error;
      ShardHeader h;
      try {
        h = reader.read_shard_header(f);
      } catch (const InputError& e) {
        error = e.what();
      }
      if (planner) {
        headers.by_file[f] = std::move(h);
        headers.unreadable[f] = std::move(error);
      } else {
        // The tensors as a nested record: the planning rank decodes files on several threads.
        WireWriter tensors;
        tensors.put(h.tensors);
        sent.put(static_cast<std::uint64_t>(f));
        sent.put(error);
        sent.put(std::string_view(tensors.bytes()));
      }
    }
  });
  times.read = times.now();
  receive_headers(world, sent.take(), planner, headers);
  times.headers = times.now();
  return headers;
}

// The headers in the order of the checkpoint's files. An index may name fewer shards than the
// directory holds: only the headers of its files are kept.
std::vector<ShardHeader> headers_in_file_order(const Checkpoint& checkpoint, const Manifest& m,
                                               Headers& read) {
  std::unordered_map<std::string_view, std::size_t> listed_at;
  for (std::size_t f = 0; f < m.listed.size(); ++f) listed_at.emplace(m.listed[f], f);
  std::vector<ShardHeader> headers(checkpoint.files().size());
  for (std::size_t i = 0; i < headers.size(); ++i) {
    const auto at = listed_at.find(checkpoint.files()[i]);
    if (at == listed_at.end()) {
      throw InputError(checkpoint.files()[i] + ": a shard of the index that is not a " +
                       ".safetensors file of " + m.root);
    }
    if (!read.unreadable[at->second].empty()) throw InputError(read.unreadable[at->second]);
    headers[i] = std::move(read.by_file[at->second]);
  }
  read.by_file.clear();
  return headers;
}

// 3. On the planning rank: one binding and every rank's plan (it may use its node's cores for
// the plans). Returns what every rank receives besides its plan: the config, the tensor name
// prefix, the files the plans' numbers index and the checkpoint's figures.
std::string plan_every_rank(Checkpoint& checkpoint, const Manifest& m, Headers& read,
                            const dist::Layout& layout, const PreflightOptions& options,
                            std::vector<std::string>& plans, StageTimes& times) {
  checkpoint.add_headers(headers_in_file_order(checkpoint, m, read));
  times.indexed = times.now();
  if (options.checks) options.checks(checkpoint);
  check_tokenizer(options.path, checkpoint);
  const BindResult bound = bind_for_layout(checkpoint, layout);
  times.bound = times.now();
  plans = encode_plans(checkpoint, bound, layout);
  std::size_t total = 0;
  for (const std::string& e : plans) total += e.size();
  WireWriter s;
  encode(s, checkpoint.config());
  s.put(checkpoint.name_prefix());
  s.put(checkpoint.files());  // the plans' file numbers index these
  encode(s, figures_of(checkpoint));
  spdlog::debug(
      "preflight: listed {:.2f} s, discovered {:.2f} s, headers read (all readers) {:.2f} s, "
      "gathered and decoded {:.2f} s, indexed {:.2f} s, bound {:.2f} s, planned {} ranks {:.2f} s "
      "({:.1f} MiB of plans)",
      times.listed, times.discovered - times.listed, times.read - times.listed,
      times.headers - times.read, times.indexed - times.headers, times.bound - times.indexed,
      layout.world(), times.now() - times.bound, total / double(1 << 20));
  return s.take();
}

}  // namespace

Preflight preflight(dist::Runtime& runtime, const dist::Layout& layout,
                    const PreflightOptions& options) {
  StageTimes times;
  const dist::Comm& world = runtime.world();
  if (world.size() != layout.world()) {
    throw InternalError("preflight: " + std::to_string(world.size()) + " ranks for a layout of " +
                        std::to_string(layout.world()));
  }
  const bool planner = world.rank() == kPlanningRank;
  const Manifest manifest = list_files(runtime, options, planner);
  times.listed = times.now();
  std::optional<Checkpoint> checkpoint;
  Headers headers = read_headers(runtime, options, manifest, checkpoint, times);

  // Every other rank waits while the planning rank plans.
  std::vector<std::string> plans;
  std::string shared;
  runtime.collectively([&] {
    if (planner)
      shared = plan_every_rank(*checkpoint, manifest, headers, layout, options, plans, times);
  });
  dist::bcast(world, shared, kPlanningRank);
  const std::string mine = dist::scatter_parts(world, plans, kPlanningRank);
  plans.clear();
  Preflight out;
  out.plan = from_wire<LoadPlan>(mine);
  WireReader s(shared);
  ModelConfig config;
  decode(s, config);
  const auto prefix = s.get<std::string>();
  const auto files = s.get<std::vector<std::string>>();
  decode(s, out.figures);
  // The planning rank lets its index go too: a long evaluation keeps only what loading needs.
  checkpoint.reset();
  out.checkpoint = Checkpoint::view(manifest.root, manifest.kind, std::move(config), files, prefix);
  out.seconds = times.now();
  return out;
}

LoadResult load_slice(dist::Runtime& runtime, const Preflight& preflight,
                      const ProgressFn& progress) {
  std::optional<LoadResult> result;
  runtime.collectively(
      [&] { result.emplace(load_audited(*preflight.checkpoint, preflight.plan, progress)); });
  return std::move(*result);
}

}  // namespace k3::model
