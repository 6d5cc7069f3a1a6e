// `attnlab analyze` and `attnlab viz` on tiny runs trained here through run_experiment: the files
// they write, their numbers against the model's shape, errors naming the run directory, and the
// HTML page rendered by a headless Chromium (Debian's `chromium`, installed by
// cmake/install-deps.sh).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "experiments/cli/heads_commands.hpp"
#include "experiments/plot/png.hpp"
#include "experiments/runner/experiment.hpp"

namespace {

namespace fs = std::filesystem;
using namespace attnlab;
using nlohmann::json;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path scratch(const std::string& name) {
  fs::path d = fs::temp_directory_path() / fmt::format("attnlab_test_analyze_{}_{}", name, long(getpid()));
  fs::remove_all(d);
  return d;
}

// A few training steps of a small model: enough for a complete run directory.
fs::path tiny_run(const std::string& experiment, std::vector<std::string> sets, const std::string& name = "") {
  const fs::path dir = scratch(name.empty() ? experiment : name);
  sets.insert(sets.end(), {"train.steps=4", "train.eval_every=4", "model.d_model=16", "model.ffn_hidden=32"});
  std::ostringstream console;
  runner::RunRequest r{experiment, "quick", "", sets, dir, "test"};
  REQUIRE_MESSAGE(runner::run_experiment(r, console, false) == 0, console.str());
  return dir;
}

fs::path listops_run(const std::string& attention = "mha(heads=2)", const std::string& name = "") {  // 2 layers
  return tiny_run("classify", {"task.train_size=64", "task.val_size=24", "task.test_size=8", "task.length=40",
                               "model.attention=" + attention}, name);
}
fs::path lm_run() {
  return tiny_run("lm", {"task.length=24", "train.batch_size=4", "eval.batches=1"});
}

json analysis_of(const fs::path& run, int64_t examples) {
  cli::AnalyzeOptions o;
  o.run_dir = run;
  o.examples = examples;
  o.batch = 8;
  std::ostringstream out, err;
  REQUIRE_MESSAGE(cli::run_analyze(o, out, err) == 0, err.str());
  CHECK(out.str().find("### layer 1") != std::string::npos);  // the role table is printed
  return json::parse(read(run / "analysis" / "analysis.json"));
}

// Every layer and head of a (layers x heads) model appears once in roles.md and analysis.json.
void check_every_head(const fs::path& run, const json& j, int layers, int heads) {
  REQUIRE(j["layers"].size() == size_t(layers));
  const std::string md = read(run / "analysis" / "roles.md");
  for (int l = 0; l < layers; ++l) {
    REQUIRE(j["layers"][l]["heads"].size() == size_t(heads));
    const size_t at = md.find(fmt::format("### layer {}", l));
    REQUIRE(at != std::string::npos);
    for (int h = 0; h < heads; ++h) {
      CHECK(md.find(fmt::format("\n| {} |", h), at) != std::string::npos);
      const json& e = j["layers"][l]["heads"][h];
      CHECK(e["confidence"].get<double>() > 0);
      CHECK(e["confidence"].get<double>() <= 1.0 + 1e-9);
      CHECK(e["importance"].is_number());
      CHECK(e["relevance"].is_number());
      CHECK_FALSE(e["role"].get<std::string>().empty());
      // Token models: previous-token and induction scores on repeated random sequences.
      CHECK(e["previous_token_mass"].is_number());
      CHECK(e["induction_mass"].is_number());
      CHECK(e["induction"].is_boolean());
    }
  }
  CHECK(j["baselines"]["repeated_sequences"] == 16);
  CHECK(j["baselines"]["induction_uniform"].get<double>() > 0);
  CHECK(j.contains("best_induction"));
  CHECK(md.find("| previous token | induction |") != std::string::npos);
  CHECK(md.find("Induction (repeated random sequence): best head") != std::string::npos);
  for (const char* png : {"confidence.png", "importance.png", "relevance.png", "maps/layer1/attention_b1_h1.png"}) {
    plot::Image im = plot::read_png((run / "analysis" / png).string());
    CHECK_MESSAGE(im.width > 20, png);
    CHECK_MESSAGE(im.height > 20, png);
  }
}

TEST_CASE("analyze: a tiny ListOps run gets a role table for every head, heatmaps, maps and JSON") {
  const fs::path run = listops_run();
  const json j = analysis_of(run, 24);
  CHECK(j["examples"] == 24);
  CHECK(j["task"] == "listops");
  CHECK(j["importance"] == "computed");
  CHECK(j["relevance"] == "computed");
  check_every_head(run, j, 2, 2);
  // Structural statistics against the fixed-offset baseline (a share of tokens).
  const double base = j["baselines"]["structural_fixed_offset"].get<double>();
  CHECK(base > 0);
  CHECK(base < 1);
  REQUIRE(j.contains("best_structural"));
  CHECK(j["best_structural"]["margin"].get<double>() ==
        doctest::Approx(j["best_structural"]["share"].get<double>() - base));
  CHECK(j["baselines"]["rare_uniform"].is_null());  // rare tokens are a language-model statistic
  CHECK(j["layers"][0]["heads"][0]["class_mass"].contains("operator"));
  // Two examples' maps per head, padding cut: maps of different examples may differ in size.
  CHECK(j["attention_maps"] == 2 * 2 * 2);
  CHECK(fs::exists(run / "analysis" / "maps" / "layer0" / "attention_b0_h0.png"));
  // More examples than the split holds: all of them, with a note.
  cli::AnalyzeOptions o;
  o.run_dir = run;
  o.examples = 1000;
  o.out = run / "again";
  std::ostringstream out, err;
  REQUIRE(cli::run_analyze(o, out, err) == 0);
  CHECK(out.str().find("using 24") != std::string::npos);
  CHECK(json::parse(read(run / "again" / "analysis.json"))["examples"] == 24);
  fs::remove_all(run);
}

TEST_CASE("analyze: a tiny char-LM run measures rare-token mass against uniform attention") {
  const fs::path run = lm_run();
  const json j = analysis_of(run, 6);
  CHECK(j["task"] == "fortunes");
  check_every_head(run, j, 2, 4);
  const double uniform = j["baselines"]["rare_uniform"].get<double>();
  CHECK(uniform > 0);
  CHECK(uniform < 1);
  REQUIRE(j.contains("best_rare"));
  CHECK(j["best_rare"]["mass"].get<double>() >= 0);
  CHECK(j["baselines"]["structural_fixed_offset"].is_null());
  CHECK(read(run / "analysis" / "roles.md").find("rarest visible characters") != std::string::npos);
  fs::remove_all(run);
}

TEST_CASE("analyze: a char-LM without learned positions (model.positions = none) gets its role table") {
  const fs::path run = tiny_run("lm", {"task.length=24", "train.batch_size=4", "eval.batches=1", "model.positions=none"});
  const json j = analysis_of(run, 6);
  check_every_head(run, j, 2, 4);
  fs::remove_all(run);
}

TEST_CASE("analyze and viz: a missing or incomplete run directory is named in the error") {
  const fs::path dir = scratch("broken");
  auto errors = [](const fs::path& d) {
    cli::AnalyzeOptions a;
    a.run_dir = d;
    cli::VizOptions v;
    v.run_dir = d;
    std::ostringstream out, e1, e2;
    CHECK(cli::run_analyze(a, out, e1) == 1);
    CHECK(cli::run_viz(v, out, e2) == 1);
    return std::make_pair(e1.str(), e2.str());
  };
  auto [a1, v1] = errors(dir);
  CHECK(a1.find("attnlab analyze: " + dir.string() + ": no such run directory") == 0);
  CHECK(v1.find("attnlab viz: " + dir.string()) == 0);
  fs::create_directories(dir);
  std::ofstream(dir / "meta.json") << R"({"experiment": "classify"})";
  auto [a2, v2] = errors(dir);
  CHECK(a2.find((dir / "config.toml").string() + ": missing") != std::string::npos);
  std::ofstream(dir / "config.toml") << "seed = 0\n";
  auto [a3, v3] = errors(dir);
  CHECK(a3.find((dir / "checkpoint.safetensors").string() + ": missing (an incomplete run") != std::string::npos);
  CHECK(v3.find((dir / "checkpoint.safetensors").string()) != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("analyze: a variant without attention probabilities is named with its layer") {
  // fnet mixes tokens by Fourier transforms: no probabilities (and no padding mask, so recall).
  const fs::path run = tiny_run("example", {"task.train_size=32", "task.val_size=8", "task.test_size=8",
                                            "model.attention=fnet"});
  cli::AnalyzeOptions o;
  o.run_dir = run;
  o.examples = 8;
  std::ostringstream out, err;
  CHECK(cli::run_analyze(o, out, err) == 1);
  CHECK(err.str().find("layer 0 (fnet") != std::string::npos);
  fs::remove_all(run);
}

// The page's embedded data (the JSON between the data script tags).
json page_data(const std::string& html) {
  const std::string open = R"(<script type="application/json" id="data">)";
  const size_t a = html.find(open), b = html.find("</script>", a);
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  return json::parse(html.substr(a + open.size(), b - a - open.size()));
}

TEST_CASE("viz: the page is self-contained and bounded, and options out of range are refused") {
  const fs::path run = lm_run();
  cli::VizOptions o;
  o.run_dir = run;
  o.examples = 2;
  o.max_tokens = 16;
  std::ostringstream out, err;
  REQUIRE_MESSAGE(cli::run_viz(o, out, err) == 0, err.str());
  const std::string html = read(run / "viz.html");
  for (const char* bad : {"http://", "https://", "<link", " src=", "@import", "url("})
    CHECK_MESSAGE(html.find(bad) == std::string::npos, bad);
  const json d = page_data(html);
  REQUIRE(d["examples"].size() == 2);
  REQUIRE(d["runs"].size() == 1);
  const json& r = d["runs"][0];
  CHECK(r["layers"] == json::array({4, 4}));
  CHECK(r["run"]["causal"] == true);
  CHECK(r["summary"].is_null());  // no analysis.json yet
  REQUIRE(r["maps"].size() == 2);
  for (size_t e = 0; e < 2; ++e) {
    REQUIRE(d["examples"][e]["tokens"].size() == 16);  // windows cut to --max-tokens
    REQUIRE(r["maps"][e].size() == 2);
    // 16 x 16 weights of 2 bytes, base64.
    CHECK(r["maps"][e][1][3].get<std::string>().size() == (16 * 16 * 2 + 2) / 3 * 4);
  }
  CHECK(html.size() < 100 * 1024);
  for (auto [examples, tokens] : {std::pair<int64_t, int64_t>{9, 16}, {0, 16}, {2, 1}, {2, 257}}) {
    cli::VizOptions bad = o;
    bad.examples = examples;
    bad.max_tokens = tokens;
    std::ostringstream e;
    CHECK(cli::run_viz(bad, out, e) == 1);
    CHECK(e.str().find(examples < 1 || examples > 8 ? "--examples" : "--max-tokens") != std::string::npos);
  }
  fs::remove_all(run);
}

// The DOM of `page` after its scripts ran, by headless Chromium's --dump-dom: no network, a
// throwaway profile under `scratch_dir`.
std::string rendered_dom(const fs::path& scratch_dir, const fs::path& page) {
  REQUIRE_MESSAGE(std::system("command -v chromium >/dev/null 2>&1") == 0,
                  "chromium is not installed: run sh cmake/install-deps.sh (Debian package chromium)");
  const fs::path dom = scratch_dir / "dom.html", log = scratch_dir / "chromium.log";
  const std::string cmd = fmt::format(
      "timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync --user-data-dir='{}' "
      "--dump-dom 'file://{}' > '{}' 2> '{}'",
      (scratch_dir / "profile").string(), fs::absolute(page).string(), dom.string(), log.string());
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, read(log));
  return read(dom);
}

TEST_CASE("viz: headless Chromium renders the map, a grid of a layer's heads, a colour bar and the head summary") {
  const fs::path run = listops_run();
  analysis_of(run, 8);
  cli::VizOptions o;
  o.run_dir = run;
  std::ostringstream out, err;
  REQUIRE_MESSAGE(cli::run_viz(o, out, err) == 0, err.str());
  const json d = page_data(read(run / "viz.html"));
  const size_t n = d["examples"][0]["tokens"].size();
  REQUIRE(n > 2);
  REQUIRE(d["runs"][0]["summary"]["heads"].size() == 4);

  const std::string html = rendered_dom(run, run / "viz.html");
  std::smatch m;
  REQUIRE_MESSAGE(std::regex_search(html, m, std::regex(R"(id="status"[^>]*>rendered (\d+) cells<)")), html.substr(0, 2000));
  CHECK(std::stoul(m[1]) == n * n);
  // The grid: every head of layer 0 at once, a button per layer, a drawn colour bar.
  const std::regex cell(R"(<div class="cell)");
  CHECK(std::distance(std::sregex_iterator(html.begin(), html.end(), cell), std::sregex_iterator()) == 2);
  CHECK(html.find("grid: 2 maps (every head of layer 0, 1 run)") != std::string::npos);
  const std::regex layer(R"(<button class="layer)");
  CHECK(std::distance(std::sregex_iterator(html.begin(), html.end(), layer), std::sregex_iterator()) == 2);
  CHECK(std::regex_search(html, std::regex(R"(id="colourbar"[^>]*data-max="0\.\d+|id="colourbar"[^>]*data-max="1")")));
  CHECK(html.find("From analysis.json (8 examples") != std::string::npos);
  const std::regex row(R"(<tr data-run="0" data-layer=)");
  CHECK(std::distance(std::sregex_iterator(html.begin(), html.end(), row), std::sregex_iterator()) == 4);
  fs::remove_all(run);
}

TEST_CASE("viz: two LM runs side by side at the default 64 tokens label both axes of the enlarged maps") {
  const fs::path a = tiny_run("lm", {"task.length=64", "train.batch_size=4", "eval.batches=1"}, "lm64_a");
  const fs::path b = tiny_run("lm", {"task.length=64", "train.batch_size=4", "eval.batches=1", "seed=1"}, "lm64_b");
  cli::VizOptions o;
  o.run_dir = a;
  o.other = b;
  o.examples = 1;
  o.out = a / "both.html";
  std::ostringstream out, err;
  REQUIRE_MESSAGE(cli::run_viz(o, out, err) == 0, err.str());
  const json d = page_data(read(o.out));
  const size_t n = d["examples"][0]["tokens"].size();
  REQUIRE(n == 64);  // --max-tokens' default
  const std::string html = rendered_dom(a, o.out);
  std::smatch m;
  REQUIRE_MESSAGE(std::regex_search(html, m, std::regex(R"re(id="status"[^>]*data-labels="(\d+)")re")), html.substr(0, 2000));
  CHECK(std::stoul(m[1]) == 2 * 2 * n);  // queries and keys, in both runs' maps
  for (const fs::path& p : {a, b}) fs::remove_all(p);
}

TEST_CASE("analyze: associative recall measures the retrieval mass of every head") {
  const fs::path run = tiny_run("classify", {"task.name=recall", "task.train_size=64", "task.val_size=16",
                                             "task.test_size=8", "model.attention=mha(heads=2)"}, "recall");
  const json j = analysis_of(run, 16);
  CHECK(j["baselines"]["retrieval_queries"] == 16);  // every recall query's key is among its pairs
  CHECK(j["thresholds"]["retrieval_mass"] == 0.5);
  for (const json& l : j["layers"])
    for (const json& h : l["heads"]) {
      CHECK(h["retrieval_mass"].get<double>() > 0);
      CHECK(h["retrieval_mass"].get<double>() < 1);
    }
  CHECK(j.contains("best_retrieval"));
  CHECK(read(run / "analysis" / "roles.md").find("Retrieval (associative recall): best head") != std::string::npos);
  fs::remove_all(run);
}

TEST_CASE("viz: two runs side by side on the same examples; runs of another task are refused") {
  const fs::path a = listops_run(), b = listops_run("mha(heads=4)", "classify_b");
  cli::VizOptions o;
  o.run_dir = a;
  o.other = b;
  o.examples = 2;
  o.out = a / "both.html";
  std::ostringstream out, err;
  REQUIRE_MESSAGE(cli::run_viz(o, out, err) == 0, err.str());
  const json d = page_data(read(o.out));
  REQUIRE(d["runs"].size() == 2);
  CHECK(d["runs"][0]["layers"] == json::array({2, 2}));
  CHECK(d["runs"][1]["layers"] == json::array({4, 4}));
  CHECK(d["runs"][1]["title"] == b.string());
  REQUIRE(d["examples"].size() == 2);
  for (const json& r : d["runs"]) {
    CHECK(r["maps"].size() == 2);  // one set of maps per shared example
    CHECK(r["notes"][0].get<std::string>().find("predicted ") == 0);
  }
  const std::string html = rendered_dom(a, o.out);
  CHECK(html.find("grid: 6 maps (every head of layer 0, 2 runs side by side)") != std::string::npos);
  const std::regex cell(R"(<div class="cell)");
  CHECK(std::distance(std::sregex_iterator(html.begin(), html.end(), cell), std::sregex_iterator()) == 6);

  const fs::path c = tiny_run("classify", {"task.train_size=64", "task.val_size=24", "task.test_size=8", "task.length=30",
                                           "model.attention=mha(heads=2)"}, "classify_c");
  o.other = c;
  std::ostringstream e;
  CHECK(cli::run_viz(o, out, e) == 1);
  CHECK(e.str().find("differ in task.length (40 vs 30)") != std::string::npos);
  for (const fs::path& p : {a, b, c}) fs::remove_all(p);
}

}  // namespace
