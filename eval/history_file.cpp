#include "eval/history_file.h"

#include <hdf5.h>

#include <cstddef>
#include <ctime>
#include <limits>
#include <optional>

#include "common/error.h"
#include "common/text_file.h"

namespace k3::eval {

std::string utc_timestamp(std::chrono::system_clock::time_point when) {
  const std::time_t t = std::chrono::system_clock::to_time_t(when);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// ---------------------------------------------------------------- HDF5 history

namespace {

constexpr const char* kFormat = "k3eval-history";
constexpr std::uint64_t kFormatVersion = 1;

// An HDF5 identifier closed by its own close function.
class Hid {
 public:
  Hid() = default;
  Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Hid() { reset(); }
  Hid(Hid&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = H5I_INVALID_HID; }
  Hid& operator=(Hid&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;

  hid_t get() const { return id_; }
  hid_t release() {
    const hid_t id = id_;
    id_ = H5I_INVALID_HID;
    return id;
  }
  void reset() {
    if (id_ >= 0 && close_ != nullptr) close_(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  herr_t (*close_)(hid_t) = nullptr;
};

// HDF5 prints its error stack to stderr by default; our messages say what went wrong instead.
class QuietHdf5 {
 public:
  QuietHdf5() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietHdf5(const QuietHdf5&) = delete;
  QuietHdf5& operator=(const QuietHdf5&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// Every failing call in here names the file; `what` says which step.
class H5 {
 public:
  explicit H5(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& what) const { throw InputError(file_ + ": " + what); }
  hid_t check(hid_t id, const std::string& what) const {
    if (id < 0) fail("HDF5 cannot " + what);
    return id;
  }
  void check(herr_t rc, const std::string& what) const {
    if (rc < 0) fail("HDF5 cannot " + what);
  }

  Hid type(hid_t id, const std::string& what) const { return Hid(check(id, what), H5Tclose); }
  Hid space(hid_t id, const std::string& what) const { return Hid(check(id, what), H5Sclose); }
  Hid group(hid_t id, const std::string& what) const { return Hid(check(id, what), H5Gclose); }
  Hid attr(hid_t id, const std::string& what) const { return Hid(check(id, what), H5Aclose); }
  Hid dataset(hid_t id, const std::string& what) const { return Hid(check(id, what), H5Dclose); }
  Hid plist(hid_t id, const std::string& what) const { return Hid(check(id, what), H5Pclose); }

  Hid string_type() const {
    Hid t = type(H5Tcopy(H5T_C_S1), "copy the string type");
    check(H5Tset_size(t.get(), H5T_VARIABLE), "make a variable-length string type");
    check(H5Tset_cset(t.get(), H5T_CSET_UTF8), "set UTF-8 on the string type");
    return t;
  }

  void write_string_attr(hid_t obj, const char* name, const std::string& value) const {
    const Hid t = string_type();
    const Hid s = space(H5Screate(H5S_SCALAR), "create a scalar dataspace");
    const Hid a = attr(H5Acreate2(obj, name, t.get(), s.get(), H5P_DEFAULT, H5P_DEFAULT),
                       std::string("create attribute ") + name);
    const char* p = value.c_str();
    check(H5Awrite(a.get(), t.get(), &p), "write a string attribute");
  }

  void write_u64_array_attr(hid_t obj, const char* name,
                            const std::vector<std::uint64_t>& values) const {
    const hsize_t dims[1] = {values.size()};
    const Hid s = space(H5Screate_simple(1, dims, nullptr), "create an array dataspace");
    const Hid a = attr(H5Acreate2(obj, name, H5T_STD_U64LE, s.get(), H5P_DEFAULT, H5P_DEFAULT),
                       std::string("create attribute ") + name);
    check(H5Awrite(a.get(), H5T_NATIVE_UINT64, values.data()), "write an array attribute");
  }

  std::vector<std::uint64_t> read_u64_array_attr(hid_t obj, const std::string& where,
                                                 const char* name) const {
    const Hid a = open_attr(obj, where, name);
    const Hid ft = type(H5Aget_type(a.get()), "read an attribute type");
    const Hid s = space(H5Aget_space(a.get()), "read an attribute dataspace");
    if (H5Tget_class(ft.get()) != H5T_INTEGER || H5Sget_simple_extent_ndims(s.get()) != 1) {
      fail(where + "attribute \"" + std::string(name) + "\" is not an array of integers");
    }
    std::vector<std::uint64_t> values(
        static_cast<std::size_t>(H5Sget_simple_extent_npoints(s.get())));
    check(H5Aread(a.get(), H5T_NATIVE_UINT64, values.data()), "read an array attribute");
    return values;
  }

  void write_attr(hid_t obj, const char* name, hid_t file_type, hid_t mem_type,
                  const void* value) const {
    const Hid s = space(H5Screate(H5S_SCALAR), "create a scalar dataspace");
    const Hid a = attr(H5Acreate2(obj, name, file_type, s.get(), H5P_DEFAULT, H5P_DEFAULT),
                       std::string("create attribute ") + name);
    check(H5Awrite(a.get(), mem_type, value), "write an attribute");
  }

  Hid open_attr(hid_t obj, const std::string& where, const char* name) const {
    if (H5Aexists(obj, name) <= 0) fail(where + "missing attribute \"" + name + "\"");
    return attr(H5Aopen(obj, name, H5P_DEFAULT), std::string("open attribute ") + name);
  }

  std::string read_string_attr(hid_t obj, const std::string& where, const char* name) const {
    const Hid a = open_attr(obj, where, name);
    const Hid ft = type(H5Aget_type(a.get()), "read an attribute type");
    if (H5Tget_class(ft.get()) != H5T_STRING || H5Tis_variable_str(ft.get()) <= 0) {
      fail(where + "attribute \"" + std::string(name) + "\" is not a variable-length string");
    }
    const Hid t = string_type();
    char* p = nullptr;
    check(H5Aread(a.get(), t.get(), &p), "read a string attribute");
    std::string out = p != nullptr ? p : "";
    H5free_memory(p);
    return out;
  }

  template <class T>
  T read_attr(hid_t obj, const std::string& where, const char* name, hid_t mem_type,
              H5T_class_t cls) const {
    const Hid a = open_attr(obj, where, name);
    const Hid ft = type(H5Aget_type(a.get()), "read an attribute type");
    const Hid s = space(H5Aget_space(a.get()), "read an attribute dataspace");
    if (H5Tget_class(ft.get()) != cls || H5Sget_simple_extent_npoints(s.get()) != 1) {
      fail(where + "attribute \"" + std::string(name) + "\" is not a single " +
           (cls == H5T_FLOAT ? "floating-point number" : "integer"));
    }
    T value{};
    check(H5Aread(a.get(), mem_type, &value), "read a numeric attribute");
    return value;
  }

 private:
  std::string file_;
};

// One row of /runs/<n>/questions in memory.
struct Row {
  std::uint64_t id;
  std::int32_t dp_group;
  std::uint64_t prompt_tokens;
  char* output_text;
  char* prediction;
  char* label;
  std::uint8_t correct;
  std::uint8_t invalid;
  std::uint64_t completion_tokens;
  double latency_s;
  hvl_t token_ids;
};

constexpr const char* kRowFields[] = {
    "id",      "dp_group", "prompt_tokens",     "output_text", "prediction", "label",
    "correct", "invalid",  "completion_tokens", "latency_s",   "token_ids"};

// The row type in memory (`file` false: native, at Row's offsets) or on disk (`file` true:
// little-endian, packed).
Hid row_type(const H5& h5, bool file) {
  const Hid str = h5.string_type();
  const Hid tokens =
      h5.type(H5Tvlen_create(file ? H5T_STD_I32LE : H5T_NATIVE_INT32), "create a vlen type");
  const hid_t u64 = file ? H5T_STD_U64LE : H5T_NATIVE_UINT64;
  const hid_t i32 = file ? H5T_STD_I32LE : H5T_NATIVE_INT32;
  const hid_t u8 = file ? H5T_STD_U8LE : H5T_NATIVE_UINT8;
  const hid_t f64 = file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE;
  const hid_t members[] = {u64, i32, u64, str.get(), str.get(),   str.get(),
                           u8,  u8,  u64, f64,       tokens.get()};
  const std::size_t offsets[] = {
      offsetof(Row, id),          offsetof(Row, dp_group),   offsetof(Row, prompt_tokens),
      offsetof(Row, output_text), offsetof(Row, prediction), offsetof(Row, label),
      offsetof(Row, correct),     offsetof(Row, invalid),    offsetof(Row, completion_tokens),
      offsetof(Row, latency_s),   offsetof(Row, token_ids)};
  std::size_t size = sizeof(Row);
  if (file) {
    size = 0;
    for (hid_t m : members) size += H5Tget_size(m);
  }
  Hid t = h5.type(H5Tcreate(H5T_COMPOUND, size), "create the question row type");
  std::size_t at = 0;
  for (std::size_t i = 0; i < std::size(members); ++i) {
    h5.check(H5Tinsert(t.get(), kRowFields[i], file ? at : offsets[i], members[i]),
             "build the question row type");
    at += H5Tget_size(members[i]);
  }
  return t;
}

void reclaim(hid_t type, hid_t space, void* buf) {
#if H5_VERSION_GE(1, 12, 0)
  H5Treclaim(type, space, H5P_DEFAULT, buf);
#else
  H5Dvlen_reclaim(type, space, H5P_DEFAULT, buf);
#endif
}

Hid file_access(const H5& h5) {
  Hid fapl = h5.plist(H5Pcreate(H5P_FILE_ACCESS), "create a file access list");
#if H5_VERSION_GE(1, 10, 7)
  // Lock where the file system can; do not fail where it cannot (common on Lustre and NFS).
  h5.check(H5Pset_file_locking(fapl.get(), true, true), "set file locking");
#endif
  return fapl;
}

// A speculative run's attributes. accept_length and accept_rate are written for readers of the
// file (h5dump, h5py); read_speculative derives them from the counts again.
constexpr const char* kSpeculativeAlgorithm = "speculative_algorithm";
constexpr const char* kSpeculativeCounts[] = {"speculative_block_size", "verify_rounds",
                                              "drafted_tokens", "accepted_drafts"};
// How the draft lengths were chosen and what they were, with the decode time against the cost
// model's plain estimate: optional (runs written before them read as not recorded).
constexpr const char* kSpeculativePolicy = "speculative_policy";
constexpr const char* kDraftLengths = "draft_lengths";
constexpr const char* kSpeculativeTimes[] = {"speculative_decode_s",
                                             "speculative_plain_estimate_s"};

void write_speculative(const H5& h5, hid_t g, const SpeculativeRun& s) {
  h5.write_string_attr(g, kSpeculativeAlgorithm, s.algorithm);
  const std::uint64_t counts[] = {s.block_size, s.counts.verify_rounds, s.counts.drafted_tokens,
                                  s.counts.accepted_drafts};
  for (std::size_t i = 0; i < std::size(counts); ++i) {
    h5.write_attr(g, kSpeculativeCounts[i], H5T_STD_U64LE, H5T_NATIVE_UINT64, &counts[i]);
  }
  const std::pair<const char*, std::optional<double>> ratios[] = {
      {"accept_length", s.counts.accept_length()}, {"accept_rate", s.counts.accept_rate()}};
  for (const auto& [name, ratio] : ratios) {
    const double value = ratio.value_or(std::numeric_limits<double>::quiet_NaN());
    h5.write_attr(g, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
  }
  if (s.policy.empty()) return;
  h5.write_string_attr(g, kSpeculativePolicy, s.policy);
  h5.write_u64_array_attr(g, kDraftLengths, s.counts.draft_lengths);
  const double times[] = {s.counts.decode_s, s.counts.plain_estimate_s};
  for (std::size_t i = 0; i < std::size(times); ++i) {
    h5.write_attr(g, kSpeculativeTimes[i], H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &times[i]);
  }
}

// None when the run has no speculative_algorithm attribute (speculation off, or a run written
// before these attributes); then every other one is required.
std::optional<SpeculativeRun> read_speculative(const H5& h5, hid_t g, const std::string& where) {
  if (H5Aexists(g, kSpeculativeAlgorithm) <= 0) return std::nullopt;
  SpeculativeRun s;
  s.algorithm = h5.read_string_attr(g, where, kSpeculativeAlgorithm);
  std::uint64_t* counts[] = {&s.block_size, &s.counts.verify_rounds, &s.counts.drafted_tokens,
                             &s.counts.accepted_drafts};
  for (std::size_t i = 0; i < std::size(counts); ++i) {
    *counts[i] = h5.read_attr<std::uint64_t>(g, where, kSpeculativeCounts[i], H5T_NATIVE_UINT64,
                                             H5T_INTEGER);
  }
  if (s.counts.accepted_drafts > s.counts.drafted_tokens) {
    h5.fail(where + "accepted_drafts " + std::to_string(s.counts.accepted_drafts) +
            " exceeds drafted_tokens " + std::to_string(s.counts.drafted_tokens));
  }
  if (H5Aexists(g, kSpeculativePolicy) <= 0) return s;
  s.policy = h5.read_string_attr(g, where, kSpeculativePolicy);
  s.counts.draft_lengths = h5.read_u64_array_attr(g, where, kDraftLengths);
  double* times[] = {&s.counts.decode_s, &s.counts.plain_estimate_s};
  for (std::size_t i = 0; i < std::size(times); ++i) {
    *times[i] = h5.read_attr<double>(g, where, kSpeculativeTimes[i], H5T_NATIVE_DOUBLE, H5T_FLOAT);
  }
  return s;
}

void write_run(const H5& h5, hid_t runs, std::size_t n, const RunRecord& run) {
  const Hid g =
      h5.group(H5Gcreate2(runs, std::to_string(n).c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
               "create group /runs/" + std::to_string(n));
  const std::pair<const char*, const std::string*> strings[] = {
      {"timestamp", &run.timestamp},     {"version", &run.version}, {"checkpoint", &run.checkpoint},
      {"config_name", &run.config_name}, {"layout", &run.layout},   {"extractor", &run.extractor},
      {"verdict", &run.verdict},         {"kind", &run.kind}};
  for (const auto& [name, value] : strings) h5.write_string_attr(g.get(), name, *value);
  const std::pair<const char*, std::uint64_t> counts[] = {
      {"num_shots", run.num_shots},
      {"num_questions", run.num_questions},
      {"completion_tokens", run.completion_tokens},
      {"log_errors", run.log_errors},
      {"resumed_after", run.resumed_after},
      {"input_tokens", run.input_tokens}};
  for (const auto& [name, value] : counts) {
    h5.write_attr(g.get(), name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value);
  }
  const std::pair<const char*, double> reals[] = {
      {"accuracy", run.accuracy},
      {"invalid", run.invalid},
      {"latency_s", run.latency_s},
      {"output_throughput", run.output_throughput},
      {"baseline_accuracy", run.baseline_accuracy},
      {"threshold", run.threshold},
      {"baseline_output_throughput", run.baseline_output_throughput},
      {"throughput_threshold", run.throughput_threshold}};
  for (const auto& [name, value] : reals) {
    h5.write_attr(g.get(), name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
  }
  if (run.speculative) write_speculative(h5, g.get(), *run.speculative);

  std::vector<Row> rows(run.results.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const QuestionResult& r = run.results[i];
    // HDF5 only reads through these pointers while writing.
    rows[i] = Row{r.id,
                  r.dp_group,
                  r.prompt_tokens,
                  const_cast<char*>(r.output_text.c_str()),
                  const_cast<char*>(r.prediction.c_str()),
                  const_cast<char*>(r.label.c_str()),
                  static_cast<std::uint8_t>(r.correct),
                  static_cast<std::uint8_t>(r.invalid),
                  r.completion_tokens,
                  r.latency_s,
                  hvl_t{r.token_ids.size(), const_cast<std::int32_t*>(r.token_ids.data())}};
  }
  const Hid mem = row_type(h5, false);
  const Hid disk = row_type(h5, true);
  const hsize_t dims[1] = {rows.size()};
  const Hid s = h5.space(H5Screate_simple(1, dims, nullptr), "create the questions dataspace");
  const Hid d = h5.dataset(
      H5Dcreate2(g.get(), "questions", disk.get(), s.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
      "create dataset /runs/" + std::to_string(n) + "/questions");
  if (!rows.empty()) {
    h5.check(H5Dwrite(d.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()),
             "write the questions");
  }
}

RunRecord read_run(const H5& h5, hid_t runs, std::size_t n) {
  const std::string name = std::to_string(n);
  const std::string where = "run " + name + ": ";
  if (H5Lexists(runs, name.c_str(), H5P_DEFAULT) <= 0) {
    h5.fail(where + "/runs/" + name + " is missing (runs must be numbered 0, 1, ...)");
  }
  const Hid g = h5.group(H5Gopen2(runs, name.c_str(), H5P_DEFAULT), "open /runs/" + name);
  RunRecord run;
  const std::pair<const char*, std::string*> strings[] = {
      {"timestamp", &run.timestamp},     {"version", &run.version}, {"checkpoint", &run.checkpoint},
      {"config_name", &run.config_name}, {"layout", &run.layout},   {"extractor", &run.extractor},
      {"verdict", &run.verdict}};
  for (const auto& [attr, value] : strings) *value = h5.read_string_attr(g.get(), where, attr);
  const std::pair<const char*, std::uint64_t*> counts[] = {
      {"num_shots", &run.num_shots},
      {"num_questions", &run.num_questions},
      {"completion_tokens", &run.completion_tokens},
      {"log_errors", &run.log_errors}};
  for (const auto& [attr, value] : counts) {
    *value = h5.read_attr<std::uint64_t>(g.get(), where, attr, H5T_NATIVE_UINT64, H5T_INTEGER);
  }
  // Attributes later than the first histories: absent means what those runs were (not resumed,
  // an evaluation, no throughput figures).
  const std::pair<const char*, std::uint64_t*> later_counts[] = {
      {"resumed_after", &run.resumed_after}, {"input_tokens", &run.input_tokens}};
  for (const auto& [attr, value] : later_counts) {
    if (H5Aexists(g.get(), attr) > 0)
      *value = h5.read_attr<std::uint64_t>(g.get(), where, attr, H5T_NATIVE_UINT64, H5T_INTEGER);
  }
  if (H5Aexists(g.get(), "kind") > 0) {
    run.kind = h5.read_string_attr(g.get(), where, "kind");
    if (run.kind != "eval" && run.kind != "throughput")
      h5.fail(where + "attribute \"kind\" is \"" + run.kind + "\", expected eval or throughput");
  }
  const std::pair<const char*, double*> later_reals[] = {
      {"baseline_output_throughput", &run.baseline_output_throughput},
      {"throughput_threshold", &run.throughput_threshold}};
  for (const auto& [attr, value] : later_reals) {
    if (H5Aexists(g.get(), attr) > 0)
      *value = h5.read_attr<double>(g.get(), where, attr, H5T_NATIVE_DOUBLE, H5T_FLOAT);
  }
  const std::pair<const char*, double*> reals[] = {{"accuracy", &run.accuracy},
                                                   {"invalid", &run.invalid},
                                                   {"latency_s", &run.latency_s},
                                                   {"output_throughput", &run.output_throughput},
                                                   {"baseline_accuracy", &run.baseline_accuracy},
                                                   {"threshold", &run.threshold}};
  for (const auto& [attr, value] : reals) {
    *value = h5.read_attr<double>(g.get(), where, attr, H5T_NATIVE_DOUBLE, H5T_FLOAT);
  }
  run.speculative = read_speculative(h5, g.get(), where);

  if (H5Lexists(g.get(), "questions", H5P_DEFAULT) <= 0) {
    h5.fail(where + "dataset /runs/" + name + "/questions is missing");
  }
  const Hid d =
      h5.dataset(H5Dopen2(g.get(), "questions", H5P_DEFAULT), "open /runs/" + name + "/questions");
  const Hid ft = h5.type(H5Dget_type(d.get()), "read the questions type");
  if (H5Tget_class(ft.get()) != H5T_COMPOUND) h5.fail(where + "questions is not a table");
  for (const char* field : kRowFields) {
    if (H5Tget_member_index(ft.get(), field) < 0) {
      h5.fail(where + "questions has no field \"" + field + "\"");
    }
  }
  const Hid s = h5.space(H5Dget_space(d.get()), "read the questions dataspace");
  if (H5Sget_simple_extent_ndims(s.get()) != 1) h5.fail(where + "questions is not 1-dimensional");
  const hssize_t count = H5Sget_simple_extent_npoints(s.get());
  if (count < 0) h5.fail(where + "cannot count the questions");
  std::vector<Row> rows(static_cast<std::size_t>(count));
  if (rows.empty()) return run;
  const Hid mem = row_type(h5, false);
  h5.check(H5Dread(d.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()),
           "read the questions");
  run.results.reserve(rows.size());
  for (const Row& row : rows) {
    QuestionResult r;
    r.id = row.id;
    r.dp_group = row.dp_group;
    r.prompt_tokens = row.prompt_tokens;
    r.output_text = row.output_text != nullptr ? row.output_text : "";
    r.prediction = row.prediction != nullptr ? row.prediction : "";
    r.label = row.label != nullptr ? row.label : "";
    r.correct = row.correct != 0;
    r.invalid = row.invalid != 0;
    r.completion_tokens = row.completion_tokens;
    r.latency_s = row.latency_s;
    const auto* tokens = static_cast<const std::int32_t*>(row.token_ids.p);
    r.token_ids.assign(tokens, tokens + row.token_ids.len);
    run.results.push_back(std::move(r));
  }
  reclaim(mem.get(), s.get(), rows.data());
  return run;
}

// Opens an existing history and checks that it is one; returns the file and its /runs group.
std::pair<Hid, Hid> open_history(const H5& h5, const std::filesystem::path& path, unsigned flags) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) h5.fail("no such history file");
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 < 0) h5.fail("cannot read the file");
  if (is_hdf5 == 0) h5.fail("not an HDF5 file, so not a k3eval history");
  const Hid fapl = file_access(h5);
  Hid file(h5.check(H5Fopen(path.c_str(), flags, fapl.get()), "open the file"), H5Fclose);
  const std::string where = "not a k3eval history: ";
  if (H5Aexists(file.get(), "format") <= 0) h5.fail(where + "no \"format\" attribute on /");
  const std::string format = h5.read_string_attr(file.get(), where, "format");
  if (format != kFormat) {
    h5.fail(where + "its format attribute is \"" + format + "\", expected \"" + kFormat + "\"");
  }
  const auto version = h5.read_attr<std::uint64_t>(file.get(), where, "format_version",
                                                   H5T_NATIVE_UINT64, H5T_INTEGER);
  if (version != kFormatVersion) {
    h5.fail("history format_version " + std::to_string(version) + ", this k3eval reads " +
            std::to_string(kFormatVersion));
  }
  if (H5Lexists(file.get(), "runs", H5P_DEFAULT) <= 0) h5.fail(where + "no /runs group");
  Hid runs = h5.group(H5Gopen2(file.get(), "runs", H5P_DEFAULT), "open /runs");
  return {std::move(file), std::move(runs)};
}

std::size_t run_count(const H5& h5, hid_t runs) {
  H5G_info_t info{};
  h5.check(H5Gget_info(runs, &info), "count the runs");
  return static_cast<std::size_t>(info.nlinks);
}

}  // namespace

std::size_t append_history(const std::filesystem::path& path, const RunRecord& run) {
  const QuietHdf5 quiet;
  const H5 h5(path.string());
  const std::filesystem::path tmp = temporary_beside(path);
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  std::size_t n = 0;
  try {
    if (exists) {
      // Validate the original before copying it, so the error names the user's file.
      open_history(h5, path, H5F_ACC_RDONLY);
      if (!std::filesystem::copy_file(path, tmp, std::filesystem::copy_options::overwrite_existing,
                                      ec)) {
        h5.fail("cannot copy to " + tmp.string() + ": " + ec.message());
      }
      const H5 h5tmp(tmp.string());
      auto [file, runs] = open_history(h5tmp, tmp, H5F_ACC_RDWR);
      n = run_count(h5tmp, runs.get());
      write_run(h5tmp, runs.get(), n, run);
      runs.reset();
      h5tmp.check(H5Fclose(file.release()), "close the file");
    } else {
      const H5 h5tmp(tmp.string());
      const Hid fapl = file_access(h5tmp);
      Hid file(h5tmp.check(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()),
                           "create the file"),
               H5Fclose);
      h5tmp.write_string_attr(file.get(), "format", kFormat);
      h5tmp.write_attr(file.get(), "format_version", H5T_STD_U64LE, H5T_NATIVE_UINT64,
                       &kFormatVersion);
      Hid runs = h5tmp.group(H5Gcreate2(file.get(), "runs", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                             "create /runs");
      write_run(h5tmp, runs.get(), 0, run);
      runs.reset();
      h5tmp.check(H5Fclose(file.release()), "close the file");
    }
    commit_file(tmp, path);
  } catch (...) {
    std::filesystem::remove(tmp, ec);
    throw;
  }
  return n;
}

std::vector<RunRecord> read_history(const std::filesystem::path& path) {
  const QuietHdf5 quiet;
  const H5 h5(path.string());
  auto [file, runs] = open_history(h5, path, H5F_ACC_RDONLY);
  std::vector<RunRecord> out;
  const std::size_t count = run_count(h5, runs.get());
  out.reserve(count);
  for (std::size_t n = 0; n < count; ++n) out.push_back(read_run(h5, runs.get(), n));
  return out;
}

}  // namespace k3::eval
