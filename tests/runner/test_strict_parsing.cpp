// What the runner reads back from files, parsed strictly: CSV number fields, the number of runs a
// sweep file names, a run's meta.json when the run resumes, a --set string that config.toml must
// hold, and the process's peak RSS. Each bad
// input is a typed error naming the file and the value, never std::stod's or nlohmann's own.
#include <unistd.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "experiments/runner/csv.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/measured.hpp"
#include "experiments/runner/sweep.hpp"
#include "helpers.hpp"
#include "tensor/io.hpp"

using namespace attnlab;
using namespace attnlab::runner;
namespace fs = std::filesystem;

TEST_CASE("number_field: whole finite numbers only, blanks around them ignored") {
  CHECK(number_field("1.5") == 1.5);
  CHECK(number_field(" -2e3\t") == -2000.0);
  CHECK(is_number("0"));
  for (const char* bad : {"", "  ", "nan", "inf", "-inf", "3x", "1e999", "0x10", "1.5 2", "+", "--1"}) {
    CAPTURE(bad);
    CHECK(!number_field(bad));
    CHECK(!is_number(bad));
  }
}

TEST_CASE("a measured table names the line, the column and the value that is not a number") {
  const fs::path path = fs::temp_directory_path() / fmt::format("attnlab_measured_{}.csv", getpid());
  write_text_atomic(path.string(), "variant,time_ms\nmha, 1.5 \nlocal,\n");
  const MeasuredTable t = read_measured_table(path.string());
  REQUIRE(t.rows.size() == 2);
  CHECK(t.rows[0].second[0] == 1.5);
  CHECK(std::isnan(t.rows[1].second[0]));  // empty: missing
  for (const char* bad : {"1e999", "2ms", "0x1p3"}) {
    CAPTURE(bad);
    write_text_atomic(path.string(), fmt::format("variant,time_ms\nmha,1\nlocal,{}\n", bad));
    const std::string want = fmt::format(":3: column 'time_ms' must be a number or empty, got '{}'", bad);
    CHECK_THROWS_WITH_AS(read_measured_table(path.string()), doctest::Contains(want.c_str()), ValueError);
  }
  fs::remove(path);
}

TEST_CASE("a sweep file naming more than kMaxSweepRuns runs is refused before anything is expanded") {
  // 10 seeds x 10^5 grid points = 10^6 runs; then 20 lists of 10 values, 10^21 runs (past 2^64).
  std::string text = "experiment = \"x\"\nseeds = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n[grid]\n";
  for (int k = 0; k < 5; ++k) text += fmt::format("\"k{}\" = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n", k);
  CHECK_THROWS_WITH_AS(parse_sweep(text, "big.toml"),
                       doctest::Contains("big.toml: the sweep names more than 100000 runs"), SweepError);
  for (int k = 5; k < 20; ++k) text += fmt::format("\"k{}\" = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n", k);
  CHECK_THROWS_AS(parse_sweep(text, "huge.toml"), SweepError);
  // 10 x 10^4 = 10^5 runs: the limit itself is allowed.
  std::string at_limit = "experiment = \"x\"\nseeds = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n[grid]\n";
  for (int k = 0; k < 4; ++k) at_limit += fmt::format("\"k{}\" = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n", k);
  CHECK(expand_sweep(parse_sweep(at_limit, "ok.toml")).size() == kMaxSweepRuns);
}

TEST_CASE("append_meta_session: a resumed process is appended as a segment, a meta.json of the wrong shape is a FileError") {
  const std::string meta = R"({"experiment": "example", "resumed_at": [],
                               "segments": [{"start": "2026-01-01T00:00:00Z", "threads": 4}]})";
  MetaSession s = append_meta_session(meta, "run/meta.json", "2026-01-02T00:00:00Z", 2);
  CHECK(s.warning.find("resuming with 2 threads, the run's previous process had 4") != std::string::npos);
  nlohmann::json j = nlohmann::json::parse(s.text);
  CHECK(j["resumed_at"] == nlohmann::json::array({"2026-01-02T00:00:00Z"}));
  REQUIRE(j["segments"].size() == 2);
  CHECK(j["segments"][1]["threads"] == 2);
  CHECK(append_meta_session(s.text, "run/meta.json", "2026-01-03T00:00:00Z", 2).warning.empty());
  // A file without segments: its first segment from start_time and threads.
  j = nlohmann::json::parse(
      append_meta_session(R"({"start_time": "t0", "threads": 1})", "m.json", "t1", 1).text);
  CHECK(j["segments"] == nlohmann::json::parse(R"([{"start": "t0", "threads": 1}, {"start": "t1", "threads": 1, "world_size": 1}])"));
  // Segments that are not objects are kept, without a warning.
  CHECK(append_meta_session(R"({"segments": [5]})", "m.json", "t1", 1).warning.empty());
  CHECK_THROWS_WITH_AS(append_meta_session(R"({"resumed_at": 3})", "run/meta.json", "t", 1),
                       doctest::Contains("run/meta.json: \"resumed_at\" must be a list, got a JSON number"), FileError);
  CHECK_THROWS_WITH_AS(append_meta_session(R"({"segments": {"a": 1}})", "run/meta.json", "t", 1),
                       doctest::Contains("run/meta.json: \"segments\" must be a list, got a JSON object"), FileError);
  CHECK_THROWS_WITH_AS(append_meta_session("[1]", "run/meta.json", "t", 1),
                       doctest::Contains("run/meta.json: not a JSON object"), FileError);
  CHECK_THROWS_AS(append_meta_session("{\"a\": ", "run/meta.json", "t", 1), FileError);
}

TEST_CASE("config: a verbatim --set string that is not UTF-8 is refused, so config.toml reads back") {
  Config c(Schema().add("model.attention", "mha", "a string"));
  CHECK_THROWS_WITH_AS(c.set("model.attention=mha\xff"),
                       doctest::Contains("--set: key 'model.attention': the value is not UTF-8 text"), ConfigError);
  c.set("model.attention=caf\xc3\xa9(heads=2)");  // UTF-8 passes, and round-trips
  Config again(Schema().add("model.attention", "mha", "a string"));
  again.merge_toml(c.to_toml(), "resolved");
  CHECK(again == c);
  CHECK(nlohmann::json::parse(c.to_json())["model.attention"] == "caf\xc3\xa9(heads=2)");
}

TEST_CASE("peak_rss_mb reads this process's VmHWM") {
  const double mb = peak_rss_mb();
  CHECK(mb > 1);
  CHECK(mb < 1e6);
}
