// The experiment registry, RunContext (logs, metrics, checkpoints, progress, stop signal) and
// run_experiment, which owns the run directory's life cycle (experiment.hpp): validation before
// anything is created, fresh run, resume from checkpoint.safetensors, no-op on a complete run,
// refusal on a changed config, --force setting the old directory aside; and its dry run.
#include "experiments/runner/experiment.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "dist/distributed.hpp"
#include "experiments/runner/config_diff.hpp"
#include "experiments/runner/dir_lock.hpp"
#include "experiments/runner/program_name.hpp"
#include "experiments/runner/task.hpp"
#include "experiments/runner/stop_scope.hpp"
#include "experiments/runner/trainer.hpp"
#include "nn/lm_checkpoint.hpp"
#include "tensor/bf16_info.hpp"
#include "tensor/blas_info.hpp"
#include "tensor/matmul_route.hpp"
#include "tensor/option_string.hpp"
#include "tensor/parallel.hpp"
#include "experiments/runner/file_bounds.hpp"
#include "tensor/io.hpp"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace attnlab::runner {
namespace {

// "attnlab run: ", with the name of the program running (own run: ... in a project's own program).
std::string run_prefix() { return program_name() + " run: "; }

// The checkpoint's step is stored twice, in the metadata and as this tensor, and the Trainer
// stores it a third time ("trainer.step"); a checkpoint is used only when they agree.
constexpr const char* kStepTensor = "run.step";

template <class T>
T parse_field(const fs::path& ckpt, const Metadata& meta, const char* key) {
  auto it = meta.find(key);
  if (it == meta.end()) fail<FileError>("{}: checkpoint metadata has no '{}'", ckpt.string(), key);
  const std::string& s = it->second;
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  bool ok = ec == std::errc() && p == s.data() + s.size() && !s.empty() && s[0] != '-' && s[0] != '+';
  if constexpr (std::is_floating_point_v<T>) ok = ok && std::isfinite(v);
  if (!ok)
    fail<FileError>("{}: checkpoint metadata '{}' is \"{}\", not a {}", ckpt.string(), key, s,
                    std::is_floating_point_v<T> ? "finite number >= 0" : "non-negative integer");
  return v;
}

// Element 0 of the int64 tensor `key`, if the checkpoint has it.
std::optional<int64_t> step_tensor(const fs::path& ckpt, const TensorMap& tensors, const std::string& key) {
  auto it = tensors.find(key);
  if (it == tensors.end()) return std::nullopt;
  const Tensor& t = it->second;
  if (t.dtype() != kInt64 || t.numel() < 1)
    fail<FileError>("{}: checkpoint tensor '{}' should hold int64 steps, got {} of shape {}", ckpt.string(), key,
                    dtype_name(t.dtype()), to_string(t.shape()));
  return t.to_vector<int64_t>()[0];
}

struct CheckpointFile {
  int64_t step;
  double time, peak_rss_mb;
  uint64_t generator_seed, generator_offset;
  TensorMap tensors;  // without the run.step tensor
};

// Reads a run's checkpoint, with every metadata number parsed strictly and the step checked
// against the run.step and trainer.step tensors: a mismatch is a FileError naming them all.
CheckpointFile read_checkpoint_file(const fs::path& ckpt) {
  Metadata meta;
  CheckpointFile c;
  c.tensors = load_safetensors(ckpt.string(), &meta);
  c.step = checkpoint_step(ckpt, meta, c.tensors);
  c.time = parse_field<double>(ckpt, meta, "time");
  c.peak_rss_mb = parse_field<double>(ckpt, meta, "peak_rss_mb");
  c.generator_seed = parse_field<uint64_t>(ckpt, meta, "generator_seed");
  c.generator_offset = parse_field<uint64_t>(ckpt, meta, "generator_offset");
  c.tensors.erase(kStepTensor);
  return c;
}

}  // namespace

int64_t checkpoint_step(const fs::path& ckpt, const Metadata& meta, const TensorMap& tensors) {
  const int64_t step = parse_field<int64_t>(ckpt, meta, "step");
  for (const char* key : {kStepTensor, "trainer.step"})
    if (auto s = step_tensor(ckpt, tensors, key); s && *s != step)
      fail<FileError>("{}: the checkpoint's steps disagree: metadata 'step' = {}, tensor '{}' = {}; the file is "
                      "damaged or edited (delete it to restart the run)",
                      ckpt.string(), step, key, *s);
  return step;
}

namespace {

// ---- the registry ----

std::map<std::string, Experiment>& registry() {
  static std::map<std::string, Experiment> r;  // built on first use: safe during static init
  return r;
}

// Refused registrations: the messages in order, and the message of each refused name.
std::vector<std::string>& refused_messages() {
  static std::vector<std::string> m;
  return m;
}
std::map<std::string, std::string>& refused_names() {
  static std::map<std::string, std::string> m;
  return m;
}

bool refuse(const std::string& name, std::string message) {
  refused_names().emplace(name, message);
  refused_messages().push_back(std::move(message));
  return false;
}

// ---- signals ----

std::atomic<bool> g_signal{false};
std::atomic<int> g_signal_count{0};  // signals of this run so far (stop_point compares)
int g_stop_baseline = 0;             // StopPointScope: signals before the scope do not count

void on_signal(int) {
  g_signal.store(true);
  g_signal_count.fetch_add(1);
}

// ---- small helpers ----

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string utc_now_iso() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "unknown";
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

json git_state() {
  json j;
#ifdef ATTNLAB_SOURCE_DIR
  const std::string dir = ATTNLAB_SOURCE_DIR;
#else
  const std::string dir = ".";
#endif
  // Not a git checkout (an installed or exported tree): "unknown" commit, null dirty flag.
  auto head = command_output("git -C '" + dir + "' rev-parse HEAD 2>/dev/null");
  auto status = head ? command_output("git -C '" + dir + "' status --porcelain 2>/dev/null") : std::nullopt;
  j["git_commit"] = head ? *head : "unknown";
  j["git_dirty"] = status ? json(!status->empty()) : json(nullptr);
  return j;
}

std::string format_duration(double s) {
  if (!(s >= 0) || s > 1e8) return "?";
  int64_t t = int64_t(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

}  // namespace

std::optional<std::string> command_output(const std::string& cmd) {
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return std::nullopt;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  if (pclose(f) != 0) return std::nullopt;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

double peak_rss_mb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    // "VmHWM:    123456 kB"
    std::string_view kb = std::string_view(line).substr(6);
    kb.remove_prefix(std::min(kb.find_first_not_of(" \t"), kb.size()));
    const std::optional<int64_t> v = parse_integer(kb.substr(0, kb.find(' ')));
    return v ? double(*v) / 1024.0 : 0;
  }
  return 0;
}

// ---- registry ----

bool register_experiment(Experiment e) {
  if (e.name.empty() || !e.run)
    return refuse(e.name, fmt::format("register_experiment: experiment '{}' needs a name and a run function", e.name));
  if (registry().count(e.name))
    return refuse(e.name, fmt::format("register_experiment: experiment '{}' is registered twice (the first "
                                      "registration is kept)", e.name));
  if (!e.schema.error().empty())
    return refuse(e.name, fmt::format("register_experiment: experiment '{}': {}", e.name, e.schema.error()));
  if (const Field* f = e.schema.find("seed")) {
    if (f->type != FieldType::Int)
      return refuse(e.name, fmt::format("register_experiment: experiment '{}' declares seed as {}, expected int",
                                        e.name, type_name(f->type)));
  } else {
    // `seed` goes first, so config.toml opens with it.
    Schema s;
    s.add("seed", int64_t(0), "random seed: model initialisation, dropout, batch order");
    for (const Field& f : e.schema.fields()) {
      std::visit([&](const auto& v) { s.add(f.key, v, f.help); }, f.value);
      if (f.bounded()) s.bound(f.key, f.min, f.max);
    }
    e.schema = std::move(s);
  }
  std::string name = e.name;
  registry().emplace(name, std::move(e));
  return true;
}

const std::vector<std::string>& registration_errors() { return refused_messages(); }

void clear_registration_errors() {
  refused_messages().clear();
  refused_names().clear();
}

std::vector<const Experiment*> experiments() {
  std::vector<const Experiment*> out;
  for (const auto& [name, e] : registry()) out.push_back(&e);
  return out;
}

const Experiment& find_experiment(const std::string& name) {
  auto it = registry().find(name);
  if (it != registry().end()) return it->second;
  if (auto r = refused_names().find(name); r != refused_names().end())
    fail<ValueError>("experiment '{}' was not registered: {}", name, r->second);
  std::string known;
  for (const auto& [n, e] : registry()) known += (known.empty() ? "" : ", ") + n;
  fail<ValueError>("unknown experiment '{}' (known: {})", name, known.empty() ? "none" : known);
}

Config resolve_config(const Experiment& e, const std::string& preset, const std::string& config_file,
                      const std::vector<std::string>& sets) {
  Config c(e.schema);
  if (!preset.empty()) {
    auto it = e.presets.find(preset);
    if (it == e.presets.end()) {
      std::string known;
      for (const auto& [n, text] : e.presets) known += (known.empty() ? "" : ", ") + n;
      fail<ConfigError>("experiment '{}' has no preset '{}' (presets: {})", e.name, preset,
                        known.empty() ? "none" : known);
    }
    c.merge_toml(it->second, "preset " + preset);
  }
  if (!config_file.empty()) c.merge_file(config_file);
  for (const auto& s : sets) c.set(s);
  return c;
}

// A resumed run's checkpoint against the config's model.layers, from the header alone, before the
// experiment builds its model: a checkpoint holding another number of blocks is refused at once.
// (Any other misfit is the strict load's error once the model exists.)
namespace {
void check_checkpoint_blocks(const Config& config, const fs::path& ckpt) {
  if (!config.schema().find("model.layers")) return;
  const std::map<std::string, Dims> shapes = safetensors_shapes(ckpt.string());
  const bool has_blocks = std::any_of(shapes.begin(), shapes.end(),
                                      [](const auto& e) { return e.first.rfind("model.blocks.", 0) == 0; });
  if (!has_blocks) return;
  nn::check_block_count(shapes, config.get_int("model.layers"), ckpt.string(),
                        {.source = "the run's config", .layers = "model.layers", .prefix = "model."});
}
}  // namespace

// ---- RunContext ----

RunContext::RunContext(Config config, fs::path dir, Options options)
    : config_(std::move(config)), dir_(std::move(dir)), options_(options), generator_(0),
      writer_(dist::is_root() && !options.dry_run) {
  generator_ = Generator(uint64_t(config_.get_int("seed")));
  start_ = now_seconds();
  if (!dist::is_root()) return;  // the Trainer brings rank 0's state
  if (options_.dry_run && !options_.dry_run_resumes) return;
  if (writer_) fs::create_directories(dir_);
  int64_t keep_up_to = -1;  // metrics lines to keep: steps <= this
  const fs::path ckpt = dir_ / "checkpoint.safetensors";
  if (fs::exists(ckpt)) {
    check_checkpoint_blocks(config_, ckpt);
    CheckpointFile c = read_checkpoint_file(ckpt);
    time_offset_ = c.time;
    peak_rss_offset_ = c.peak_rss_mb;
    generator_.set_state(c.generator_seed, c.generator_offset);
    checkpoint_.emplace(c.step, std::move(c.tensors));
    last_step_ = keep_up_to = c.step;  // proven: metadata and state tensors agree
  }
  // Lines past the checkpoint (or every line, for a run that never saved one) belong to steps
  // that will be replayed: drop them so no step is recorded twice.
  const fs::path metrics_path = dir_ / "metrics.jsonl";
  if (writer_ && fs::exists(metrics_path)) {
    const std::string text = read_text(metrics_path.string(), kMetricsFileBound);
    std::istringstream in(text);
    std::string line, kept;
    for (int64_t number = 1; std::getline(in, line); ++number) {
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) {
        // A torn last line is what a killed process leaves; any other such line was edited in.
        const bool torn = in.eof() && !text.ends_with('\n');
        emit(fmt::format("{}: line {} is {} and is dropped: {}", metrics_path.string(), number,
                         torn ? "a torn last line (the process stopped while writing it)" : "not a metrics line",
                         line.size() > 80 ? line.substr(0, 77) + "..." : line));
        continue;
      }
      if (j["step"].get<int64_t>() <= keep_up_to) kept += line + "\n";
    }
    write_text_atomic(metrics_path.string(), kept);
  }
}

RunContext::~RunContext() = default;

const Config& RunContext::config() const { return config_; }
const fs::path& RunContext::dir() const { return dir_; }
Generator& RunContext::generator() { return generator_; }

double RunContext::seconds() const { return time_offset_ + (now_seconds() - start_); }

void RunContext::emit(const std::string& line) {
  if (writer_) {
    std::ofstream log(dir_ / "log.txt", std::ios::app);
    log << line << '\n';
  }
  if (!options_.console) return;
  std::ostream& out = *options_.console;
  if (options_.tty && !progress_line_.empty()) {
    out << "\r\033[K" << line << '\n' << progress_line_ << std::flush;
  } else {
    out << line << '\n' << std::flush;
  }
}

void RunContext::log(const std::string& line) { emit(line); }

void RunContext::metrics(int64_t step, const std::map<std::string, double>& values) {
  json j;
  j["step"] = step;
  j["time"] = std::round(seconds() * 1000) / 1000;
  for (const auto& [k, v] : values) {
    if (k == "step" || k == "time") fail<ValueError>("RunContext::metrics: '{}' is a reserved metric name", k);
    j[k] = v;  // NaN and infinities are written as null
  }
  last_step_ = std::max(last_step_, step);
  if (!writer_) return;
  std::ofstream out(dir_ / "metrics.jsonl", std::ios::app);
  out << j.dump() << '\n';
  out.flush();
  if (!out) fail<FileError>("{}: cannot append", (dir_ / "metrics.jsonl").string());
}

void RunContext::summary(const std::string& name, double value) { summary_[name] = value; }

void RunContext::progress(int64_t step, int64_t total, double loss) {
  last_step_ = std::max(last_step_, step);
  const double now = now_seconds();
  if (progress_first_step_ < 0) {
    progress_first_step_ = step;
    progress_first_time_ = now;
  }
  const double elapsed = now - progress_first_time_;
  const double rate = elapsed > 0 ? double(step - progress_first_step_) / elapsed : 0;
  const std::string eta = rate > 0 ? format_duration(double(total - step) / rate) : "?";
  std::string text = fmt::format("step {}/{}  loss {:.4f}  {:.2f} steps/s  ETA {}", step, total, loss, rate, eta);
  if (options_.tty && options_.console) {
    progress_line_ = text;
    *options_.console << "\r\033[K" << text << (step >= total ? "\n" : "") << std::flush;
    if (step >= total) progress_line_.clear();
    return;
  }
  if (step >= total || now - last_progress_ >= options_.progress_interval) {
    last_progress_ = now;
    emit(text);
  }
}

void RunContext::save_checkpoint(int64_t step, const TensorMap& state) {
  for (const auto& [name, t] : state)
    if (!t.defined()) fail<ValueError>("RunContext::save_checkpoint: tensor '{}' is undefined", name);
  if (step < 0) fail<ValueError>("RunContext::save_checkpoint: step {} is negative", step);
  last_step_ = std::max(last_step_, step);
  if (!writer_) return;
  TensorMap saved = state;
  saved[kStepTensor] = from_vector(std::vector<int64_t>{step}, {1});
  Metadata meta{{"step", std::to_string(step)},
                {"time", fmt::format("{}", seconds())},
                {"peak_rss_mb", fmt::format("{}", std::max(peak_rss_offset_, peak_rss_mb()))},
                {"generator_seed", std::to_string(generator_.seed())},
                {"generator_offset", std::to_string(generator_.offset())}};
  save_safetensors((dir_ / "checkpoint.safetensors").string(), saved, meta);  // temp file + rename
}

std::optional<std::pair<int64_t, TensorMap>> RunContext::load_checkpoint() const {
  if (checkpoint_ || !writer_) return checkpoint_;
  const fs::path ckpt = dir_ / "checkpoint.safetensors";
  if (!fs::exists(ckpt)) return std::nullopt;
  CheckpointFile c = read_checkpoint_file(ckpt);
  return std::make_pair(c.step, std::move(c.tensors));
}

bool RunContext::should_stop() const { return stop_requested_ || g_signal.load(); }

void stop_point() {
  if (g_signal_count.load() > g_stop_baseline && dist::world_size() == 1) throw RunStopped();
}

StopPointScope::StopPointScope() : saved_(g_stop_baseline) { g_stop_baseline = g_signal_count.load(); }
StopPointScope::~StopPointScope() { g_stop_baseline = saved_; }
void RunContext::request_stop() { stop_requested_ = true; }

const TaskData& RunContext::data() {
  if (!data_) {
    if (!config_.schema().find("task.name"))
      fail<ConfigError>("RunContext::data: the experiment's schema has no task.name (add_task_keys in task.hpp)");
    data_ = std::make_unique<TaskData>(make_task(config_));
  }
  return *data_;
}

fs::path RunContext::artifact_path(const std::string& name) const {
  if (options_.dry_run) fail<ValueError>("RunContext::artifact_path('{}'): a dry run writes no artifact", name);
  // Ranks other than 0 write their copies into a scratch folder of their own.
  const fs::path root = writer_ ? dir_ : fs::temp_directory_path() / fmt::format("attnlab-rank{}-{}", dist::rank(), getpid());
  fs::path p = root / "artifacts" / name;
  fs::create_directories(p.parent_path());
  return p;
}

void RunContext::write_summary(const std::string& experiment) {
  if (!writer_) return;
  json j;
  j["experiment"] = experiment;
  j["status"] = "complete";
  j["steps"] = std::max<int64_t>(last_step_, 0);
  j["seconds"] = std::round(seconds() * 1000) / 1000;
  j["peak_rss_mb"] = std::round(std::max(peak_rss_offset_, peak_rss_mb()) * 10) / 10;
  json m = json::object();
  for (const auto& [k, v] : summary_) m[k] = v;
  j["metrics"] = m;
  write_text_atomic((dir_ / "summary.json").string(), j.dump(2) + "\n");
}

std::string failure_message(const fs::path& run_dir) {
  const fs::path p = run_dir / "failure.json";
  if (!fs::exists(p)) return "";
  json j = json::parse(read_text(p.string(), kRecordFileBound), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("error") || !j["error"].is_string()) return "";
  return j["error"].get<std::string>();
}

MetaSession append_meta_session(const std::string& text, const std::string& path, const std::string& now, int threads,
                                int world_size) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail<FileError>("{}: not a JSON object", path);
  for (const char* key : {"resumed_at", "segments"})
    if (j.contains(key) && !j[key].is_array())
      fail<FileError>("{}: \"{}\" must be a list, got a JSON {}", path, key, j[key].type_name());
  // Files written before segments were recorded: the first segment is `threads`.
  if (!j.contains("segments") && j.contains("start_time") && j.contains("threads"))
    j["segments"] = json::array({{{"start", j["start_time"]}, {"threads", j["threads"]}}});
  MetaSession out;
  const json& segs = j["segments"];
  if (!segs.empty() && segs.back().is_object() && segs.back().contains("threads") &&
      segs.back()["threads"].is_number_integer() && segs.back()["threads"].get<int64_t>() != threads)
    out.warning = fmt::format("warning: resuming with {} threads, the run's previous process had {}; the results will differ "
                              "in the last bits from an uninterrupted run (set ATTNLAB_NUM_THREADS={} to match)",
                              threads, segs.back()["threads"].get<int64_t>(), segs.back()["threads"].get<int64_t>());
  // Sessions before world sizes were recorded ran one process.
  const json* last = !segs.empty() && segs.back().is_object() ? &segs.back() : nullptr;
  const int64_t last_world =
      last && last->contains("world_size") && (*last)["world_size"].is_number_integer() ? (*last)["world_size"].get<int64_t>() : 1;
  if (last_world != world_size) {
    if (!out.warning.empty()) out.warning.append("\n").append(run_prefix());  // a second warning line
    out.warning += fmt::format("warning: resuming with {} ranks, the run's previous process had {}; the micro-batches change, "
                               "so the results differ in the last bits from an uninterrupted run",
                               world_size, last_world);
  }
  j["resumed_at"].push_back(now);
  j["segments"].push_back({{"start", now}, {"threads", threads}, {"world_size", world_size}});
  out.text = j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  return out;
}

// ---- run_experiment ----

namespace {

// meta.json: written by the run's first process; later processes keep it and append their
// start time.
// Writes meta.json, or appends this process's segment to it; returns a warning when its thread
// count or number of ranks differs from the previous segment's and the run resumes from a
// checkpoint (it then differs in the last bits from an uninterrupted run).
std::string write_meta(const fs::path& dir, const RunRequest& r, const Config& config) {
  const fs::path path = dir / "meta.json";
  const std::string now = utc_now_iso();
  std::string warning;
  json j;
  if (fs::exists(path)) {
    MetaSession m = append_meta_session(read_text(path.string(), kRecordFileBound), path.string(), now, num_threads(), dist::world_size());
    write_text_atomic(path.string(), m.text);
    // Without a checkpoint (the previous process stopped before its first one) the run starts
    // again from step 1: nothing of the previous process's arithmetic carries over, so another
    // thread count or number of ranks makes no difference worth a warning.
    if (!fs::exists(dir / "checkpoint.safetensors")) return "";
    return m.warning;
  } else {
    j["experiment"] = r.experiment;
    j["preset"] = r.preset;
    j["command"] = r.command_line;
    json g = git_state();
    j["git_commit"] = g["git_commit"];
    j["git_dirty"] = g["git_dirty"];
    j["hostname"] = host_name();
    j["cpu_model"] = cpu_model();
    j["blas"] = blas_description();
    j["matmul"] = matmul_route_description();
    j["bf16"] = {{"onednn", onednn_description()}, {"cpu", cpu_bf16_summary()}, {"native", cpu_has_native_bf16()}};
    if (config.schema().find("train.precision")) {
      const Precision p = resolve_precision(config);
      j["precision"] = {{"requested", p.requested}, {"used", p.bf16 ? "bf16" : "float32"}, {"reason", p.reason}};
    }
    j["threads"] = num_threads();
    j["world_size"] = dist::world_size();
#ifdef ATTNLAB_VERSION
    j["attnlab_version"] = ATTNLAB_VERSION;
#else
    j["attnlab_version"] = "unknown";
#endif
    j["start_time"] = now;
    j["resumed_at"] = json::array();
    j["segments"] = json::array({{{"start", now}, {"threads", num_threads()}, {"world_size", dist::world_size()}}});
  }
  // The command line may hold bytes that are not UTF-8 (an argument of another encoding): JSON
  // text cannot, so they are written as U+FFFD rather than failing the run.
  write_text_atomic(path.string(), j.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
  return warning;
}

struct SignalGuard {
  struct sigaction old_int{}, old_term{};
  SignalGuard() {
    g_signal.store(false);
    g_signal_count.store(0);
    g_stop_baseline = 0;
    struct sigaction sa{};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    // A repeated SIGTERM is the same request: a scheduler signals every process of a job and the
    // sweep forwards its own, so a run under Slurm gets it twice at once (docs/experiments.md).
    sigaction(SIGTERM, &sa, &old_term);
    sa.sa_flags = SA_RESETHAND;  // a second Ctrl-C takes the default action: stops at once
    sigaction(SIGINT, &sa, &old_int);
  }
  ~SignalGuard() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    g_signal.store(false);
  }
};

// A directory `attnlab sweep` prepared for a run holds only its point.json and the run's
// stdout.txt (docs/sweeps.md); anything else means it belongs to something else.
bool only_sweep_files(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name != "point.json" && name != "stdout.txt" && name != DirLock::kFileName) return false;
  }
  return true;
}

// A run whose experiment threw: the message goes to the log (or the console) and to
// failure.json (atomically; summary.json stays unwritten). Returns kExitFailed.
int record_failure(const Experiment& e, const fs::path& dir, RunContext* ctx, const std::string& what,
                   std::ostream& console) {
  const std::string msg = fmt::format("{} failed: {}", e.name, what);
  if (!dist::is_root()) {  // rank 0 keeps the run directory's record
    console << fmt::format("{} run (rank {}): {}\n", program_name(), dist::rank(), msg) << std::flush;
    return kExitFailed;
  }
  if (ctx)
    ctx->log(run_prefix() + msg);
  else
    console << run_prefix() << msg << "\n";
  try {
    json j;
    j["experiment"] = e.name;
    j["status"] = "failed";
    j["error"] = what;
    j["step"] = ctx ? ctx->last_step() : int64_t(-1);
    j["seconds"] = ctx ? std::round(ctx->seconds() * 1000) / 1000 : 0.0;
    write_text_atomic((dir / "failure.json").string(), j.dump(2) + "\n");
  } catch (const std::exception& ex) {
    console << run_prefix() << "cannot record the failure in " << (dir / "failure.json").string() << ": " << ex.what()
            << "\n";
  }
  return kExitFailed;
}

// What a run directory holds, measured against a resolved config (experiment.hpp).
struct DirState {
  enum Kind { kFresh, kResume, kComplete, kOtherConfig, kNotARun } kind = kFresh;
  std::string detail;  // kOtherConfig: the differing keys (or why config.toml does not fit)
};

DirState examine_run_dir(const fs::path& dir, const Experiment& e, const Config& config) {
  if (!fs::exists(dir) || (fs::is_directory(dir) && only_sweep_files(dir))) return {DirState::kFresh, ""};
  if (!fs::exists(dir / "config.toml")) return {DirState::kNotARun, ""};
  const bool complete = fs::exists(dir / "summary.json");
  Config old(e.schema);
  try {
    old.merge_file((dir / "config.toml").string());
  } catch (const ConfigError& ex) {
    return {DirState::kOtherConfig, ex.what()};
  }
  std::string diff = config_differences(old, config, "run directory", "now");
  if (!diff.empty()) return {DirState::kOtherConfig, diff};
  return {complete ? DirState::kComplete : DirState::kResume, ""};
}

// The message of a directory that refuses the run (kOtherConfig, kNotARun).
std::string refusal(const fs::path& dir, const DirState& state) {
  if (state.kind == DirState::kNotARun)
    return fmt::format("{} exists and is not a run directory (no config.toml); use another --run-dir", dir.string());
  const char* what = fs::exists(dir / "summary.json") ? "a complete" : "an unfinished";
  return fmt::format("{} holds {} run of another config: {}; use --force to start afresh (the old directory is "
                     "kept as {}.old-N), another --run-dir, or the same config",
                     dir.string(), what, state.detail, dir.string());
}

// DIR without a trailing separator, so that DIR.old-N is a sibling.
fs::path without_trailing_slash(const fs::path& dir) {
  fs::path d = dir.lexically_normal();
  return d.has_filename() || !d.has_parent_path() ? d : d.parent_path();
}

// The first DIR.old-N (N = 1, 2, ...) that does not exist.
fs::path set_aside_name(const fs::path& dir) {
  const fs::path d = without_trailing_slash(dir);
  for (int n = 1;; ++n) {
    fs::path p = d;
    p += fmt::format(".old-{}", n);
    if (!fs::exists(p)) return p;
  }
}

// Resolves the request's config and runs the experiment's check, after ATTNLAB_MATMUL's route;
// nullopt (after a message) on an error. Nothing is written before it.
std::optional<Config> validated_config(const RunRequest& r, const Experiment*& e, std::ostream& console) {
  try {
    (void)matmul_route();  // a bad ATTNLAB_MATMUL is a ValueError naming the variable
    e = &find_experiment(r.experiment);
    Config config = resolve_config(*e, r.preset, r.config_file, r.sets);
    check_config(*e, config, dist::world_size());
    check_run_dir_path(r.run_dir);
    return config;
  } catch (const Error& ex) {
    console << run_prefix() << ex.what() << "\n";
    return std::nullopt;
  }
}

}  // namespace

void check_config(const Experiment& e, const Config& config, int world_size) {
  if (e.check) e.check(config);
  if (config.schema().find("train.accumulate") && config.schema().find("train.batch_size"))
    check_batch_split(config, world_size);
}

void check_run_dir_path(const fs::path& dir) {
  const std::string text = dir.string();
  if (text.empty()) fail<ConfigError>("--run-dir: the path is empty; give a directory (or leave --run-dir out)");
  if (!is_utf8(text))
    fail<ConfigError>("--run-dir: '{}' is not valid UTF-8; a run directory's path is recorded in meta.json (JSON text), "
                      "so it must be UTF-8",
                      printable(text));
  // The nearest existing ancestor decides whether create_directories can succeed.
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  while (!p.empty() && !fs::exists(p, ec)) {
    if (p == p.parent_path()) break;
    p = p.parent_path();
  }
  if (!fs::exists(p, ec)) return;
  if (!fs::is_directory(p, ec))
    fail<ConfigError>("--run-dir: '{}' cannot be created: '{}' exists and is not a directory", text, p.string());
  if (p != fs::absolute(dir, ec) && access(p.c_str(), W_OK | X_OK) != 0)
    fail<ConfigError>("--run-dir: '{}' cannot be created: the directory '{}' is not writable ({})", text, p.string(),
                      std::strerror(errno));
}

int dry_run_experiment(const RunRequest& r, std::ostream& out, std::ostream& console) {
  const Experiment* e = nullptr;
  std::optional<Config> config = validated_config(r, e, console);
  if (!config) return kExitUsage;
  out << config->to_toml();
  const fs::path& dir = r.run_dir;
  DirState state;
  try {
    state = examine_run_dir(dir, *e, *config);
  } catch (const std::exception& ex) {
    console << run_prefix() << ex.what() << "\n";
    return kExitUsage;
  }
  const bool aside = r.force && state.kind != DirState::kFresh && state.kind != DirState::kNotARun;
  std::string plan;
  if (aside)
    plan = fmt::format("would move {} to {} and start afresh", dir.string(), set_aside_name(dir).string());
  else if (state.kind == DirState::kFresh)
    plan = fmt::format("would start a fresh run in {}", dir.string());
  else if (state.kind == DirState::kResume)
    plan = fmt::format("would resume the unfinished run in {}", dir.string());
  else if (state.kind == DirState::kComplete)
    plan = fmt::format("{} holds this complete run: nothing to do", dir.string());
  if (plan.empty()) {
    console << run_prefix() << "config valid, but " << refusal(dir, state) << "\n";
    return kExitUsage;
  }
  if (state.kind != DirState::kComplete || aside) {
    // The run itself up to its first step, writing nothing: its checks are the dry run's.
    try {
      RunContext ctx(*config, dir,
                     {.console = nullptr, .dry_run = true, .dry_run_resumes = state.kind == DirState::kResume && !aside});
      manual_seed(uint64_t(config->get_int("seed")));
      e->run(*config, ctx);
    } catch (const RunStopped&) {
    } catch (const std::exception& ex) {
      console << run_prefix() << "config valid, but the run would fail before its first step: " << e->name
              << " failed: " << ex.what() << "\n";
      return kExitUsage;
    }
  }
  console << run_prefix() << "config valid (dry run: nothing created); " << plan << "\n";
  return kExitComplete;
}

namespace {

constexpr int kProceed = -1;

// Locks and prepares the run directory as experiment.hpp describes: kProceed when the run goes
// ahead (config.toml and meta.json written), otherwise the exit status, after a message.
int prepare_run_dir(const RunRequest& r, const Config& config, const Experiment& e, std::unique_ptr<DirLock>& lock,
                    std::ostream& console) {
  const fs::path& dir = r.run_dir;
  try {
    check_run_dir_path(dir);
    // Locked before anything is read, so a second process never sees a half-written run. A
    // directory that is not a run directory is left untouched (and refused below).
    if (!fs::exists(dir) || fs::exists(dir / "config.toml") || only_sweep_files(dir)) {
      fs::create_directories(dir);
      lock = std::make_unique<DirLock>(dir, r.wait);
    }
    DirState state = examine_run_dir(dir, e, config);
    if (state.kind == DirState::kNotARun || (state.kind == DirState::kOtherConfig && !r.force)) {
      console << run_prefix() << refusal(dir, state) << "\n";
      return kExitUsage;
    }
    if (r.force && state.kind != DirState::kFresh) {
      const fs::path aside = set_aside_name(dir);
      fs::rename(without_trailing_slash(dir), aside);  // the lock's file goes with it, still held
      console << run_prefix() << "--force: moved " << dir.string() << " to " << aside.string() << "\n";
      fs::create_directories(dir);
      lock = std::make_unique<DirLock>(dir, r.wait);  // the new directory's, then the old one's released
    } else if (state.kind == DirState::kComplete) {
      console << run_prefix() << dir.string()
              << " holds this complete run (summary.json, same config); nothing to do (--force starts it afresh)\n";
      return kExitComplete;
    }
    fs::create_directories(dir);
    fs::remove(dir / "failure.json");  // the record of a failed attempt; this process runs the run again
    write_text_atomic((dir / "config.toml").string(), config.to_toml());
    if (const std::string warning = write_meta(dir, r, config); !warning.empty()) console << run_prefix() << warning << "\n";
  } catch (const Error& ex) {
    console << run_prefix() << ex.what() << "\n";
    return kExitFailed;
  } catch (const fs::filesystem_error& ex) {
    console << run_prefix() << ex.what() << "\n";
    return kExitFailed;
  }
  return kProceed;
}

// A failed rank of a job of several ends them all, since the others would wait for it in their
// next collective. A rank other than 0 gives rank 0 two seconds to record its own failure first.
int end_job_if_distributed(int status) {
  if (dist::world_size() == 1) return status;
  if (!dist::is_root()) std::this_thread::sleep_for(std::chrono::seconds(2));
  dist::abort(status);
}

}  // namespace

int run_experiment(const RunRequest& r, std::ostream& console_in, bool tty) {
  // Under mpirun every rank validates the config and runs the experiment; rank 0 alone prepares
  // the run directory, writes in it and speaks (docs/distributed.md).
  std::ostream quiet(nullptr);
  std::ostream& console = dist::is_root() ? console_in : quiet;
  const Experiment* e = nullptr;
  std::optional<Config> config = validated_config(r, e, console);
  std::vector<double> invalid{config ? 0.0 : 1.0};
  dist::all_reduce_sum(invalid);
  if (invalid[0] > 0) return kExitUsage;
  const fs::path& dir = r.run_dir;
  std::unique_ptr<DirLock> lock;  // held until the run returns
  const int prepared = int(dist::broadcast(dist::is_root() ? prepare_run_dir(r, *config, *e, lock, console) : kProceed));
  if (prepared != kProceed) return prepared;

  SignalGuard signals;
  std::unique_ptr<RunContext> ctx;
  try {
    ctx = std::make_unique<RunContext>(*config, dir,
                                       RunContext::Options{dist::is_root() ? &console : nullptr, tty && dist::is_root()});
    manual_seed(uint64_t(config->get_int("seed")));  // modules initialise from the default generator
    if (auto ck = ctx->last_step(); ck >= 0)
      ctx->logf("{}: resuming {} from step {}", dir.string(), e->name, ck);
    else
      ctx->logf("{}: running {}{} ({} threads{})", dir.string(), e->name,
                r.preset.empty() ? "" : " --preset " + r.preset, num_threads(),
                dist::world_size() > 1 ? fmt::format(" on each of {} ranks", dist::world_size()) : "");
    if (const std::string hint = blas_kernel_hint(); !hint.empty()) ctx->log(hint);
    ctx->logf("matmul: {}", matmul_route_description());
    try {
      e->run(*config, *ctx);
    } catch (const RunStopped&) {
      // A signal during an evaluation after the last step: the final checkpoint is saved.
      ctx->request_stop();
    }
    if (ctx->should_stop()) {
      ctx->logf("stopped at step {}: checkpoint saved; run the same command again to continue", ctx->last_step());
      return kExitStopped;
    }
    ctx->write_summary(e->name);
    std::string line = "done:";
    for (const auto& [k, v] : ctx->summaries()) line += fmt::format(" {}={:.6g}", k, v);
    ctx->log(line);
    return kExitComplete;
  } catch (const std::exception& ex) {
    return end_job_if_distributed(record_failure(*e, dir, ctx.get(), ex.what(), console_in));
  } catch (...) {
    return end_job_if_distributed(
        record_failure(*e, dir, ctx.get(), "an exception that is not a std::exception", console_in));
  }
}

}  // namespace attnlab::runner
