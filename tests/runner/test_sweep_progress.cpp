// The progress line `attnlab sweep` prints for each completed run (experiments/runner/sweep.hpp):
// the headline metric chosen as `attnlab report` chooses it, and the ETA from the mean run time.
#include "experiments/runner/sweep.hpp"
#include "helpers.hpp"

using namespace attnlab;
using namespace attnlab::runner;

TEST_CASE("headline_metric: [report] metric, else the first non-cost metric") {
  ReportSpec report;
  CHECK(headline_metric(report, {"peak_rss_mb", "seconds", "steps_per_s", "val_acc", "val_loss"}) == "val_acc");
  CHECK(headline_metric(report, {"peak_rss_mb", "seconds"}) == "");
  report.metric = "val_loss";
  CHECK(headline_metric(report, {"val_acc", "val_loss"}) == "val_loss");
}

TEST_CASE("done_line: the run's headline metric and an ETA of mean time x runs left / workers") {
  RunDone d;
  d.run = "0003";
  d.seconds = 12.06;
  d.metric = "val_acc";
  d.metrics = {{"val_acc", 0.8125}, {"seconds", 12.0}};
  d.left = 6;
  d.total = 8;
  d.mean_seconds = 10;
  d.workers = 2;
  CHECK(done_line(d) == "done  0003 in 12.1 s: val_acc 0.8125 (6/8 to go, ETA 30 s)");
  d.left = 0;
  CHECK(done_line(d) == "done  0003 in 12.1 s: val_acc 0.8125 (0/8 to go)");
  d.metric = "test_acc";  // declared in [report] but not reported by this run
  CHECK(done_line(d) == "done  0003 in 12.1 s: test_acc missing (0/8 to go)");
  d.metric = "";
  d.left = 40;
  d.total = 48;
  d.mean_seconds = 600;
  d.workers = 4;
  CHECK(done_line(d) == "done  0003 in 12.1 s (40/48 to go, ETA 1.7 h)");
  CHECK(format_duration(89) == "89 s");
  CHECK(format_duration(150) == "2.5 min");
  CHECK(format_duration(7200) == "2.0 h");
}
