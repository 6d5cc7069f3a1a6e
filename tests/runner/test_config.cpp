// Config resolution (experiments/runner/config.hpp): defaults, TOML merging with nested and dotted
// keys, --set parsing, the order of sources, the TOML round trip, and every error path: unknown
// keys (with "did you mean"), ill-typed values, bad syntax and bad --set, each naming the key, the
// source and the line.
#include <filesystem>
#include <fstream>

#include "experiments/runner/config.hpp"
#include "experiments/runner/config_diff.hpp"
#include "helpers.hpp"

using namespace attnlab;
using namespace attnlab::runner;
using namespace attnlab::testing;

namespace {

Schema demo_schema() {
  return Schema()
      .add("seed", 0, "random seed")
      .add("model.attention", "mha(heads=4)", "attention spec")
      .add("model.d_model", 64, "model width")
      .add("model.causal", false, "causal mask")
      .add("train.steps", 200, "optimizer steps")
      .add("train.lr", 1e-3, "peak learning rate")
      .add("task.name", "listops", "task");
}

}  // namespace

TEST_CASE("config: defaults, typed reads and origins") {
  Config c(demo_schema());
  CHECK(c.get_int("train.steps") == 200);
  CHECK(c.get_float("train.lr") == 1e-3);
  CHECK(c.get_bool("model.causal") == false);
  CHECK(c.get_string("model.attention") == "mha(heads=4)");
  CHECK(c.origin("train.steps") == "default");
  CHECK_THROWS_AS(c.get_int("train.lr"), ConfigError);
  CHECK(error_of([&] { c.get_int("train.step"); }).find("'train.step'") != std::string::npos);
}

TEST_CASE("config: schema rejects duplicates and table/key clashes when used, keeping the first error") {
  // add never throws (schemas are built in static initialisers); error() holds the first problem
  // and Config raises it.
  Schema twice = Schema().add("a.b", 1, "").add("a.b", 2, "").add("c d", 3, "");
  CHECK(twice.error() == "Schema: key 'a.b' added twice");
  CHECK(twice.fields().size() == 1);
  CHECK_THROWS_AS(Config{twice}, ConfigError);
  CHECK(error_of([] { Config(Schema().add("model", 1, "").add("model.d", 2, "")); }).find("'model'") != std::string::npos);
  CHECK_THROWS_AS(Config(Schema().add("a..b", 1, "")), ConfigError);
  CHECK_THROWS_AS(Config(Schema().add("a b", 1, "")), ConfigError);
  CHECK(Schema().add("a.b", 1, "").error().empty());
}

TEST_CASE("config: TOML tables, dotted keys, int for float, origins with lines") {
  Config c(demo_schema());
  c.merge_toml("seed = 3\n[model]\nattention = \"talking_heads(heads=8)\"\n", "run.toml");
  CHECK(c.get_int("seed") == 3);
  CHECK(c.get_string("model.attention") == "talking_heads(heads=8)");
  CHECK(c.origin("model.attention") == "run.toml:3");
  // `train.lr = 2` under [model] is model.train.lr: unknown.
  CHECK(error_of([&] { c.merge_toml("[model]\ntrain.lr = 2\n", "run.toml"); }) ==
        "run.toml:2: unknown table 'model.train'");
  Config d(demo_schema());
  d.merge_toml("train.lr = 2\nmodel.causal = true\n", "run.toml");
  CHECK(d.get_float("train.lr") == 2.0);
  CHECK(d.get_bool("model.causal"));
  CHECK(d.origin("model.causal") == "run.toml:2");
}

TEST_CASE("config: unknown keys name the key, the source, the line and a suggestion") {
  Config c(demo_schema());
  std::string e = error_of([&] { c.merge_toml("[model]\nd_model = 32\natention = \"mha\"\n", "run.toml"); });
  CHECK(e == "run.toml:3: unknown key 'model.atention' (did you mean 'model.attention'?)");
  e = error_of([&] { c.merge_toml("steps = 5\n", "preset quick"); });
  CHECK(e == "preset quick:1: unknown key 'steps' (did you mean 'train.steps'?)");
  e = error_of([&] { c.merge_toml("[optim]\nlr = 1\n", "x.toml"); });
  CHECK(e.find("x.toml:") == 0);
  CHECK(e.find("unknown table 'optim'") != std::string::npos);
  e = error_of([&] { c.merge_toml("model = 3\n", "x.toml"); });
  CHECK(e == "x.toml:1: 'model' is a table of keys, not a value");
  CHECK(error_of([&] { c.merge_toml("zzzzzz = 1\n", "x.toml"); }) == "x.toml:1: unknown key 'zzzzzz'");
}

TEST_CASE("config: ill-typed values and syntax errors") {
  Config c(demo_schema());
  CHECK(error_of([&] { c.merge_toml("\ntrain.steps = \"many\"\n", "r.toml"); }) ==
        "r.toml:2: key 'train.steps' expects int, got string \"many\"");
  CHECK(error_of([&] { c.merge_toml("train.steps = 2.5\n", "r.toml"); }) ==
        "r.toml:1: key 'train.steps' expects int, got float 2.5");
  CHECK(error_of([&] { c.merge_toml("train.steps = [1, 2]\n", "r.toml"); }) ==
        "r.toml:1: key 'train.steps' expects int, got array");
  CHECK(error_of([&] { c.merge_toml("[model.causal]\nx = 1\n", "r.toml"); }) ==
        "r.toml:1: key 'model.causal' expects bool, got a table");
  std::string e = error_of([&] { c.merge_toml("seed = 1\ntrain.steps = = 3\n", "r.toml"); });
  CHECK(e.find("r.toml:2: TOML syntax error") == 0);
  CHECK_THROWS_AS(c.merge_toml("seed = 1\nseed = 2\n", "r.toml"), ConfigError);
  // A failed merge in a fresh config does not name a value it did not set.
  CHECK(c.get_int("train.steps") == 200);
}

TEST_CASE("config: --set values, verbatim strings and errors") {
  Config c(demo_schema());
  c.set("train.steps=2000");
  c.set("train.lr=3e-4");
  c.set("model.causal=true");
  c.set("task.name=\"fortunes\"");
  c.set("model.attention=talking_heads(heads=8, logit_heads=4)");
  CHECK(c.get_int("train.steps") == 2000);
  CHECK(c.get_float("train.lr") == 3e-4);
  CHECK(c.get_bool("model.causal"));
  CHECK(c.get_string("task.name") == "fortunes");
  CHECK(c.get_string("model.attention") == "talking_heads(heads=8, logit_heads=4)");
  CHECK(c.origin("train.steps") == "--set");
  c.set(" train.steps = 7 ");
  CHECK(c.get_int("train.steps") == 7);
  c.set("task.name=123");  // a string key takes non-string text verbatim
  CHECK(c.get_string("task.name") == "123");
  CHECK(error_of([&] { c.set("train.steps"); }).find("not key=value") != std::string::npos);
  CHECK(error_of([&] { c.set("train.step=3"); }) == "--set: unknown key 'train.step' (did you mean 'train.steps'?)");
  CHECK(error_of([&] { c.set("train.steps=lots"); }) ==
        "--set: key 'train.steps' expects int, got 'lots' (not a TOML value)");
  CHECK(error_of([&] { c.set("model.causal=1"); }) == "--set: key 'model.causal' expects bool, got int 1");
  // One key per --set: a newline would let a second key slip in unseen.
  CHECK(error_of([&] { c.set("task.name=a\ntrain.steps=9"); }).find("spans several lines") != std::string::npos);
  CHECK(error_of([&] { c.set("train.steps=3\r"); }).find("spans several lines") != std::string::npos);
  CHECK(c.get_int("train.steps") == 7);
  // nan is never a setting: it would read as "not set" downstream (an optimizer's lr).
  CHECK(error_of([&] { c.set("train.lr=nan"); }) == "--set: key 'train.lr' expects a number, got nan");
  CHECK(error_of([&] { c.merge_toml("[train]\nlr = nan\n", "run.toml"); }).find("'train.lr' expects a number, got nan") !=
        std::string::npos);
}

TEST_CASE("config: set_value for sweeps, source order") {
  Config c(demo_schema());
  c.merge_toml("train.steps = 10", "preset quick");
  c.merge_toml("train.steps = 20", "run.toml");
  c.set("train.steps=30");
  CHECK(c.get_int("train.steps") == 30);
  c.set_value("train.lr", Value(int64_t(1)), "sweep");
  CHECK(c.get_float("train.lr") == 1.0);
  CHECK(c.origin("train.lr") == "sweep");
  CHECK(error_of([&] { c.set_value("model.d_model", Value(std::string("x")), "sweep"); }) ==
        "sweep: key 'model.d_model' expects int, got string \"x\"");
}

TEST_CASE("config: to_toml round trip and to_json") {
  Config c(demo_schema());
  c.set("model.attention=weird \"quoted\" \\ text\ttab");
  c.set("train.lr=0.1");
  c.set("seed=-4");
  std::string text = c.to_toml();
  CHECK(text.find("# peak learning rate\nlr = 0.1\n") != std::string::npos);
  CHECK(text.find("seed = -4") < text.find("[model]"));
  Config d(demo_schema());
  d.merge_toml(text, "config.toml");
  CHECK(d == c);
  CHECK(d.get_string("model.attention") == c.get_string("model.attention"));
  d.set("train.lr=0.2");
  CHECK_FALSE(d == c);
  CHECK(to_toml_value(Value(2.0)) == "2.0");
  CHECK(to_toml_value(Value(1e-300)) == "1e-300");
  std::string json = c.to_json();
  CHECK(json.find("\"train.steps\":200") != std::string::npos);
  CHECK(json.find("\"model.causal\":false") != std::string::npos);
}

TEST_CASE("config: merge_file names the path") {
  auto dir = std::filesystem::temp_directory_path() / "attnlab_test_config";
  std::filesystem::create_directories(dir);
  auto path = (dir / "run.toml").string();
  std::ofstream(path) << "[train]\nsteps = 5\nlr = \"fast\"\n";
  Config c(demo_schema());
  CHECK(error_of([&] { c.merge_file(path); }) == path + ":3: key 'train.lr' expects float, got string \"fast\"");
  CHECK_THROWS_AS(c.merge_file((dir / "missing.toml").string()), FileError);
  CHECK(error_of([&] { c.merge_file((dir / "missing.toml").string()); }).find("missing.toml") != std::string::npos);
  CHECK_THROWS_AS(c.merge_file(dir.string()), FileError);  // a directory would read as an empty file
  CHECK(error_of([&] { c.merge_file(dir.string()); }) ==
        "config: '" + dir.string() + "' is a directory, not a regular file");
  std::filesystem::remove_all(dir);
}

TEST_CASE("config_differences: every differing key with both values, and what a value means when the help says") {
  Schema s;
  s.add("task.length", int64_t(0), "sequence length, 0 = the task's default (listops 128)")
      .add("train.lr", 3e-3, "learning rate")
      .add("model.attention", "mha", "attention spec");
  Config a(s), b(s);
  CHECK(config_differences(a, b, "run directory", "now").empty());
  a.set("task.length=64");
  b.set("train.lr=0.01");
  CHECK(config_differences(a, b, "run directory", "now") ==
        "'task.length' (run directory: 64, now: 0 = the task's default), 'train.lr' (run directory: 0.003, now: 0.01)");
  // "0 = ..." is not read into "10", nor into a value the help does not define
  b.set("task.length=10");
  CHECK(config_differences(a, b, "x", "y").find("'task.length' (x: 64, y: 10)") == 0);
}
