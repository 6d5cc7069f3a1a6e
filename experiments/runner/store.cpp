// The SQLite results store of a sweep (experiments/runner/store.hpp), and the reader of complete
// run directories that feeds it.
#include "experiments/runner/store.hpp"

#include <sqlite3.h>

#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "experiments/runner/csv.hpp"
#include "tensor/error.hpp"
#include "tensor/io.hpp"
#include "experiments/runner/file_bounds.hpp"

namespace attnlab::runner {
namespace fs = std::filesystem;
using nlohmann::json;
namespace {

// A file a complete run directory must hold.
std::string read_run_file(const fs::path& p, int64_t max_bytes) {
  if (!fs::exists(p)) fail<FileError>("{}: cannot read (the run directory is incomplete)", p.string());
  return read_text(p.string(), max_bytes);
}

json parse_json(const std::string& text, const fs::path& p) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail<FileError>("{}: not valid JSON: {}", p.string(), e.what());
  }
}

// config.toml's leaves as {"model.attention": "mha", ...} in file order.
void flatten_toml(const toml::table& t, const std::string& prefix, std::vector<std::pair<int, std::pair<std::string, json>>>& out) {
  for (auto&& [k, v] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    const int line = static_cast<int>(v.source().begin.line);
    if (auto sub = v.as_table()) flatten_toml(*sub, key, out);
    else if (auto i = v.as_integer()) out.push_back({line, {key, i->get()}});
    else if (auto f = v.as_floating_point()) out.push_back({line, {key, f->get()}});
    else if (auto b = v.as_boolean()) out.push_back({line, {key, b->get()}});
    else if (auto s = v.as_string()) out.push_back({line, {key, s->get()}});
  }
}

std::string config_json(const fs::path& p) {
  toml::table t;
  try {
    t = toml::parse(read_run_file(p, kConfigFileBound), p.string());
  } catch (const toml::parse_error& e) {
    fail<FileError>("{}:{}: {}", p.string(), e.source().begin.line, e.description());
  }
  std::vector<std::pair<int, std::pair<std::string, json>>> leaves;
  flatten_toml(t, "", leaves);
  std::stable_sort(leaves.begin(), leaves.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (auto& [line, kv] : leaves) j[kv.first] = kv.second;
  return j.dump();
}

std::string iso_utc(fs::file_time_type t) {
  const auto sys = std::chrono::file_clock::to_sys(t);
  const std::time_t tt = std::chrono::system_clock::to_time_t(sys);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& sql, const fs::path& path) : db_(db), path_(path) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s_, nullptr) != SQLITE_OK)
      fail<FileError>("{}: SQLite cannot prepare '{}': {}", path.string(), sql, sqlite3_errmsg(db));
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt& bind(int i, int64_t v) { return check(sqlite3_bind_int64(s_, i, v)); }
  Stmt& bind(int i, double v) { return check(sqlite3_bind_double(s_, i, v)); }
  Stmt& bind(int i, const std::string& v) { return check(sqlite3_bind_text(s_, i, v.c_str(), int(v.size()), SQLITE_TRANSIENT)); }
  // Runs a statement that returns no rows, ready to be bound again.
  void run() {
    if (const int rc = sqlite3_step(s_); rc != SQLITE_DONE)
      fail<FileError>("{}: SQLite write failed: {}", path_.string(), sqlite3_errmsg(db_));
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  bool row() {
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) fail<FileError>("{}: SQLite read failed: {}", path_.string(), sqlite3_errmsg(db_));
    return false;
  }
  int64_t integer(int c) { return sqlite3_column_int64(s_, c); }
  double real(int c) { return sqlite3_column_double(s_, c); }
  std::string text(int c) {
    const auto* t = sqlite3_column_text(s_, c);
    return t ? reinterpret_cast<const char*>(t) : "";
  }

 private:
  Stmt& check(int rc) {
    if (rc != SQLITE_OK) fail<FileError>("{}: SQLite bind failed: {}", path_.string(), sqlite3_errmsg(db_));
    return *this;
  }
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  fs::path path_;
};

}  // namespace

std::string run_start_time(const fs::path& dir) {
  const fs::path p = dir / "meta.json";
  if (!fs::is_regular_file(p)) return "";
  const json meta = json::parse(read_text(p.string(), kRecordFileBound), nullptr, false);
  return meta.is_object() && meta.contains("start_time") && meta["start_time"].is_string()
             ? meta["start_time"].get<std::string>()
             : "";
}

RunRecord read_run_dir(int64_t id, const fs::path& dir) {
  RunRecord r;
  r.id = id;
  const fs::path summary_path = dir / "summary.json";
  const json summary = parse_json(read_run_file(summary_path, kRecordFileBound), summary_path);
  try {
    r.status = summary.at("status").get<std::string>();
    r.steps = summary.value("steps", int64_t(0));
    r.seconds = summary.value("seconds", 0.0);
    for (auto& [name, v] : summary.at("metrics").items())
      if (v.is_number()) r.metrics[name] = v.get<double>();
    // Cost figures for the tables and the bubble chart, unless the experiment named its own so.
    if (summary.contains("peak_rss_mb")) r.metrics.emplace("peak_rss_mb", summary["peak_rss_mb"].get<double>());
    r.metrics.emplace("seconds", r.seconds);
    if (r.seconds > 0) r.metrics.emplace("steps_per_s", double(r.steps) / r.seconds);
  } catch (const json::exception& e) {
    fail<FileError>("{}: not a run summary: {}", summary_path.string(), e.what());
  }
  r.finished_at = iso_utc(fs::last_write_time(summary_path));
  const fs::path point_path = dir / "point.json";  // a sweep's runs only: ad-hoc runs have no axes
  r.point_json = fs::exists(point_path) ? parse_json(read_run_file(point_path, kRecordFileBound), point_path).dump() : "{}";
  r.config_json = config_json(dir / "config.toml");
  const fs::path curves_path = dir / "metrics.jsonl";
  if (fs::exists(curves_path)) {
    std::istringstream lines(read_run_file(curves_path, kMetricsFileBound));
    std::string line;
    int n = 0;
    while (std::getline(lines, line)) {
      ++n;
      if (line.empty()) continue;
      const json j = parse_json(line, curves_path.string() + ":" + std::to_string(n));
      if (!j.contains("step") || !j["step"].is_number_integer())
        fail<FileError>("{}:{}: a metrics line without an integer \"step\"", curves_path.string(), n);
      const int64_t step = j["step"].get<int64_t>();
      for (auto& [name, v] : j.items())
        if (name != "step" && v.is_number()) r.curves.push_back({step, name, v.get<double>()});
    }
  }
  return r;
}

Store::Store(const fs::path& path) : path_(path) {
  if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    fail<FileError>("{}: cannot open the results database: {}", path.string(), msg);
  }
  // Shards and `attnlab report` may touch the same file: wait for a lock rather than fail.
  sqlite3_busy_timeout(db_, 30000);
  exec("PRAGMA journal_mode=WAL");
  exec("PRAGMA synchronous=NORMAL");
  exec(
      "CREATE TABLE IF NOT EXISTS runs(id INTEGER PRIMARY KEY, point_json TEXT NOT NULL, config_json TEXT, "
      "status TEXT NOT NULL, steps INTEGER, seconds REAL, finished_at TEXT, error TEXT);"
      "CREATE TABLE IF NOT EXISTS metrics(run_id INTEGER NOT NULL, name TEXT NOT NULL, value REAL, "
      "PRIMARY KEY (run_id, name));"
      "CREATE TABLE IF NOT EXISTS curves(run_id INTEGER NOT NULL, step INTEGER NOT NULL, name TEXT NOT NULL, "
      "value REAL, PRIMARY KEY (run_id, step, name));");
}

Store::~Store() { sqlite3_close(db_); }

void Store::exec(const std::string& sql) const {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    fail<FileError>("{}: SQLite failed on '{}': {}", path_.string(), sql.substr(0, 60), msg);
  }
}

void Store::put(const std::vector<RunRecord>& records) {
  if (records.empty()) return;
  exec("BEGIN IMMEDIATE");
  try {
    Stmt del_m(db_, "DELETE FROM metrics WHERE run_id = ?", path_), del_c(db_, "DELETE FROM curves WHERE run_id = ?", path_);
    Stmt run(db_,
             "INSERT OR REPLACE INTO runs(id, point_json, config_json, status, steps, seconds, finished_at, error) "
             "VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
             path_);
    Stmt metric(db_, "INSERT OR REPLACE INTO metrics(run_id, name, value) VALUES (?, ?, ?)", path_);
    Stmt curve(db_, "INSERT OR REPLACE INTO curves(run_id, step, name, value) VALUES (?, ?, ?, ?)", path_);
    for (const RunRecord& r : records) {
      del_m.bind(1, r.id).run();
      del_c.bind(1, r.id).run();
      run.bind(1, r.id).bind(2, r.point_json).bind(3, r.config_json).bind(4, r.status).bind(5, r.steps);
      run.bind(6, r.seconds).bind(7, r.finished_at).run();
      for (const auto& [name, v] : r.metrics) metric.bind(1, r.id).bind(2, name).bind(3, v).run();
      for (const auto& c : r.curves) curve.bind(1, r.id).bind(2, c.step).bind(3, c.name).bind(4, c.value).run();
    }
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

void Store::put_failed(int64_t id, const std::string& point_json, const std::string& reason) {
  Stmt s(db_,
         "INSERT OR REPLACE INTO runs(id, point_json, status, error) SELECT ?, ?, 'failed', ? "
         "WHERE NOT EXISTS (SELECT 1 FROM runs WHERE id = ? AND status = 'complete')",
         path_);
  s.bind(1, id).bind(2, point_json).bind(3, reason).bind(4, id).run();
}

std::vector<int64_t> Store::complete_ids() const {
  Stmt s(db_, "SELECT id FROM runs WHERE status = 'complete' ORDER BY id", path_);
  std::vector<int64_t> ids;
  while (s.row()) ids.push_back(s.integer(0));
  return ids;
}

void Store::merge_from(const fs::path& other) {
  if (!fs::exists(other)) fail<FileError>("{}: no such results database", other.string());
  {
    Stmt attach(db_, "ATTACH DATABASE ? AS other", path_);
    attach.bind(1, other.string()).run();
  }
  try {
    exec("BEGIN IMMEDIATE");
    exec(
        "CREATE TEMP TABLE merged AS SELECT id FROM other.runs WHERE status = 'complete';"
        "DELETE FROM main.metrics WHERE run_id IN (SELECT id FROM merged);"
        "DELETE FROM main.curves WHERE run_id IN (SELECT id FROM merged);"
        "INSERT OR REPLACE INTO main.runs(id, point_json, config_json, status, steps, seconds, finished_at, error) "
        "  SELECT id, point_json, config_json, status, steps, seconds, finished_at, error FROM other.runs "
        "  WHERE id IN (SELECT id FROM merged);"
        "INSERT INTO main.metrics(run_id, name, value) SELECT run_id, name, value FROM other.metrics "
        "  WHERE run_id IN (SELECT id FROM merged);"
        "INSERT INTO main.curves(run_id, step, name, value) SELECT run_id, step, name, value FROM other.curves "
        "  WHERE run_id IN (SELECT id FROM merged);"
        "INSERT OR REPLACE INTO main.runs(id, point_json, config_json, status, steps, seconds, finished_at, error) "
        "  SELECT id, point_json, config_json, status, steps, seconds, finished_at, error FROM other.runs "
        "  WHERE status != 'complete' AND id NOT IN (SELECT id FROM main.runs WHERE status = 'complete');"
        "DROP TABLE temp.merged;"
        "COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_exec(db_, "DROP TABLE IF EXISTS temp.merged", nullptr, nullptr, nullptr);
    sqlite3_exec(db_, "DETACH DATABASE other", nullptr, nullptr, nullptr);
    throw;
  }
  exec("DETACH DATABASE other");
}

std::vector<Store::Row> Store::runs() const {
  std::vector<Row> rows;
  Stmt s(db_, "SELECT id, point_json, config_json, status, steps, seconds FROM runs ORDER BY id", path_);
  while (s.row()) rows.push_back({s.integer(0), s.text(1), s.text(2), s.text(3), s.integer(4), s.real(5), {}});
  Stmt m(db_, "SELECT run_id, name, value FROM metrics ORDER BY run_id", path_);
  size_t k = 0;
  while (m.row()) {
    const int64_t id = m.integer(0);
    while (k < rows.size() && rows[k].id < id) ++k;
    if (k < rows.size() && rows[k].id == id) rows[k].metrics[m.text(1)] = m.real(2);
  }
  return rows;
}

std::map<std::string, std::vector<std::pair<int64_t, double>>> Store::curves(int64_t run_id) const {
  std::map<std::string, std::vector<std::pair<int64_t, double>>> out;
  Stmt s(db_, "SELECT name, step, value FROM curves WHERE run_id = ? ORDER BY name, step", path_);
  s.bind(1, run_id);
  while (s.row()) out[s.text(0)].emplace_back(s.integer(1), s.real(2));
  return out;
}

void Store::export_csv(const fs::path& path, const std::vector<std::string>& axis_keys,
                       const std::function<std::string(int64_t)>& start_time) const {
  const auto rows = runs();
  std::set<std::string> names;
  for (const Row& r : rows)
    for (const auto& [n, v] : r.metrics) names.insert(n);
  std::string csv = "id,status";
  for (const auto& k : axis_keys) csv += fmt::format(",{}", csv_field(k));
  for (const auto& n : names) csv += fmt::format(",{}", csv_field(n));
  if (start_time) csv += ",start_time";
  csv += "\n";
  for (const Row& r : rows) {
    csv += fmt::format("{},{}", r.id, r.status);
    const json point = json::parse(r.point_json);
    for (const auto& k : axis_keys) {
      csv += ",";
      if (point.contains(k)) csv += csv_field(point[k].is_string() ? point[k].get<std::string>() : point[k].dump());
    }
    for (const auto& n : names) {
      csv += ",";
      if (auto it = r.metrics.find(n); it != r.metrics.end()) csv += fmt::format("{}", it->second);
    }
    if (start_time) csv += "," + csv_field(start_time(r.id));
    csv += "\n";
  }
  write_text_atomic(path.string(), csv);
}

}  // namespace attnlab::runner
