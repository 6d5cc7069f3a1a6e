// experiments/runner/claims: the claims CSV, its table, the README block, and that the committed
// docs/results/claims.md and README are the table of the committed claims.csv.
#include <sstream>

#include "experiments/runner/claims.hpp"
#include "helpers.hpp"

using namespace attnlab;
using namespace attnlab::runner;

namespace {
const std::string kHead = "claim,study,metric,expected,observed,ci_low,ci_high,seeds,verdict,compute_minutes\n";
}

TEST_CASE("claims: rows parse with quoted fields, and the table links each study") {
  const auto rows = parse_claims_csv(
      kHead + "\"heads share dimensions, \"\"mostly\"\"\",collaborative,rank90_qk,< 16,8.5,8.1,8.9,3,reproduced,12\n"
              "key size,lowrank_lm,val_bpc,k=64 below k=4,-0.02,-0.03,-0.01,3,partially,30.5\n",
      "claims.csv");
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].claim == "heads share dimensions, \"mostly\"");
  CHECK(rows[1].verdict == "partially");
  const std::string md = claims_markdown(rows, "docs/results/");
  CHECK(md.find("[lowrank_lm](docs/results/lowrank_lm/README.md)") != std::string::npos);
  CHECK(md.find("`val_bpc` -0.02 [-0.03, -0.01] | 3 | **partially** | 30.5 min |") != std::string::npos);
}

TEST_CASE("claims: a wrong header, field count, verdict or number is an error naming the line") {
  auto bad = [](const std::string& text, const std::string& message) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(parse_claims_csv(text, "c.csv"), doctest::Contains(message.c_str()), ValueError);
  };
  bad("claim,study\n", "c.csv:1: header 'claim,study'");
  bad(kHead + "a,b,c,d,1,0,2,3,reproduced\n", "c.csv:2: 9 fields, expected 10");
  bad(kHead + "a,b,c,d,1,0,2,3,confirmed,5\n", "c.csv:2: verdict 'confirmed'");
  bad(kHead + "a,b,c,d,one,0,2,3,reproduced,5\n", "observed 'one' is not a number");
  bad(kHead + "\"a,b,c,d,1,0,2,3,reproduced,5\n", "quoted field is not closed");
}

TEST_CASE("claims: the README block is replaced between its markers, and missing markers are an error") {
  const std::string doc = "# x\n<!-- claims:begin -->\nold\n<!-- claims:end -->\ntail\n";
  CHECK(replace_claims_block(doc, "new\n", "R.md") == "# x\n<!-- claims:begin -->\nnew\n<!-- claims:end -->\ntail\n");
  CHECK_THROWS_WITH_AS(replace_claims_block("# x\n", "t", "R.md"), doctest::Contains("R.md: no '<!-- claims:begin -->'"),
                       ValueError);
}

TEST_CASE("claims: the committed claims.md and README block are generated from claims.csv") {
  std::ostringstream out;
  const bool same = sync_claims(ATTNLAB_SOURCE_DIR, /*check=*/true, out);
  INFO(out.str());
  CHECK(same);
}
