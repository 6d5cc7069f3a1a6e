// Every attnlab command through CLI11 and the one exit-code block (experiments/cli/commands.hpp):
// `--help` prints a Usage line and exits 0, an unknown option exits 2 naming it, for every
// subcommand of the built tool; the in-process commands' range and conversion errors; the
// messages for std::bad_alloc and std::stoi-style failures; and the aligned columns of
// `attnlab list`.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <new>
#include <sstream>
#include <stdexcept>

#include <CLI/CLI.hpp>

#include "experiments/cli/commands.hpp"
#include "experiments/cli/run.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/task.hpp"
#include "helpers.hpp"

using namespace attnlab;
namespace fs = std::filesystem;

namespace {

struct Run {
  int status;
  std::string out;  // stdout and stderr together
};

// `build/attnlab args...` (arguments without spaces or quotes).
Run tool(const std::string& args) {
  FILE* p = popen((ATTNLAB_BINARY_DIR "/attnlab " + args + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// The subcommands `attnlab --help` lists.
std::vector<std::string> listed_commands() {
  const Run help = tool("--help");
  REQUIRE(help.status == 0);
  std::istringstream in(help.out.substr(help.out.find("Subcommands:")));
  std::vector<std::string> names;
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::istringstream words(line);
    if (std::string w; words >> w) names.push_back(w);
  }
  return names;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("every command: --help prints its Usage line and exits 0, an unknown option exits 2 naming it") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("attnlab_test_commands_{}", static_cast<long>(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "sweep.toml") << "experiment = \"example\"\n";
  // Arguments that satisfy each command's required ones, so that only the unknown option is wrong.
  const std::map<std::string, std::string> required = {
      {"run", "example"},
      {"list", ""},
      {"sweep", (dir / "sweep.toml").string()},
      {"report", dir.string()},
      {"claims", ""},
      {"analyze", dir.string()},
      {"viz", dir.string()},
      {"check", "mha"},
      {"demo", ""},
      {"variants", ""},
      {"inspect", "--spec mha --d-model 8 --init"},
      {"generate", "--checkpoint lm.safetensors"},
      {"explain", "mha --d-model 8 --seq 4"},
      {"version", ""},
      {"ngram", ""},
  };
  const std::vector<std::string> commands = listed_commands();
  CHECK(commands.size() >= required.size());
  for (const std::string& c : commands) {
    CAPTURE(c);
    REQUIRE_MESSAGE(required.count(c), "a new command needs its required arguments in this test");
    const Run help = tool(c + " --help");
    CHECK(help.status == 0);
    CHECK(contains(help.out, "Usage: attnlab " + c));
    const Run bad = tool(c + " " + required.at(c) + " --no-such-option");
    CAPTURE(bad.out);
    CHECK(bad.status == 2);
    CHECK(bad.out.rfind("attnlab " + c + ": ", 0) == 0);
    CHECK(contains(bad.out, "--no-such-option"));
    CHECK(contains(bad.out, "attnlab " + c + " --help"));
  }
  const Run none = tool("");
  CHECK(none.status == 2);
  CHECK(contains(none.out, "subcommand"));
  fs::remove_all(dir);
}

TEST_CASE("docs/cli.md's command table has a row for every command, naming every option of its --help") {
  std::ifstream f(ATTNLAB_SOURCE_DIR "/docs/cli.md");
  std::map<std::string, std::string> rows;  // command -> its table row
  for (std::string line; std::getline(f, line);)
    if (line.rfind("| `", 0) == 0) rows[line.substr(3, line.find('`', 3) - 3)] = line;
  for (const std::string& c : listed_commands()) {
    CAPTURE(c);
    REQUIRE(rows.count(c));
    // Option lines of CLI11's help start with two spaces and the option ("  --seq INT ...").
    std::istringstream help(tool(c + " --help").out);
    for (std::string line; std::getline(help, line);) {
      if (line.rfind("  -", 0) != 0) continue;
      std::string option = line.substr(2, line.find(' ', 2) - 2);
      option = option.substr(option.find("--"));  // "-h,--help" -> "--help"
      if (option == "--help") continue;
      CAPTURE(option);
      CHECK(contains(rows.at(c), "`" + option + "`"));
    }
  }
}

TEST_CASE("the in-process commands: help, ranges, conversions and exclusive options exit as the tool does") {
  auto run = [](const cli::Command& c, const std::vector<std::string>& args) {
    std::ostringstream out, err;
    const int status = cli::run_command(c, args, out, err);
    return std::tuple<int, std::string, std::string>(status, out.str(), err.str());
  };
  for (const cli::Command* c : cli::attention_commands()) {
    CAPTURE(c->name);
    auto [status, out, err] = run(*c, {"--help"});
    CHECK(status == 0);
    CHECK(contains(out, std::string("Usage: attnlab ") + c->name));
    CHECK(err.empty());
    std::tie(status, out, err) = run(*c, {"--bogus=1"});
    CHECK(status == 2);
    CHECK(contains(err, "--bogus"));
  }
  // Out of range, not an integer, given twice, excluding each other: each names the option.
  auto [status, out, err] = run(cli::kExplainCommand, {"mha", "--d-model", "8", "--seq", "4", "--batch", "0"});
  CHECK(status == 2);
  CHECK(contains(err, "--batch: must be in [1, 65536], got 0"));
  std::tie(status, out, err) = run(cli::kExplainCommand, {"mha", "--d-model", "8x", "--seq", "4"});
  CHECK(status == 2);
  CHECK(contains(err, "--d-model: must be an integer, got '8x'"));
  std::tie(status, out, err) = run(cli::kExplainCommand, {"mha", "--d-model", "8", "--seq", "4", "--seq", "5"});
  CHECK(status == 2);
  CHECK(contains(err, "--seq"));
  std::tie(status, out, err) = run(cli::kDemoCommand, {"--mlp", "--steps", "3"});
  CHECK(status == 2);
  CHECK(contains(err, "--mlp"));
  CHECK(contains(err, "--steps"));
  std::tie(status, out, err) = run(cli::kGenerateCommand, {"--checkpoint", "x", "--temperature", "hot"});
  CHECK(status == 2);
  CHECK(contains(err, "--temperature"));
  CHECK(contains(err, "hot"));
  std::tie(status, out, err) = run(cli::kGenerateCommand, {"--checkpoint", "x", "--prompt", "a", "--prompt-ids", "1"});
  CHECK(status == 2);
  CHECK(contains(err, "--prompt-ids"));
  std::tie(status, out, err) = run(cli::kVariantsCommand, {"mha", "extra"});
  CHECK(status == 2);
  CHECK(contains(err, "extra"));
}

TEST_CASE("exit_status: out of memory and std::stoi failures are explained, never shown raw") {
  CLI::App app{"test", "attnlab explain"};
  auto status_of = [&](auto thrower, std::string& message) {
    std::ostringstream out, err;
    int status = -1;
    try {
      thrower();
    } catch (...) {
      status = cli::exit_status(&app, "explain", {"mha", "--seq", "9"}, out, err);
    }
    message = err.str();
    return status;
  };
  std::string m;
  CHECK(status_of([] { throw std::bad_alloc(); }, m) == 1);
  CHECK(m.rfind("attnlab explain: out of memory running `attnlab explain mha --seq 9`", 0) == 0);
  CHECK_FALSE(contains(m, "std::bad_alloc"));
  CHECK(status_of([] { (void)std::stoi("x"); }, m) == 1);
  CHECK(contains(m, "should be a number"));
  CHECK(contains(m, "`attnlab explain mha --seq 9`"));
  CHECK(status_of([] { (void)std::stoi("99999999999999999999"); }, m) == 1);
  CHECK(contains(m, "a number is too large for its type (std::stoi)"));
  CHECK(status_of([] { (void)std::vector<int>().at(1); }, m) == 1);
  CHECK(contains(m, "internal error ("));
  CHECK_FALSE(contains(m, "number"));
  CHECK(status_of([] { fail<cli::UsageError>("--x: bad"); }, m) == 2);
  CHECK(m == "attnlab explain: --x: bad (try attnlab explain --help)\n");
  CHECK(status_of([] { fail<ValueError>("no such variant"); }, m) == 1);
  CHECK(m == "attnlab explain: no such variant\n");
}

TEST_CASE("attnlab list aligns its columns to the longest name") {
  std::ostringstream out, err;
  REQUIRE(cli::run_list("", out, err) == 0);
  const std::string text = out.str();
  // The presets column starts at one offset on every experiment line, past the longest name.
  size_t longest = 0, column = std::string::npos;
  for (const auto* e : runner::experiments()) longest = std::max(longest, e->name.size());
  for (const auto* e : runner::experiments()) {
    const size_t line = text.find("\n  " + e->name + " ");
    REQUIRE(line != std::string::npos);
    const size_t at = text.find("[presets:", line) - line;
    if (column == std::string::npos) column = at;
    CHECK(at == column);
  }
  CHECK(column >= 1 + 2 + longest + 2);
  // Tasks: the description starts at one offset too.
  size_t task_column = std::string::npos;
  const size_t tasks_at = text.find("\ntasks (");  // an experiment may share a task's name (recall)
  REQUIRE(tasks_at != std::string::npos);
  for (const auto& t : runner::tasks()) {
    const size_t line = text.find("\n  " + t.name + " ", tasks_at);
    REQUIRE(line != std::string::npos);
    const size_t at = text.find(t.description, line) - line;
    if (task_column == std::string::npos) task_column = at;
    CHECK(at == task_column);
  }
  // One experiment's keys: the type column lines up across keys of every length.
  std::ostringstream keys;
  REQUIRE(cli::run_list("classify", keys, err) == 0);
  std::istringstream in(keys.str());
  std::set<size_t> type_columns;
  for (std::string line; std::getline(in, line);)
    for (const char* type : {"  int  ", "  string  ", "  float  ", "  bool  "})
      if (const size_t at = line.find(type); at != std::string::npos && line.rfind("  ", 0) == 0) type_columns.insert(at);
  CHECK(type_columns.size() == 1);
}
