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

}  // namespace

Preflight preflight(dist::Runtime& runtime, const dist::Layout& layout,
                    const PreflightOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const dist::Comm& world = runtime.world();
  if (world.size() != layout.world()) {
    throw InternalError("preflight: " + std::to_string(world.size()) + " ranks for a layout of " +
                        std::to_string(layout.world()));
  }
  const int rank = world.rank();
  const bool planner = rank == kPlanningRank;
  Preflight out;

  // 1. The planning rank finds the format and the files that hold headers (a directory
  // listing, no file read); every rank learns them.
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
  dist::bcast(world, manifest, kPlanningRank);
  WireReader m(manifest);
  const auto root = m.get<std::string>();
  const auto kind = m.get<FormatKind>();
  const auto listed = m.get<std::vector<std::string>>();
  const double t_listed = seconds_since(t0);

  // 2. Each header once, while the planning rank reads the small files (config, index, ModelSlim
  // description): the other ranks take the files round-robin and send binary tensor records.
  // The planning rank reads only what it alone can use: a GGUF set's first file (its metadata
  // holds the config) and, in a job of one rank, everything. A header that cannot be read
  // travels as its error: only the planning rank knows whether the index names that file, and
  // it reports the first bad file in the checkpoint's order, as a single process would.
  const int readers = std::max(world.size() - 1, 1);
  auto reader_of = [&](std::size_t f) {
    if (world.size() == 1 || header_holds_config(kind, f)) return kPlanningRank;
    return 1 + static_cast<int>(f % static_cast<std::size_t>(readers));
  };
  std::optional<Checkpoint> checkpoint;
  std::vector<ShardHeader> own(listed.size());
  std::vector<std::string> unreadable(listed.size());
  WireWriter sent;
  double t_discovered = 0;
  runtime.collectively([&] {
    if (planner) checkpoint.emplace(Checkpoint::discover(options.path, kind));
    t_discovered = seconds_since(t0);
    const Checkpoint reader = Checkpoint::view(root, kind, {}, listed, "");
    for (std::size_t f = 0; f < listed.size(); ++f) {
      if (reader_of(f) != rank) continue;
      std::string error;
      ShardHeader h;
      try {
        h = reader.read_shard_header(f);
      } catch (const InputError& e) {
        error = e.what();
      }
      if (planner) {
        own[f] = std::move(h);
        unreadable[f] = std::move(error);
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
  const double t_read = seconds_since(t0);
  {
    const std::string bytes = sent.take();
    const auto gathered =
        dist::gatherv(world, std::span<const char>(bytes.data(), bytes.size()), kPlanningRank);
    if (planner) {
      WireReader in(std::string_view(gathered.data.data(), gathered.data.size()));
      std::vector<std::pair<std::size_t, std::string_view>> records;
      while (!in.done()) {
        const auto f = in.get<std::uint64_t>();
        if (f >= own.size()) throw InternalError("preflight: a header of no file arrived");
        in.get(unreadable[f]);
        records.emplace_back(f, in.get_view());
      }
      fan_out(records.size(), [&](std::size_t begin, std::size_t end) {
        for (std::size_t i = begin; i < end; ++i) {
          WireReader record(records[i].second);
          record.get(own[records[i].first].tensors);
        }
      });
    }
  }
  const double t_headers = seconds_since(t0);

  // 3. One binding and every rank's plan, on the planning rank only, which may use its node's
  // cores for the plans: every other rank waits for them.
  std::vector<std::string> plans;
  std::string shared;
  runtime.collectively([&] {
    if (!planner) return;
    // An index may name fewer shards than the directory holds: keep the headers of its files.
    std::unordered_map<std::string_view, std::size_t> listed_at;
    for (std::size_t f = 0; f < listed.size(); ++f) listed_at.emplace(listed[f], f);
    std::vector<ShardHeader> headers(checkpoint->files().size());
    for (std::size_t i = 0; i < headers.size(); ++i) {
      const auto at = listed_at.find(checkpoint->files()[i]);
      if (at == listed_at.end()) {
        throw InputError(checkpoint->files()[i] + ": a shard of the index that is not a " +
                         ".safetensors file of " + root);
      }
      if (!unreadable[at->second].empty()) throw InputError(unreadable[at->second]);
      headers[i] = std::move(own[at->second]);
    }
    own.clear();
    checkpoint->add_headers(std::move(headers));
    const double t_index = seconds_since(t0);
    if (options.checks) options.checks(*checkpoint);
    check_tokenizer(options.path, *checkpoint);
    const BindResult bound = bind_for_layout(*checkpoint, layout);
    const double t_bind = seconds_since(t0);
    plans = encode_plans(*checkpoint, bound, layout);
    std::size_t total = 0;
    for (const std::string& e : plans) total += e.size();
    WireWriter s;
    encode(s, checkpoint->config());
    s.put(checkpoint->name_prefix());
    s.put(checkpoint->files());  // the plans' file numbers index these
    encode(s, figures_of(*checkpoint));
    shared = s.take();
    spdlog::debug(
        "preflight: listed {:.2f} s, discovered {:.2f} s, headers read (all readers) {:.2f} s, "
        "gathered and decoded {:.2f} s, indexed {:.2f} s, bound {:.2f} s, planned {} ranks {:.2f} s "
        "({:.1f} MiB of plans)",
        t_listed, t_discovered - t_listed, t_read - t_listed, t_headers - t_read, t_index - t_headers, t_bind - t_index, world.size(),
        seconds_since(t0) - t_bind, total / double(1 << 20));
  });
  dist::bcast(world, shared, kPlanningRank);
  const std::string mine = dist::scatter_parts(world, plans, kPlanningRank);
  plans.clear();
  out.plan = from_wire<LoadPlan>(mine);
  WireReader s(shared);
  ModelConfig config;
  decode(s, config);
  const auto prefix = s.get<std::string>();
  const auto files = s.get<std::vector<std::string>>();
  decode(s, out.figures);
  // The planning rank lets its index go too: a long evaluation keeps only what loading needs.
  checkpoint.reset();
  out.checkpoint = Checkpoint::view(root, kind, std::move(config), files, prefix);
  out.seconds = seconds_since(t0);
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
