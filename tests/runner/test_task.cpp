// The task registry (experiments/runner/task.hpp): every task builds from task.* keys with the
// documented shapes, vocabularies and display strings, and bad keys name themselves.
#include "experiments/runner/task.hpp"
#include "helpers.hpp"

using namespace attnlab;
using namespace attnlab::runner;
using namespace attnlab::testing;

namespace {

Config task_config(const std::string& name, std::vector<std::string> sets = {}) {
  Schema s;
  add_task_keys(s, name);
  Config c(s);
  c.set("task.train_size=40");
  c.set("task.val_size=10");
  c.set("task.test_size=10");
  for (auto& x : sets) c.set(x);
  return c;
}

}  // namespace

TEST_CASE("task: generated tasks have splits, sizes and token strings") {
  TaskData l = make_task(task_config("listops", {"task.length=64"}));
  CHECK(l.train.inputs.shape() == Dims{40, 64});
  CHECK(l.val.targets.shape() == Dims{10});
  CHECK(l.vocab_size == 16);
  CHECK(l.num_classes == 10);
  CHECK(l.token(12) == "[MAX");
  CHECK(l.token(99) == "<99>");
  CHECK(l.padding_mask(l.train.inputs).dtype() == kBool);
  // Different splits draw different examples; the same task.seed gives the same ones.
  CHECK_FALSE(allclose(narrow(l.train.inputs, 0, 0, 10), l.val.inputs));
  CHECK(allclose(make_task(task_config("listops", {"task.length=64"})).test.inputs, l.test.inputs));

  TaskData r = make_task(task_config("reverse", {"task.length=6", "task.vocab=5"}));
  CHECK(r.per_position);
  CHECK(r.train.targets.shape() == Dims{40, 6});
  CHECK(r.token(4) == "e");
  CHECK(r.padding_mask(r.train.inputs).defined() == false);

  TaskData a = make_task(task_config("recall"));
  CHECK(a.seq_len == 17);
  CHECK(a.vocab_size == 32);
  CHECK(a.label(16) == "v0");
}

TEST_CASE("task: recall with task.pair_tokens = 1 (one id per pair, the demo's layout)") {
  auto config = [](const std::string& pair_tokens) {
    Schema s;
    add_task_keys(s, "recall");
    add_recall_layout_key(s);
    Config c(s);
    for (auto x : {"task.train_size=40", "task.val_size=10", "task.test_size=10", "task.num_pairs=6",
                   "task.num_keys=8", "task.num_values=8"})
      c.set(x);
    c.set("task.pair_tokens=" + pair_tokens);
    return c;
  };
  TaskData two = make_task(config("2")), one = make_task(config("1"));
  CHECK(two.seq_len == 13);
  CHECK(two.vocab_size == 16);
  CHECK(one.seq_len == 7);
  CHECK(one.train.inputs.shape() == Dims{40, 7});
  CHECK(one.vocab_size == 16 + 64);
  CHECK(one.num_classes == 16);  // the targets are value ids in both layouts
  CHECK(int64_t(one.tokens.size()) == one.vocab_size);
  CHECK(one.token(16 + 3 * 8 + 5) == "k3v5");
  CHECK(one.label(8) == "v0");
  CHECK(one.train.targets.to_vector<int64_t>() == two.train.targets.to_vector<int64_t>());  // same examples
  CHECK(error_of([&] { make_task(config("3")); }).find("task.pair_tokens must be 1 or 2, got 3") != std::string::npos);
}

TEST_CASE("task: fortunes and fashion_mnist") {
  TaskData f = make_task(task_config("fortunes", {"task.length=32"}));
  CHECK(f.language_model);
  CHECK(f.seq_len == 32);
  CHECK(f.train_tokens.numel() > 100000);
  CHECK(int64_t(f.tokens.size()) == f.vocab_size);
  CHECK(f.token(f.vocab_size - 1).size() >= 1);
  TaskData m = make_task(task_config("fashion_mnist"));
  CHECK(m.train.inputs.shape() == Dims{40, 49, 16});
  CHECK(m.val.inputs.shape() == Dims{10, 49, 16});
  CHECK(m.input_dim == 16);
  CHECK(m.label(9) == "Ankle boot");
  TaskData p = make_task(task_config("fashion_mnist", {"task.input=pixels"}));
  CHECK(p.train.inputs.shape() == Dims{40, 784});
  CHECK(p.vocab_size == 256);
}

TEST_CASE("task: errors name the key") {
  CHECK(error_of([] { make_task(task_config("listop")); }).find("unknown task 'listop'") != std::string::npos);
  CHECK(error_of([] { make_task(task_config("fashion_mnist", {"task.input=rows"})); }).find("task.input") !=
        std::string::npos);
  CHECK(error_of([] { make_task(task_config("copy", {"task.vocab=0"})); }).find("task.vocab must be >= 1") !=
        std::string::npos);
  CHECK_THROWS_AS(make_task(task_config("listops", {"task.min_length=100", "task.length=50"})), ConfigError);
}
