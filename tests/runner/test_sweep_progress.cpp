// The progress line `attnlab sweep` prints for each completed run (experiments/runner/sweep.hpp):
// the headline metric chosen as `attnlab report` chooses it, and the ETA from the mean run time.
#include "experiments/runner/sweep.hpp"
#include "helpers.hpp"

using namespace attnlab;
using namespace attnlab::runner;

TEST_CASE("headline_metric: [report] metric, else a validation, then a test metric, never a count or cost") {
  ReportSpec report;
  CHECK(headline_metric(report, {"peak_rss_mb", "seconds", "steps_per_s", "val_acc", "val_loss"}) == "val_acc");
  // What classify reports: params and train_loss sort before val_acc by name but are not results.
  CHECK(headline_metric(report, {"params", "peak_rss_mb", "test_acc", "train_loss", "val_acc"}) == "val_acc");
  CHECK(headline_metric(report, {"params", "test_acc", "train_loss"}) == "test_acc");
  CHECK(headline_metric(report, {"kl", "params", "train_loss"}) == "kl");
  CHECK(headline_metric(report, {"params", "seconds"}) == "params");
  CHECK(headline_metric(report, {"peak_rss_mb", "seconds"}) == "");
  report.metric = "val_loss";
  CHECK(headline_metric(report, {"val_acc", "val_loss"}) == "val_loss");
}

TEST_CASE("lower_is_better: losses, bits per character, perplexities and errors, not accuracies") {
  for (const char* m : {"val_loss", "val_bpc", "val_bpc_long", "test_ppl", "perplexity", "val_error"}) {
    CAPTURE(m);
    CHECK(lower_is_better(m));
  }
  for (const char* m : {"val_acc", "test_acc", "pruned_acc", "steps_per_s"}) {
    CAPTURE(m);
    CHECK_FALSE(lower_is_better(m));
  }
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
