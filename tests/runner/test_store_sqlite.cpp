// experiments/runner/store: the SQLite results store, its idempotent inserts and shard merges.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "experiments/runner/store.hpp"
#include "helpers.hpp"
#include "tensor/io.hpp"

using namespace attnlab;
using namespace attnlab::runner;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / fmt::format("attnlab_{}_{}", name, getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A complete run directory as `attnlab run` leaves it.
fs::path fake_run(const fs::path& root, int64_t id, double acc) {
  const fs::path d = root / fmt::format("runs/{:04d}", id);
  fs::create_directories(d);
  write_text_atomic((d / "point.json").string(), fmt::format("{{\"model.heads\": {}, \"seed\": 0}}\n", id));
  write_text_atomic((d / "config.toml").string(), fmt::format("seed = 0\n[model]\nheads = {}\nattention = \"mha\"\n", id));
  write_text_atomic((d / "metrics.jsonl").string(),
                    "{\"step\": 1, \"time\": 0.5, \"train_loss\": 2.0}\n{\"step\": 2, \"time\": 1.0, \"train_loss\": 1.5}\n");
  write_text_atomic((d / "summary.json").string(),
                    fmt::format("{{\"experiment\": \"x\", \"status\": \"complete\", \"steps\": 2, \"seconds\": 4.0, "
                                "\"peak_rss_mb\": 50.0, \"metrics\": {{\"val_acc\": {}}}}}",
                                acc));
  return d;
}

int64_t count(const fs::path& db, const std::string& table) {
  Store s(db);
  int64_t n = 0;
  for (const auto& r : s.runs()) {
    if (table == "runs") ++n;
    if (table == "metrics") n += int64_t(r.metrics.size());
    if (table == "curves")
      for (const auto& [name, pts] : s.curves(r.id)) n += int64_t(pts.size());
  }
  return n;
}

}  // namespace

TEST_CASE("store: a run read from its directory, inserted twice, is stored once") {
  const fs::path root = fresh_dir("store_twice");
  const fs::path db = root / "results.sqlite";
  const RunRecord r = read_run_dir(3, fake_run(root, 3, 0.75));
  CHECK(r.status == "complete");
  CHECK(r.config_json == R"x({"seed":0,"model.heads":3,"model.attention":"mha"})x");
  CHECK(r.metrics.at("val_acc") == 0.75);
  CHECK(r.metrics.at("steps_per_s") == 0.5);  // 2 steps in 4 s
  CHECK(r.metrics.at("peak_rss_mb") == 50.0);
  CHECK(r.curves.size() == 4);  // time and train_loss at two steps
  {
    Store s(db);
    s.put({r});
    s.put({r, r});
    s.put_failed(3, r.point_json, "exit 1");  // never replaces a complete run
    s.put_failed(4, R"x({"seed":1})x", "exit status 1");
    CHECK(s.complete_ids() == std::vector<int64_t>{3});
    const auto rows = s.runs();
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].status == "complete");
    CHECK(rows[1].status == "failed");
    CHECK(s.curves(3).at("train_loss") == std::vector<std::pair<int64_t, double>>{{1, 2.0}, {2, 1.5}});
  }
  CHECK(count(db, "metrics") == 4);  // val_acc, peak_rss_mb, seconds, steps_per_s
  CHECK(count(db, "curves") == 4);
  Store(db).export_csv(root / "results.csv", {"model.heads", "seed"});
  std::ifstream f(root / "results.csv");
  std::string header, row;
  std::getline(f, header), std::getline(f, row);
  CHECK(header == "id,status,model.heads,seed,peak_rss_mb,seconds,steps_per_s,val_acc");
  CHECK(row == "3,complete,3,0,50,4,0.5,0.75");
  fs::remove_all(root);
}

TEST_CASE("store: shard databases merge into one, complete runs winning over failed ones") {
  const fs::path root = fresh_dir("store_merge");
  {
    Store a(root / "a.sqlite"), b(root / "b.sqlite");
    a.put({read_run_dir(0, fake_run(root, 0, 0.5)), read_run_dir(2, fake_run(root, 2, 0.25))});
    a.put_failed(4, R"x({"seed":4})x", "exit status 1");
    b.put({read_run_dir(1, fake_run(root, 1, 0.125)), read_run_dir(4, fake_run(root, 4, 1.0))});
    b.put_failed(3, R"x({"seed":3})x", "killed by signal 9");
  }
  const fs::path merged = root / "results.sqlite";
  {
    Store m(merged);
    m.put_failed(1, R"x({"seed":1})x", "exit status 1");  // an earlier failure, later completed in b
    m.merge_from(root / "a.sqlite");
    m.merge_from(root / "b.sqlite");
    m.merge_from(root / "a.sqlite");  // merging twice changes nothing
    CHECK(m.complete_ids() == std::vector<int64_t>{0, 1, 2, 4});
    const auto rows = m.runs();
    REQUIRE(rows.size() == 5);
    CHECK(rows[3].status == "failed");
    CHECK(rows[4].metrics.at("val_acc") == 1.0);
    CHECK(rows[1].metrics.at("val_acc") == 0.125);
    CHECK_THROWS_AS(m.merge_from(root / "missing.sqlite"), FileError);
  }
  CHECK(count(merged, "metrics") == 4 * 4);
  CHECK(count(merged, "curves") == 4 * 4);
  fs::remove_all(root);
}

TEST_CASE("store: a malformed run directory is a FileError naming the file") {
  const fs::path root = fresh_dir("store_bad");
  const fs::path d = fake_run(root, 0, 0.5);
  write_text_atomic((d / "summary.json").string(), "{\"status\": \"complete\", \"metrics\": ");
  const std::string msg = attnlab::testing::error_of([&] { read_run_dir(0, d); });
  CHECK(msg.find("summary.json: not valid JSON") != std::string::npos);
  write_text_atomic((d / "summary.json").string(), "{\"status\": \"complete\", \"metrics\": {}}");
  write_text_atomic((d / "point.json").string(), "{\"seed\": ");
  CHECK(attnlab::testing::error_of([&] { read_run_dir(0, d); }).find("point.json: not valid JSON") != std::string::npos);
  // A run of `attnlab run --run-dir` outside a sweep has no point.json: its point is empty.
  fs::remove(d / "point.json");
  CHECK(read_run_dir(0, d).point_json == "{}");
  fs::remove_all(root);
}
