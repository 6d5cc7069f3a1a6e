// experiments/runner/sweep: sweep files, their expansion into numbered runs, and their errors.
#include <string>

#include "experiments/runner/experiment.hpp"
#include "experiments/runner/sweep.hpp"
#include "helpers.hpp"

using namespace attnlab;
using namespace attnlab::runner;
using attnlab::testing::error_of;

namespace {

// A schema to validate against; never run.
const bool registered = register_experiment({
    .name = "sweep_parse_test",
    .description = "schema for the sweep parser's tests",
    .schema = Schema()
                  .add("model.attention", "mha(heads=4)", "attention spec")
                  .add("model.heads", 4, "heads")
                  .add("model.key_size", 16, "key size")
                  .add("train.lr", 1e-3, "learning rate")
                  .add("task.name", "listops", "task"),
    .presets = {{"quick", "model.heads = 2"}},
    .run = [](const Config&, RunContext&) {},
});

const char* kFull = R"x(experiment = "sweep_parse_test"
preset = "quick"
workers = 2
seeds = [0, 1]
[set]
"task.name" = "text"
[grid]
"model.attention" = ["mha(heads=4)", "local(window=16)"]
train.lr = [1e-3, 3e-3, 1e-2]
[zip]
"model.heads" = [2, 4]
"model.key_size" = [32, 16]
[report]
metric = "val_acc"
x = "train.lr"
curves = ["train_loss"]
bubble = { x = "steps_per_s", y = "val_acc", size = "peak_rss_mb", label = "model.attention" }
)x";

std::string parse_error(const std::string& text) {
  return error_of([&] { validate_sweep(parse_sweep(text, "s.toml"), expand_sweep(parse_sweep(text, "s.toml"))); });
}

}  // namespace

TEST_CASE("sweep expansion: zip outermost, grid keys in file order, seeds innermost") {
  REQUIRE(registered);
  const SweepSpec s = parse_sweep(kFull, "s.toml");
  CHECK(s.workers == 2);
  CHECK(s.preset == "quick");
  REQUIRE(s.set.size() == 1);
  CHECK(s.set[0].key == "task.name");
  CHECK(s.report.has_bubble);
  CHECK(s.report.bubble.label == "model.attention");
  CHECK(axis_keys(s) == std::vector<std::string>{"model.heads", "model.key_size", "model.attention", "train.lr", "seed"});
  const auto points = expand_sweep(s);
  REQUIRE(points.size() == 2 * 2 * 3 * 2);  // zip 2 x attention 2 x lr 3 x seeds 2
  CHECK(point_to_json(points[0]) ==
        R"x({"model.heads":2,"model.key_size":32,"model.attention":"mha(heads=4)","train.lr":0.001,"seed":0})x");
  CHECK(point_to_json(points[1]) ==
        R"x({"model.heads":2,"model.key_size":32,"model.attention":"mha(heads=4)","train.lr":0.001,"seed":1})x");
  CHECK(point_to_json(points[2]) ==
        R"x({"model.heads":2,"model.key_size":32,"model.attention":"mha(heads=4)","train.lr":0.003,"seed":0})x");
  CHECK(point_to_json(points[6]) ==
        R"x({"model.heads":2,"model.key_size":32,"model.attention":"local(window=16)","train.lr":0.001,"seed":0})x");
  CHECK(point_to_json(points[12]) ==
        R"x({"model.heads":4,"model.key_size":16,"model.attention":"mha(heads=4)","train.lr":0.001,"seed":0})x");
  CHECK(point_label(points[23]) == "model.heads=4, model.key_size=16, model.attention=local(window=16), train.lr=0.01, seed=1");

  // The run's config: defaults < preset < [set] < point.
  const Config c = resolve_run_config(s, points[23]);
  CHECK(c.get_int("model.heads") == 4);
  CHECK(c.get_string("task.name") == "text");
  CHECK(c.get_string("model.attention") == "local(window=16)");
  CHECK(c.get_float("train.lr") == 1e-2);
  CHECK(c.get_int("seed") == 1);
  const auto args = run_arguments(s, points[23], "d/runs/0023");
  CHECK(args == std::vector<std::string>{"run", "sweep_parse_test", "--run-dir", "d/runs/0023", "--preset", "quick",
                                         "--set", "task.name=\"text\"", "--set", "model.heads=4", "--set",
                                         "model.key_size=16", "--set", "model.attention=\"local(window=16)\"", "--set",
                                         "train.lr=0.01", "--set", "seed=1"});
  CHECK(run_dir_name(23) == "runs/0023");
  CHECK(default_sweep_dir("configs/lra.toml") == std::filesystem::path("sweeps/lra"));
}

TEST_CASE("sweep expansion: no axes gives one run per seed, default seed 0") {
  const auto one = expand_sweep(parse_sweep("experiment = \"sweep_parse_test\"\n", "s.toml"));
  REQUIRE(one.size() == 1);
  CHECK(point_to_json(one[0]) == R"x({"seed":0})x");
  CHECK(expand_sweep(parse_sweep("experiment = \"sweep_parse_test\"\nseeds = [3, 4, 5]\n", "s.toml")).size() == 3);
}

TEST_CASE("sweep file errors name the file, the line and the key") {
  const std::string head = "experiment = \"sweep_parse_test\"\n";
  CHECK(parse_error(head + "worker = 2\n").find("s.toml:2: unknown top-level key 'worker'") != std::string::npos);
  CHECK(parse_error(head + "[zip]\na.b = [1, 2]\n\"model.key_size\" = [1, 2, 3]\n").find(
            "s.toml:4: [zip] lists must have equal lengths: 'model.key_size' has 3 values, 'a.b' has 2") !=
        std::string::npos);
  CHECK(parse_error(head + "[grid]\n\"model.heads\" = []\n").find("s.toml:3: [grid] 'model.heads' is an empty list") !=
        std::string::npos);
  CHECK(parse_error(head + "seeds = []\n").find("s.toml:2: 'seeds' is an empty list") != std::string::npos);
  CHECK(parse_error(head + "seeds = [0, 1, 0]\n").find("s.toml:2: 'seeds' lists seed 0 twice") != std::string::npos);
  CHECK(parse_error(head + "[grid]\n\"model.heads\" = [2, 4, 2]\n").find("s.toml:3: [grid] 'model.heads' lists 2 twice") !=
        std::string::npos);
  CHECK(parse_error(head + "[grid]\n\"model.attention\" = [\"mha\", \"mha\"]\n").find("lists \"mha\" twice") !=
        std::string::npos);
  CHECK(parse_error(head + "[grid]\n\"model.heads\" = [2]\n[zip]\n\"model.heads\" = [4]\n")
            .find("'model.heads' is in [zip] and in [grid] (line 3)") != std::string::npos);
  CHECK(parse_error(head + "[grid]\n\"model.heads\" = 2\n").find("s.toml:3: [grid] 'model.heads' must be a list") !=
        std::string::npos);
  CHECK(parse_error(head + "[grid]\nseed = [1]\n").find("top-level `seeds") != std::string::npos);
  CHECK(parse_error("preset = \"quick\"\n").find("missing `experiment") != std::string::npos);
  CHECK(parse_error(head + "[grid\n").find("s.toml:2:") != std::string::npos);  // TOML syntax
  CHECK(parse_error(head + "[report]\ncolour = \"red\"\n").find("s.toml:3: unknown key 'report.colour'") !=
        std::string::npos);
  CHECK(parse_error(head + "[report]\nx = \"train.lr\"\n").find("report.x = \"train.lr\" is not a swept key") !=
        std::string::npos);
  // Errors found by resolving every run's config against the experiment's schema.
  const std::string unknown = parse_error(head + "[grid]\n\"model.heads\" = [2]\n\"model.atention\" = [\"mha\"]\n");
  CHECK(unknown.find("s.toml:4") != std::string::npos);
  CHECK(unknown.find("model.atention") != std::string::npos);
  const std::string typed = parse_error(head + "[grid]\n\"model.heads\" = [2, \"four\"]\n");
  CHECK(typed.find("s.toml:3") != std::string::npos);
  CHECK(typed.find("model.heads") != std::string::npos);
  CHECK(parse_error(head + "preset = \"huge\"\n").find("has no preset 'huge' (presets: quick)") != std::string::npos);
  CHECK(parse_error("experiment = \"nope\"\n").find("nope") != std::string::npos);
  // Typed: a SweepError is a ConfigError is a ValueError.
  CHECK_THROWS_AS(parse_sweep(head + "worker = 2\n", "s.toml"), SweepError);
  CHECK_THROWS_AS(parse_sweep(head + "worker = 2\n", "s.toml"), ValueError);
}
