/// @file
/// The results store of a sweep: one SQLite file (WAL mode, busy timeout) derived from the run
/// directories (docs/sweeps.md).
///
///   runs(id INTEGER PRIMARY KEY, point_json, config_json, status, steps, seconds, finished_at)
///   metrics(run_id, name, value, PRIMARY KEY (run_id, name))        summary.json's final metrics
///   curves(run_id, step, name, value, PRIMARY KEY (run_id, step, name))   metrics.jsonl
///
/// A run is written in one transaction that replaces every row it had (INSERT OR REPLACE keyed by
/// the run id), so inserting a run twice, or after a crash between its summary.json and its
/// insert, leaves exactly one copy. Besides the experiment's own metrics, `metrics` holds
/// peak_rss_mb, seconds and steps_per_s (steps / seconds) from summary.json, unless the experiment
/// reported metrics of those names itself.
/// @ingroup runner
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

struct sqlite3;

/// @addtogroup runner
/// @{
namespace attnlab::runner {

/// One run as read from its directory.
struct RunRecord {
  int64_t id = 0;           ///< the run's number in the sweep
  std::string point_json;   ///< the axis values
  std::string config_json;  ///< the resolved config (config.toml) as a flat JSON object
  std::string status;       ///< "complete" or "failed"
  int64_t steps = 0;        ///< optimizer steps done
  double seconds = 0;       ///< training seconds
  std::string finished_at;  ///< ISO 8601 UTC
  std::map<std::string, double> metrics;  ///< the final metrics of summary.json
  /// One value of a training curve: step, metric name, value.
  struct CurvePoint {
    int64_t step;      ///< the metrics line's step
    std::string name;  ///< the metric
    double value;      ///< its value at that step
  };
  std::vector<CurvePoint> curves;  ///< every metrics.jsonl value, in file order
};

/// Reads a complete run directory (summary.json, config.toml, metrics.jsonl, and point.json when
/// the run belongs to a sweep, else the point is {}); FileError naming the file when one is
/// missing or malformed.
RunRecord read_run_dir(int64_t id, const std::filesystem::path& dir);
/// The start_time of run directory `dir` (meta.json: its first process's start, ISO 8601 UTC), or
/// "" when it records none.
std::string run_start_time(const std::filesystem::path& dir);

/// The results store of a sweep: one SQLite file with every run's status, point, config and metrics (docs/sweeps.md, "The results store").
class Store {
 public:
  explicit Store(const std::filesystem::path& path);  ///< creates the file and tables if needed
  ~Store();  ///< closes the database
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// Inserts or replaces every record in one transaction.
  void put(const std::vector<RunRecord>& records);
  /// Records a run that did not complete (status "failed"), unless it is already complete.
  void put_failed(int64_t id, const std::string& point_json, const std::string& reason);
  /// The ids of runs stored with status "complete".
  std::vector<int64_t> complete_ids() const;
  /// Copies every run of another store file into this one in one transaction; a complete run
  /// replaces anything, a failed one never replaces a complete one.
  void merge_from(const std::filesystem::path& other);

  /// One run of the store, as read back.
  struct Row {
    int64_t id;               ///< the run's number
    std::string point_json;   ///< its axis values
    std::string config_json;  ///< its resolved config ("" for a failed run)
    std::string status;       ///< "complete" or "failed"
    int64_t steps;            ///< optimizer steps done
    double seconds;           ///< training seconds
    std::map<std::string, double> metrics;  ///< the final metrics
  };
  std::vector<Row> runs() const;  ///< by id
  /// name -> (step, value) pairs by step, for one run.
  std::map<std::string, std::vector<std::pair<int64_t, double>>> curves(int64_t run_id) const;

  /// One CSV row per run: id, status, the axis values, then every final metric (sorted by name);
  /// with `start_time`, last a start_time column, the run's start (run_start_time), which
  /// `attnlab claims` compares with the time the study's expectations were committed.
  void export_csv(const std::filesystem::path& path, const std::vector<std::string>& axis_keys,
                  const std::function<std::string(int64_t)>& start_time = {}) const;

 private:
  void exec(const std::string& sql) const;
  std::filesystem::path path_;
  sqlite3* db_ = nullptr;
};

}  // namespace attnlab::runner
/// @}
