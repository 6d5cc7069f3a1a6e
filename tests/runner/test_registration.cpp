// A user's bad experiment or variant (experiment.hpp, nn/attention/registry.hpp, <attnlab/cli.hpp>):
// a name already taken or a schema key twice is refused without a throw (registrations run in
// static initialisers), named in the registration errors, and attnlab::cli::main refuses to run
// with each message on stderr; an experiment that throws while running exits 1 and leaves
// failure.json (status failed, the message) and no summary.json, and a sweep reports that message.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "experiments/runner/experiment.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/registry.hpp"
#include "runner/run_helpers.hpp"

using namespace attnlab;
using namespace attnlab::runner;
using namespace attnlab::testing;
namespace fs = std::filesystem;

namespace {

// An experiment that logs two metrics lines, then throws `what` (or a non-std exception).
Experiment throwing_experiment(const std::string& name, bool std_exception) {
  return {.name = name,
          .description = "tests/runner: throws at step 2",
          .schema = Schema().add("train.steps", 2, "steps"),
          .presets = {},
          .run = [std_exception](const Config&, RunContext& ctx) {
            ctx.metrics(1, {{"loss", 1.0}});
            ctx.metrics(2, {{"loss", 0.5}});
            if (std_exception) fail<ValueError>("the model diverged at step {}", 2);
            throw 42;
          }};
}

const bool registered = register_experiment(throwing_experiment("test_throws", true)) &&
                        register_experiment(throwing_experiment("test_throws_int", false));
// A name taken, from a static initialiser (ordered after the line above: same file).
const bool registered_twice = register_experiment(throwing_experiment("test_throws", false));

// attnlab::cli::main's exit status and what it wrote to stderr.
struct CliResult {
  int status;
  std::string err;
};

CliResult cli_main(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const fs::path err_path = fresh_run_dir("registration_stderr");
  std::fflush(stderr);
  const int saved = dup(2);
  const int fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(fd, 2);
  close(fd);
  const int status = cli::main(int(argv.size()), argv.data());
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string err = read_file(err_path);
  fs::remove(err_path);
  return {status, err};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("registration: a name taken in a static initialiser is recorded before main, not thrown") {
  REQUIRE(registered);
  CHECK_FALSE(registered_twice);  // the program got here: no exception escaped the initialiser
  bool found = false;
  for (const auto& m : registration_errors())
    found = found || m == "register_experiment: experiment 'test_throws' is registered twice (the first "
                          "registration is kept)";
  CHECK(found);
  clear_registration_errors();
}

TEST_CASE("registration: an experiment name already taken is refused, named, and cli::main refuses to run") {
  REQUIRE(registered);
  clear_registration_errors();
  const std::string description = find_experiment("example").description;
  Experiment dup = throwing_experiment("example", true);
  bool ok = true;
  CHECK_NOTHROW(ok = register_experiment(dup));  // as in a static initialiser: no throw
  CHECK_FALSE(ok);
  REQUIRE(registration_errors().size() == 1);
  CHECK(contains(registration_errors()[0], "experiment 'example' is registered twice"));
  CHECK(find_experiment("example").description == description);  // the first registration stays

  CliResult r = cli_main({"attnlab", "list"});
  CHECK(r.status == 2);
  CHECK(contains(r.err, "attnlab: register_experiment: experiment 'example' is registered twice"));

  clear_registration_errors();
  CHECK(cli_main({"attnlab", "version"}).status == 0);
}

TEST_CASE("registration: a schema key added twice refuses the experiment, naming it and the key") {
  clear_registration_errors();
  Experiment e = throwing_experiment("test_schema_twice", true);
  e.schema = Schema().add("train.steps", 2, "steps").add("train.lr", 1e-3, "lr").add("train.steps", 3, "again");
  CHECK_FALSE(register_experiment(e));
  REQUIRE(registration_errors().size() == 1);
  CHECK(registration_errors()[0] ==
        "register_experiment: experiment 'test_schema_twice': Schema: key 'train.steps' added twice");
  const std::string err = error_of([] { find_experiment("test_schema_twice"); });
  CHECK(contains(err, "experiment 'test_schema_twice' was not registered"));
  CHECK(contains(err, "'train.steps' added twice"));
  // `attnlab run` of it: a usage error before anything is written.
  fs::path dir = fresh_run_dir("schema_twice");
  RunResult run = run_in(dir, "test_schema_twice", {}, "");
  CHECK(run.status == kExitUsage);
  CHECK(contains(run.console, "test_schema_twice"));
  CHECK_FALSE(fs::exists(dir));
  clear_registration_errors();
}

TEST_CASE("registration: a variant name already taken is refused, named, and cli::main refuses to run") {
  nn::clear_variant_registration_errors();
  const size_t before = nn::variants().size();
  bool ok = true;
  CHECK_NOTHROW(ok = nn::register_variant({nn::MultiHeadAttention::schema(), nn::MultiHeadAttention::make}));
  CHECK_FALSE(ok);
  CHECK(nn::variants().size() == before);
  REQUIRE(nn::variant_registration_errors().size() == 1);
  CHECK(contains(nn::variant_registration_errors()[0], "a variant named 'mha' already exists"));
  CHECK_FALSE(nn::register_variant({nn::MultiHeadAttention::schema(), nullptr}));  // no factory
  CHECK(nn::variant_registration_errors().size() == 2);

  CliResult r = cli_main({"attnlab", "variants"});
  CHECK(r.status == 2);
  CHECK(contains(r.err, "attnlab: register_variant: a variant named 'mha' already exists"));
  nn::clear_variant_registration_errors();
}

TEST_CASE("run: an experiment that throws exits 1 and leaves failure.json with the message, no summary.json") {
  for (const char* name : {"test_throws", "test_throws_int"}) {
    CAPTURE(name);
    fs::path dir = fresh_run_dir(name);
    RunResult r = run_in(dir, name, {}, "");
    CHECK(r.status == kExitFailed);
    CHECK_FALSE(fs::exists(dir / "summary.json"));
    REQUIRE(fs::exists(dir / "failure.json"));
    auto j = nlohmann::json::parse(read_file(dir / "failure.json"));
    CHECK(j["experiment"] == name);
    CHECK(j["status"] == "failed");
    CHECK(j["step"] == 2);
    const std::string expected = std::string(name) == "test_throws" ? "the model diverged at step 2"
                                                                    : "an exception that is not a std::exception";
    CHECK(j["error"] == expected);
    CHECK(failure_message(dir) == expected);
    CHECK(contains(read_file(dir / "log.txt"), std::string(name) + " failed: " + expected));
    for (const auto& entry : fs::directory_iterator(dir))  // no temporary file left behind
      CHECK(entry.path().filename().string().find(".tmp") == std::string::npos);
    fs::remove_all(dir);
  }
  CHECK(failure_message(fs::path("/nonexistent")) == "");
}

TEST_CASE("sweep: a run whose experiment throws is FAIL with the experiment's message, failed in results.csv") {
  const fs::path dir = fresh_run_dir("sweep_failure");
  fs::create_directories(dir);
  std::ofstream(dir / "fail.toml") << "experiment = \"example\"\npreset = \"quick\"\nseeds = [0]\n"
                                      "[set]\n\"train.steps\" = 2\n\"task.train_size\" = 64\n"
                                      "\"example.min_accuracy\" = 2.0\n";
  const std::string command = fmt::format("'{}/attnlab' sweep '{}' --out '{}' > '{}' 2>&1", ATTNLAB_BINARY_DIR,
                                          (dir / "fail.toml").string(), (dir / "out").string(),
                                          (dir / "sweep.txt").string());
  const int status = std::system(command.c_str());
  CHECK(WEXITSTATUS(status) == 1);
  const std::string out = read_file(dir / "sweep.txt");
  CHECK(contains(out, "FAIL  0000"));
  CHECK(contains(out, "exit status 1: example: val_acc"));
  CHECK(contains(out, "is below example.min_accuracy 2"));
  CHECK(contains(read_file(dir / "out" / "results.csv"), "\n0,failed,"));
  CHECK(contains(failure_message(dir / "out" / "runs" / "0000"), "is below example.min_accuracy 2"));
  CHECK_FALSE(fs::exists(dir / "out" / "runs" / "0000" / "summary.json"));
  fs::remove_all(dir);
}
