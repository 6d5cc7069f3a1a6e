// experiments/runner/stats: Student-t intervals, paired differences and the verdict rules.
#include <cmath>
#include <limits>
#include <vector>

#include "experiments/runner/stats.hpp"
#include "experiments/runner/sweep.hpp"
#include "helpers.hpp"

using namespace attnlab;
using namespace attnlab::runner;

TEST_CASE("stats: t quantiles from the table and the expansion") {
  CHECK(t_quantile_975(1) == doctest::Approx(12.706));
  CHECK(t_quantile_975(2) == doctest::Approx(4.303));
  CHECK(t_quantile_975(30) == doctest::Approx(2.042));
  // Beyond the table: t_{0.975, 40} = 2.021, t_{0.975, 120} = 1.980 (tables), -> 1.960.
  CHECK(t_quantile_975(40) == doctest::Approx(2.021).epsilon(1e-3));
  CHECK(t_quantile_975(120) == doctest::Approx(1.980).epsilon(1e-3));
  CHECK(t_quantile_975(100000) == doctest::Approx(1.95996).epsilon(1e-4));
  CHECK_THROWS_AS(t_quantile_975(0), ValueError);
}

TEST_CASE("stats: mean interval skips non-finite values and needs two for a width") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> xs = {1.0, 2.0, nan, 3.0};
  const Interval in = mean_interval(xs);
  CHECK(in.n == 3);
  CHECK(in.mean == doctest::Approx(2.0));
  CHECK(in.sd == doctest::Approx(1.0));
  CHECK(in.half_width() == doctest::Approx(4.303 / std::sqrt(3.0)));
  const std::vector<double> one = {5.0};
  CHECK(mean_interval(one).n == 1);
  CHECK(std::isnan(mean_interval(one).low));
  CHECK(mean_interval(std::vector<double>{}).n == 0);
}

TEST_CASE("stats: paired differences remove the shared seed effect") {
  // b varies a lot between seeds; a = b + 0.1 on every seed: the pair interval is a point.
  const std::vector<double> b = {0.2, 0.9, 0.5}, a = {0.3, 1.0, 0.6};
  const Interval d = paired_interval(a, b);
  CHECK(d.n == 3);
  CHECK(d.mean == doctest::Approx(0.1));
  CHECK(d.low == doctest::Approx(0.1));
  CHECK_THROWS_WITH_AS(paired_interval(a, std::vector<double>{1.0}), doctest::Contains("3 values against 1"), ValueError);
}

TEST_CASE("stats: verdicts for each relation, both directions of better") {
  const Interval neg{-0.2, 0.05, -0.3, -0.1, 3}, pos{0.2, 0.05, 0.1, 0.3, 3}, wide{0.0, 0.5, -1.0, 1.0, 3};
  const Interval one{0.5, std::nan(""), std::nan(""), std::nan(""), 1};
  CHECK(judge(Relation::Better, neg, /*lower_is_better=*/true, 0, 0).word == "holds");
  CHECK(judge(Relation::Better, neg, false, 0, 0).word == "contradicted");
  CHECK(judge(Relation::Better, pos, false, 0, 0).word == "holds");
  CHECK(judge(Relation::Better, wide, false, 0, 0).word == "inconclusive");
  CHECK(judge(Relation::Better, one, false, 0, 0).word == "inconclusive");
  CHECK(judge(Relation::Equal, pos, false, 0.5, 0).word == "holds");
  CHECK(judge(Relation::Equal, pos, false, 0.05, 0).word == "contradicted");
  CHECK(judge(Relation::Equal, pos, false, 0.2, 0).word == "inconclusive");
  CHECK(judge(Relation::Below, pos, false, 0, 0.35).word == "holds");
  CHECK(judge(Relation::Above, pos, false, 0, 0.35).word == "contradicted");
  CHECK(judge(Relation::Above, pos, false, 0, 0.2).word == "inconclusive");
  CHECK_THROWS_WITH_AS(relation_from("beats"), doctest::Contains("better, equal, below or above, got 'beats'"), ValueError);
}

TEST_CASE("stats: [[report.expect]] and report.baseline in a sweep file, and their errors") {
  const std::string head = "experiment = \"x\"\nseeds = [0, 1]\n[grid]\n\"model.heads\" = [2, 4]\n";
  const SweepSpec ok = parse_sweep(head + R"x([report]
metric = "val_acc"
baseline = { "model.heads" = 2 }
[[report.expect]]
name = "four beat two"
a = { "model.heads" = 4 }
b = { "model.heads" = 2 }
relation = "better"
[[report.expect]]
name = "two above chance"
metric = "test_acc"
a = { "model.heads" = 2 }
relation = "above"
value = 0.1
)x", "s.toml");
  REQUIRE(ok.report.expect.size() == 2);
  CHECK(ok.report.baseline.size() == 1);
  CHECK(ok.report.expect[1].metric == "test_acc");
  CHECK(ok.report.expect[1].relation == Relation::Above);
  auto bad = [&](const std::string& body, const std::string& message) {
    CAPTURE(body);
    CHECK_THROWS_WITH_AS(parse_sweep(head + body, "s.toml"), doctest::Contains(message.c_str()), SweepError);
  };
  bad("[[report.expect]]\nname = \"n\"\na = { \"model.heads\" = 4 }\nrelation = \"better\"\n", "needs b = { ... }");
  bad("[[report.expect]]\nname = \"n\"\na = { \"model.heads\" = 4 }\nb = { \"model.heads\" = 2 }\nrelation = \"equal\"\n",
      "needs margin");
  bad("[[report.expect]]\nname = \"n\"\na = { \"model.heads\" = 4 }\nrelation = \"above\"\n", "needs value");
  bad("[[report.expect]]\nname = \"n\"\na = { \"model.heads\" = 4 }\nrelation = \"beats\"\n", "got 'beats'");
  bad("[[report.expect]]\na = { \"model.heads\" = 4 }\nrelation = \"above\"\nvalue = 1\n", "needs a name");
  bad("[[report.expect]]\nname = \"n\"\na = { \"model.width\" = 4 }\nrelation = \"above\"\nvalue = 1\n",
      "names 'model.width', which is not a swept key");
  bad("[report]\nbaseline = { seed = 0 }\n", "report.baseline names 'seed'");
  bad("[report]\nmeasured = { file = \"b.csv\", key = \"model.width\" }\n", "report.measured.key = \"model.width\" is not a swept key");
  bad("[report]\nmeasured = { file = \"b.csv\" }\n", "report.measured needs file and key");
  bad("[report]\nmeasured = { file = \"b.csv\", key = \"model.heads\", by = \"x\" }\n", "unknown key 'report.measured.by'");
  bad("[[report.expect]]\nname = \"n\"\na = { \"model.heads\" = 4 }\nrelation = \"above\"\nvalue = nan\n",
      "must be a finite number");
}
