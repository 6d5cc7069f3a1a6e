// train.groups (experiments/runner/trainer.hpp): parsing and its errors, glob matching of dotted
// names, the optimizer's group layout, and in the Trainer a group lr of 0 freezing its
// parameters, per-group weight decay and each group's lr following the schedule at its own scale.
#include <filesystem>

#include "experiments/runner/trainer.hpp"
#include "nn/linear.hpp"
#include "runner/run_helpers.hpp"

using namespace attnlab;
using namespace attnlab::runner;
using namespace attnlab::testing;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A Trainer's run context over the train.* keys alone, in a fresh directory.
struct Harness {
  fs::path dir;
  std::unique_ptr<RunContext> ctx;
  Harness(const std::string& name, const std::vector<std::string>& sets) : dir(fresh_run_dir(name)) {
    Schema s;
    s.add("seed", 0, "random seed");
    add_train_keys(s, {.steps = 5, .lr = 1e-2, .warmup = 2, .eval_every = 0, .log_every = 5});
    Config c(s);
    for (const auto& kv : sets) c.set(kv);
    ctx = std::make_unique<RunContext>(c, dir, RunContext::Options{});
  }
  ~Harness() { fs::remove_all(dir); }
};

}  // namespace

TEST_CASE("groups: parse_groups reads patterns and options") {
  CHECK(parse_groups("").empty());
  CHECK(parse_groups("  ").empty());
  auto specs = parse_groups(" *.gate.* : lr=0.1, weight_decay = 0 ; *.mixing: lr=3e-3; head.?ias:;");
  REQUIRE(specs.size() == 3);
  CHECK(specs[0].pattern == "*.gate.*");
  CHECK(specs[0].lr == 0.1);
  CHECK(specs[0].weight_decay == 0.0);
  CHECK(specs[1].pattern == "*.mixing");
  CHECK(specs[1].lr == 3e-3);
  CHECK_FALSE(specs[1].weight_decay.has_value());
  CHECK(specs[2].pattern == "head.?ias");
  CHECK_FALSE(specs[2].lr.has_value());
}

TEST_CASE("groups: parse errors name the entry and the option") {
  auto error = [](const std::string& text) { return error_of([&] { parse_groups(text); }); };
  CHECK(error("*.gate.* lr=0.1") == "train.groups: '*.gate.* lr=0.1' has no ':' (expected \"PATTERN: lr=X, weight_decay=Y\")");
  CHECK(error(": lr=1") == "train.groups: ': lr=1' has an empty pattern");
  CHECK(error("a: momentum=0.9") == "train.groups: 'a': unknown option 'momentum' (options: lr, weight_decay)");
  CHECK(error("a: lr=1, lr=2") == "train.groups: 'a': option 'lr' given twice");
  CHECK(error("a: lr") == "train.groups: 'a': expected name=value, got 'lr'");
  CHECK(error("a: lr=1,") == "train.groups: 'a': expected name=value, got ''");
  CHECK(error("a: lr=fast") == "train.groups: 'a': lr = 'fast' is not a number");
  CHECK(error("a: lr=") == "train.groups: 'a': lr = '' is not a number");
  CHECK(error("a: lr=-1") == "train.groups: 'a': lr must be a finite number >= 0, got -1");
  CHECK(error("a: weight_decay=inf") == "train.groups: 'a': weight_decay must be a finite number >= 0, got inf");
  CHECK(error("a: weight_decay=nan") == "train.groups: 'a': weight_decay must be a finite number >= 0, got nan");
  CHECK_THROWS_AS(parse_groups("a: lr=1e"), ConfigError);
}

TEST_CASE("groups: glob_match matches whole dotted names") {
  struct Case {
    const char* pattern;
    const char* name;
    bool match;
  };
  const Case cases[] = {
      {"*.gate.*", "blocks.0.attn.gate.log_alpha", true},
      {"*.gate.*", "gate.log_alpha", false},  // the pattern asks for a dot before "gate"
      {"*gate*", "gate.log_alpha", true},
      {"*", "head.weight", true},
      {"*", "", true},
      {"head.weight", "head.weight", true},
      {"head", "head.weight", false},
      {"head.weight", "head", false},
      {"blocks.?.attn.*", "blocks.3.attn.q_proj.weight", true},
      {"blocks.?.attn.*", "blocks.12.attn.q_proj.weight", false},
      {"*.mixing", "blocks.0.attn.mixing", true},
      {"*.mixing", "blocks.0.attn.mixing.x", false},
      {"a*b*c", "aXbYbZc", true},
      {"a*b*c", "aXbYbZ", false},
      {"**.w", "x.w", true},
  };
  for (const Case& c : cases) CHECK_MESSAGE(glob_match(c.pattern, c.name) == c.match, fmt::format("{} vs {}", c.pattern, c.name));
}

TEST_CASE("groups: make_param_groups keeps the default split first, then one or two groups per spec") {
  nn::NamedTensors named = {{"emb.weight", zeros({4, 3})},        {"blocks.0.gate.log_alpha", zeros({2})},
                            {"blocks.0.mixing", zeros({2, 2})},   {"blocks.0.mixing_bias", zeros({2})},
                            {"head.weight", zeros({2, 3})},       {"head.bias", zeros({2})}};
  auto groups = make_param_groups(named, 1e-3, 0.01, parse_groups("*.gate.*: lr=0.1, weight_decay=0; *.mixing*: lr=3e-3"));
  REQUIRE(groups.size() == 5);
  CHECK(groups[0].names == std::vector<std::string>{"emb.weight", "head.weight"});
  CHECK(groups[0].weight_decay == 0.01);
  CHECK(groups[1].names == std::vector<std::string>{"head.bias"});
  CHECK(groups[1].weight_decay == 0);
  CHECK(groups[2].names == std::vector<std::string>{"blocks.0.gate.log_alpha"});
  CHECK(groups[2].lr == 0.1);
  CHECK(groups[2].weight_decay == 0);
  // No weight_decay given: the default split inside the group, at the group's lr.
  CHECK(groups[3].names == std::vector<std::string>{"blocks.0.mixing"});
  CHECK(groups[3].weight_decay == 0.01);
  CHECK(groups[4].names == std::vector<std::string>{"blocks.0.mixing_bias"});
  CHECK(groups[4].weight_decay == 0);
  CHECK((groups[3].lr == 3e-3 && groups[4].lr == 3e-3));
  CHECK((groups[0].lr == 1e-3 && groups[1].lr == 1e-3));

  // The first matching spec wins; a spec left with nothing, or matching nothing, is an error.
  CHECK(error_of([&] { make_param_groups(named, 1e-3, 0.01, parse_groups("head.*: lr=1; *.bias: lr=2")); }) ==
        "train.groups: pattern '*.bias' matches only parameters of earlier groups");
  CHECK(error_of([&] { make_param_groups(named, 1e-3, 0.01, parse_groups("*.gates.*: lr=1")); }) ==
        "train.groups: pattern '*.gates.*' matches no parameter");
}

TEST_CASE("groups: in the Trainer a group lr of 0 freezes its parameters, and group lrs keep their ratio") {
  Harness h("groups_freeze", {"train.groups=bias: lr=0; weight: lr=2e-2"});
  Generator gen(1);
  nn::Linear model(4, 3);
  const Tensor x = randn({8, 4}, gen), y = randn({8, 3}, gen);
  const Tensor w0 = clone(model.weight.detach()), b0 = clone(model.bias.detach());
  Trainer trainer(*h.ctx, model);
  trainer.loss = [&](int64_t) { return mean((model.forward(x) - y) * (model.forward(x) - y)); };
  const auto& groups = trainer.optimizer().param_groups();
  // The default split (empty here), then the split of each spec: bias in the no-decay half of
  // its pair, weight in the decay half of its pair.
  REQUIRE(groups.size() == 6);
  CHECK(groups[3].names == std::vector<std::string>{"bias"});
  CHECK(groups[4].names == std::vector<std::string>{"weight"});
  CHECK(groups[4].lr == doctest::Approx(2e-2 / 2));  // warmup step 1 of 2 scales every group
  REQUIRE(trainer.fit());
  CHECK(bitwise_equal(model.bias, b0));
  CHECK_FALSE(allclose(model.weight, w0));
  CHECK(groups[3].lr == 0);
  CHECK(groups[4].lr == doctest::Approx(2 * groups[0].lr));
  CHECK(contains(read_file(h.dir / "log.txt"), "train.groups: 'bias' (lr 0, weight_decay as default): 1 parameters"));
}

TEST_CASE("groups: in the Trainer each group decays by its own weight_decay") {
  // A zero gradient leaves only the decoupled decay: p <- p (1 - lr wd) in one step at the full lr.
  Harness h("groups_decay", {"train.groups=bias: weight_decay=0.5", "train.steps=1", "train.warmup=0",
                             "train.min_lr_ratio=1", "train.lr=0.1"});
  nn::Linear model(4, 3);
  const Tensor w0 = clone(model.weight.detach()), b0 = clone(model.bias.detach());
  Trainer trainer(*h.ctx, model);
  trainer.loss = [&](int64_t) { return sum(model.forward(ones({2, 4})) * 0.0); };
  REQUIRE(trainer.fit());
  CHECK(allclose(model.bias, b0 * (1 - 0.1 * 0.5), 1e-6, 0));     // a bias, decayed by its group
  CHECK(allclose(model.weight, w0 * (1 - 0.1 * 0.01), 1e-6, 0));  // the default train.weight_decay
}

TEST_CASE("groups: a pattern that matches no parameter fails when the Trainer is built") {
  Harness h("groups_nomatch", {"train.groups=*.gate.*: lr=0.1"});
  nn::Linear model(4, 3);
  CHECK(error_of([&] { Trainer trainer(*h.ctx, model); }) == "train.groups: pattern '*.gate.*' matches no parameter");
}
