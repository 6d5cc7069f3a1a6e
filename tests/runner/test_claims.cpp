// experiments/runner/claims: claims.toml, the verdict rule, the derivation of a row from a study's
// committed data, the registration check against git, the README block, and that the committed
// claims.csv, claims.md and README block are what the committed studies give.
#include <fstream>
#include <sstream>

#include "experiments/runner/claims.hpp"
#include "experiments/runner/experiment.hpp"
#include "helpers.hpp"
#include "runner/run_helpers.hpp"

using namespace attnlab;
using namespace attnlab::runner;
using attnlab::testing::fresh_run_dir;
using attnlab::testing::read_file;
namespace fs = std::filesystem;

namespace {

JudgedRef judged(const std::string& ref, const std::string& verdict, std::vector<std::string> dense = {}) {
  JudgedRef j;
  j.ref = ref;
  j.verdict = verdict;
  j.why = "because";
  j.dense = std::move(dense);
  return j;
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// A study of two configurations over three seeds: b's metric is 0.1 above a's on every seed
// (up to a small spread), so "a better b" holds when lower is better.
const std::string kSweep = R"toml(experiment = "lm"
seeds = [0, 1, 2]
[grid]
"model.attention" = ["mha(heads=4)", "diff(heads=4)"]
[report]
metric = "val_bpc"
[[report.expect]]
name = "diff beats mha"
a = { "model.attention" = "diff(heads=4)" }
b = { "model.attention" = "mha(heads=4)" }
relation = "better"
[[report.expect]]
name = "mha below 3"
a = { "model.attention" = "mha(heads=4)" }
relation = "below"
value = 3.0
)toml";

std::string results(const std::string& start_time) {
  std::string csv = "id,status,model.attention,seed,seconds,val_bpc,start_time\n";
  const double mha[] = {2.50, 2.52, 2.51}, diff[] = {2.40, 2.43, 2.41};
  for (int s = 0; s < 3; ++s) csv += fmt::format("{},complete,mha(heads=4),{},60,{},{}\n", s, s, mha[s], start_time);
  for (int s = 0; s < 3; ++s)
    csv += fmt::format("{},complete,\"diff(heads=4)\",{},60,{},{}\n", 3 + s, s, diff[s], start_time);
  return csv;
}

// A repository with one study whose sweep file is committed (registered) and whose results are
// written with the given start time.
fs::path make_repo(const std::string& name, const std::string& start_time, const std::string& claim_extra = "") {
  const fs::path root = fresh_run_dir(name);
  write(root / "experiments/sweeps/s.toml", kSweep);
  write(root / "README.md", "# x\n<!-- claims:begin -->\n<!-- claims:end -->\n");
  const std::string git = "git -C '" + root.string() + "' ";
  REQUIRE(command_output(git + "init -q && " + git + "add -A && GIT_COMMITTER_DATE=2026-01-01T00:00:00Z " + git +
                         "-c user.name=t -c user.email=t@t commit -qm register --date=2026-01-01T00:00:00Z")
              .has_value());
  const std::string commit = *command_output(git + "rev-parse HEAD");
  write(root / "docs/results/study/sweep.toml", kSweep);
  write(root / "docs/results/study/results.csv", results(start_time));
  write(root / "docs/results/study/claims.toml",
        "[[sweep]]\nfile = \"experiments/sweeps/s.toml\"\nregistered = \"" + commit +
            "\"\n[[claim]]\ntext = \"diff helps\"\nsource = \"a paper\"\nprimary = [\"diff beats mha\"]\ncontrol = "
            "[\"mha below 3\"]\n" +
            claim_extra);
  return root;
}

}  // namespace

TEST_CASE("claims: the verdict rule, clause by clause") {
  ClaimSpec c;
  c.text = "x";
  const auto v = [&](std::vector<JudgedRef> p, std::vector<JudgedRef> s, std::vector<JudgedRef> k) {
    return derive_verdict(c, p, s, k).word;
  };
  CHECK(v({judged("p", "holds")}, {}, {}) == "reproduced");
  CHECK(v({judged("p", "holds")}, {judged("s", "holds")}, {judged("k", "holds")}) == "reproduced");
  CHECK(v({judged("p", "holds")}, {judged("s", "inconclusive")}, {}) == "partially");
  CHECK(v({judged("p", "holds")}, {judged("s", "contradicted")}, {}) == "partially");
  CHECK(v({judged("p", "holds")}, {judged("s", "holds", {"bigbird"})}, {}) == "partially");
  CHECK(v({judged("p", "holds"), judged("q", "inconclusive")}, {}, {}) == "inconclusive");
  CHECK(v({judged("p", "holds", {"bigbird"})}, {}, {}) == "inconclusive");
  CHECK(v({judged("p", "inconclusive"), judged("q", "contradicted")}, {}, {}) == "not_reproduced");
  // A control that does not hold withdraws any verdict, a contradiction too.
  CHECK(v({judged("p", "contradicted")}, {}, {judged("k", "inconclusive")}) == "inconclusive");
  CHECK(v({judged("p", "holds")}, {}, {judged("k", "contradicted")}) == "inconclusive");
  CHECK(derive_verdict(c, {judged("p", "holds")}, {}, {judged("k", "contradicted")}).why.find("control 'k'") !=
        std::string::npos);
  c.independent_seeds = false;
  c.seeds_note = "one trained model";
  CHECK(v({judged("p", "holds")}, {}, {}) == "inconclusive");
  CHECK(derive_verdict(c, {judged("p", "holds")}, {}, {}).why.find("one trained model") != std::string::npos);
}

TEST_CASE("claims: claims.toml errors name the file, the line and the key") {
  auto bad = [](const std::string& text, const std::string& message) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(parse_study_claims(text, "c.toml", "s"), doctest::Contains(message.c_str()), ValueError);
  };
  bad("[[claim]]\ntext = \"x\"\n", "c.toml:1: claim 'x' needs primary");
  bad("[[claim]]\ntext = \"x\"\nprimary = [\"a\"]\nverdict = \"reproduced\"\n", "c.toml:4: unknown key 'verdict'");
  bad("[[claim]]\ntext = \"a | b\"\nprimary = [\"a\"]\n", "one line without '|'");
  bad("[[claim]]\ntext = \"a\\nb\"\nprimary = [\"a\"]\n", "one line without '|'");
  bad("[[claim]]\ntext = \"<!-- claims:end -->\"\nprimary = [\"a\"]\n", "must not contain '<!--'");
  bad("[[claim]]\ntext = \"x\"\nprimary = [\"a\"]\nindependent_seeds = false\n", "needs seeds_note");
  bad("[[sweep]]\nfile = \"s.toml\"\n", "needs file (the sweep file as committed) and registered");
  bad("[[sweep]]\nfile = \"s.toml\"\nregistered = \"HEAD\"\n", "is not a commit id");
  bad("verdict = \"reproduced\"\n", "c.toml:1: unknown key 'verdict'");
  const StudyClaims ok = parse_study_claims(
      "[[sweep]]\nfile = \"s.toml\"\nregistered = \"abcdef1\"\n[[claim]]\ntext = \"x\"\nprimary = [\"a\", \"b\"]\n"
      "secondary = [\"sweep_fit.toml#c\"]\n",
      "c.toml", "s");
  REQUIRE(ok.claims.size() == 1);
  CHECK(ok.claims[0].primary == std::vector<std::string>{"a", "b"});
  CHECK(ok.sweeps[0].copy == "sweep.toml");
}

TEST_CASE("claims: a row is derived from the study's runs, and registration is checked against git") {
  SUBCASE("expectations committed before every run: reproduced, registered before the runs") {
    const fs::path root = make_repo("claims_before", "2026-02-01T00:00:00Z");
    const auto rows = derive_claims(root, /*git=*/true);
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].verdict.word == "reproduced");
    CHECK(rows[0].seeds == 3);
    CHECK(rows[0].primary[0].interval.mean == doctest::Approx(-0.0967).epsilon(1e-3));
    CHECK(rows[0].registration.rfind("registered before the runs", 0) == 0);
    CHECK(rows[0].run_minutes == doctest::Approx(6));
    fs::remove_all(root);
  }
  SUBCASE("a run that started before the registering commit: registered after the runs") {
    const fs::path root = make_repo("claims_after", "2025-12-31T00:00:00Z");
    const auto rows = derive_claims(root, true);
    CHECK(rows[0].registration == fmt::format("registered after the runs: 6 of 6 runs started before {}",
                                              rows[0].registration.substr(rows[0].registration.size() - 7)));
    fs::remove_all(root);
  }
  SUBCASE("an expectation changed after the registering commit: not registered") {
    const fs::path root = make_repo("claims_changed", "2026-02-01T00:00:00Z");
    std::string sweep = kSweep;
    sweep.replace(sweep.find("value = 3.0"), 11, "value = 2.6");
    write(root / "docs/results/study/sweep.toml", sweep);
    const auto rows = derive_claims(root, true);
    CHECK(rows[0].registration.find("not registered: 'mha below 3' differs") == 0);
    fs::remove_all(root);
  }
  SUBCASE("a contradicted primary gives not reproduced; seeds from one training give inconclusive") {
    const fs::path root = make_repo("claims_rule", "2026-02-01T00:00:00Z");
    std::string csv = results("2026-02-01T00:00:00Z");
    // mha now better than diff on every seed: "diff beats mha" is contradicted.
    for (const std::string from : {"2.4,", "2.43,", "2.41,"}) csv.replace(csv.find(from), from.size() - 1, "2.6");
    write(root / "docs/results/study/results.csv", csv);
    CHECK(derive_claims(root, true)[0].verdict.word == "not_reproduced");
    fs::remove_all(root);
    const fs::path root2 = make_repo("claims_seeds", "2026-02-01T00:00:00Z",
                                     "independent_seeds = false\nseeds_note = \"one trained model\"\n");
    CHECK(derive_claims(root2, true)[0].verdict.word == "inconclusive");
    fs::remove_all(root2);
  }
  SUBCASE("a claim naming an expectation the sweep lacks is an error naming both") {
    const fs::path root = make_repo("claims_missing", "2026-02-01T00:00:00Z");
    write(root / "docs/results/study/claims.toml",
          "[[sweep]]\nfile = \"experiments/sweeps/s.toml\"\nregistered = \"abcdef1\"\n[[claim]]\ntext = \"x\"\n"
          "primary = [\"diff beats everything\"]\n");
    CHECK_THROWS_WITH_AS(derive_claims(root, false), doctest::Contains("no [[report.expect]] named 'diff beats everything'"),
                         ValueError);
    fs::remove_all(root);
  }
}

TEST_CASE("claims: a hand edit of claims.csv, claims.md or the README table fails the check, --write restores them") {
  const fs::path root = make_repo("claims_sync", "2026-02-01T00:00:00Z");
  std::ostringstream out;
  CHECK_FALSE(sync_claims(root, /*check=*/true, out));  // nothing written yet
  CHECK(sync_claims(root, false, out));
  CHECK(sync_claims(root, true, out));
  const fs::path csv = root / "docs/results/claims.csv";
  std::string text = read_file(csv);
  CHECK(text.find(",reproduced,") != std::string::npos);
  text.replace(text.find(",reproduced,"), 12, ",inconclusive,");
  write(csv, text);
  std::ostringstream why;
  CHECK_FALSE(sync_claims(root, true, why));
  CHECK(why.str().find("claims.csv is not what the studies' data give") != std::string::npos);
  CHECK(sync_claims(root, false, out));
  CHECK(read_file(root / "README.md").find("**reproduced**") != std::string::npos);
  fs::remove_all(root);
}

TEST_CASE("claims: the README block is replaced between whole marker lines only") {
  const std::string doc = "# x\n<!-- claims:begin -->\nold\n<!-- claims:end -->\ntail\n";
  CHECK(replace_claims_block(doc, "new\n", "R.md") == "# x\n<!-- claims:begin -->\nnew\n<!-- claims:end -->\ntail\n");
  // Writing twice gives the same text.
  CHECK(replace_claims_block(replace_claims_block(doc, "new\n", "R.md"), "new\n", "R.md") ==
        replace_claims_block(doc, "new\n", "R.md"));
  // Markers inside a line of text are not markers: the user's text is never taken for the block.
  CHECK_THROWS_WITH_AS(replace_claims_block("keep <!-- claims:begin --><!-- claims:end -->\n", "t", "R.md"),
                       doctest::Contains("R.md: expected one line '<!-- claims:begin -->'"), ValueError);
  CHECK_THROWS_AS(replace_claims_block("<!-- claims:begin -->\n<!-- claims:begin -->\n<!-- claims:end -->\n", "t", "R.md"),
                  ValueError);
  CHECK_THROWS_AS(replace_claims_block("# x\n", "t", "R.md"), ValueError);
}

TEST_CASE("claims: the committed claims.csv, claims.md and README block are what the studies' data give") {
  std::ostringstream out;
  const bool same = sync_claims(ATTNLAB_SOURCE_DIR, /*check=*/true, out);
  INFO(out.str());
  CHECK(same);
}
