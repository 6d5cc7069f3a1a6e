// `head_pruning`: the head-pruning reproduction (docs/results/pruning/).
//  - Voita et al. 2019, "Analyzing Multi-Head Self-Attention: Specialized Heads Do the Heavy
//    Lifting, the Rest Can Be Pruned": every head's output is multiplied by a Hard Concrete gate
//    (Louizos et al. 2018) and the loss is CE + lambda * L0, L0 the expected number of open
//    gates (nn::l0_penalty). Each evaluation logs every gate's eval-mode value
//    ("gate.blocks.<l>.attn.<i>": the gate trajectories); at the end the heads whose gate is
//    > 0.5 are kept and the closed ones pruned with prune_heads.
//  - Michel et al. 2019, "Are Sixteen Heads Really Better than One?": the baseline. Head
//    importance I = sum over batches |dL/dxi| (analysis::HeadImportance, on the validation set,
//    normalised per layer), then the heads are masked one at a time in order of increasing
//    importance, the test accuracy measured after each (acc_keep<k>, k heads left).
//  - The control for that order: prune.random_orders random orders (Fisher-Yates on a Philox
//    stream of `seed` that no training generator reads), each masked one head at a time the
//    same way; acc_rand<k> is their mean. The areas under the two curves, mean accuracy over
//    k = heads_total-1 .. 1 (the end points do not depend on the order), give one number per
//    run that paired seeds compare: auc_importance against auc_random.
// Without gates (e.g. model.attention = "mha(heads=8)", train.l0_lambda = 0) every head is
// kept and only the two curves measure anything: stochastic gates act as head dropout, so the
// ungated model is the one Michel et al. prune.
// Summary: val_acc, test_acc (all heads), heads_total, heads_kept, masked_acc (closed heads'
// head_mask = 0), pruned_acc (closed heads removed by prune_heads: equal to masked_acc; both
// test_acc without gates), attn_params_kept, acc_keep<k> and acc_rand<k> for k = heads_total .. 0,
// auc_importance, auc_random (the acc_rand and auc_random keys only with random orders, the
// auc keys only with at least two heads).
// Artifacts: surviving_heads.txt, gates.svg (trajectories from metrics.jsonl; gated models),
// accuracy_vs_heads.svg (the importance and random-order curves and this run's gate result).
// Known limit: the gates' sampling generators are not in the checkpoint (experiments.md), so a
// resumed gated run is correct but not bitwise equal to an uninterrupted one.
#include <algorithm>
#include <fstream>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "attnlab.hpp"
#include "experiments/analysis/heads.hpp"
#include "experiments/analysis/probe.hpp"
#include "experiments/models/models.hpp"
#include "experiments/data/philox_stream.hpp"
#include "experiments/plot/svg.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/trainer.hpp"
#include "nn/loss.hpp"
#include "experiments/runner/file_bounds.hpp"
#include "tensor/io.hpp"

namespace attnlab::catalog {
namespace {

using namespace runner;
using namespace models;

Schema pruning_schema() {
  Schema s;
  add_task_keys(s, "fashion_mnist");
  add_model_keys(s, {.attention = "mha(heads=8,gate=hard_concrete,gate_init=0.25)", .d_model = 64, .layers = 2, .ffn_hidden = 128});
  add_train_keys(s, {.steps = 500, .batch_size = 32, .lr = 3e-3, .warmup = 30, .eval_every = 25});
  s.add("train.l0_lambda", 0.0, "weight of the expected-L0 gate penalty in the loss (0 = none; > 0 needs gates)");
  s.add("prune.random_orders", int64_t(5),
        "random head orders masked one at a time as the control for the importance order (0 = none)");
  s.bound("prune.random_orders", 0, 10'000);
  return s;
}

bool has_gates(const nn::Module& model) {
  for (const auto& [name, m] : model.named_modules())
    if (std::dynamic_pointer_cast<nn::HardConcreteGate>(m)) return true;
  return false;
}

// head_mask of layer l (hv).
Tensor head_mask(const nn::EncoderClassifier& model, size_t l) {
  return analysis::head_mask_of(*model.blocks->at<nn::TransformerBlock>(l), int64_t(l));
}

void set_mask(Tensor mask, int64_t head, double value) {
  NoGradGuard no_grad;
  Tensor entry = narrow(mask, 0, head, 1);  // (1), a view of the buffer
  copy_(entry, full({1}, value, mask.dtype()));
}

// Attention parameters of the layers with at least one head kept: a layer whose heads are all
// closed only adds its out_proj bias, a constant, so it counts as removed.
int64_t attention_params(const nn::EncoderClassifier& model, const std::vector<std::vector<int64_t>>& keep) {
  int64_t n = 0;
  for (size_t l = 0; l < model.blocks->size(); ++l)
    if (!keep[l].empty())
      for (const Tensor& p : model.blocks->at<nn::TransformerBlock>(l)->attn->parameters()) n += p.numel();
  return n;
}

// Gate trajectories from metrics.jsonl (complete across resumes, unlike anything in memory).
void plot_gates(RunContext& ctx) {
  std::map<std::string, plot::Series> series;
  const std::filesystem::path metrics = ctx.dir() / "metrics.jsonl";  // absent on ranks other than 0
  std::istringstream in(std::filesystem::exists(metrics) ? read_text(metrics.string(), kMetricsFileBound) : "");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("step")) continue;
    for (const auto& [key, value] : j.items())
      if (key.rfind("gate.", 0) == 0 && value.is_number()) {
        plot::Series& s = series[key];
        s.name = key.substr(5);  // "blocks.0.attn.3"
        s.x.push_back(j["step"].get<double>());
        s.y.push_back(value.get<double>());
      }
  }
  plot::LineChart chart;
  chart.title = fmt::format("Hard Concrete gates (eval mode), lambda = {}", ctx.config().get_float("train.l0_lambda"));
  chart.x_label = "step";
  chart.y_label = "gate value";
  for (auto& [k, s] : series) chart.series.push_back(std::move(s));
  plot::save_svg(ctx.artifact_path("gates.svg").string(), chart);
}

using Head = std::pair<size_t, size_t>;  // (layer, head)

// Test accuracy with the heads of `order` masked one at a time: acc[k] with k heads left,
// k = order.size() .. 0.
std::vector<double> masking_curve(const nn::EncoderClassifier& model, const std::vector<Head>& order,
                                  const TaskData& task) {
  auto removing = copy_classifier(model);
  std::vector<double> acc(order.size() + 1);
  for (size_t removed = 0; removed <= order.size(); ++removed) {
    if (removed > 0) set_mask(head_mask(*removing, order[removed - 1].first), int64_t(order[removed - 1].second), 0.0);
    acc[order.size() - removed] = evaluate_classifier(*removing, task, task.test).accuracy;
  }
  return acc;
}

// Random order r: a Fisher-Yates shuffle on its own Philox stream of the run's seed. The data
// loaders' epoch streams count up from 0, so stream ids from 2^31 on are read by nothing else,
// and order r does not depend on how many orders are drawn.
std::vector<Head> random_order(std::vector<Head> heads, uint64_t seed, int64_t r) {
  data::PhiloxStream rng(seed, (uint64_t(1) << 31) + uint64_t(r));
  for (size_t i = heads.size(); i > 1; --i) std::swap(heads[i - 1], heads[rng.below(i)]);
  return heads;
}

// Mean accuracy over k = n-1 .. 1 heads left, n = acc.size() - 1 >= 2: the area under the curve
// without its end points (all heads, no heads), which every order shares.
double area(const std::vector<double>& acc) {
  return std::accumulate(acc.begin() + 1, acc.end() - 1, 0.0) / double(acc.size() - 2);
}

plot::Series curve_series(const std::string& name, const std::vector<double>& acc) {
  plot::Series s{name, {}, {}};
  for (size_t k = acc.size(); k-- > 0;) {
    s.x.push_back(double(k));
    s.y.push_back(acc[k]);
  }
  return s;
}

void run_pruning(const Config& config, RunContext& ctx) {
  const TaskData& task = ctx.data();
  auto model = build_classifier(config, task);
  const double lambda = config.get_float("train.l0_lambda");
  if (lambda < 0) fail<ConfigError>("train.l0_lambda: expected >= 0, got {}", lambda);
  const bool gated = has_gates(*model);
  if (lambda > 0 && !gated)
    fail<ConfigError>("train.l0_lambda = {} weighs a gate penalty, but model.attention = \"{}\" has no gates "
                      "(add gate=hard_concrete, or set train.l0_lambda = 0)",
                      lambda, config.get_string("model.attention"));
  const int64_t random_orders = config.get_int("prune.random_orders");
  data::DataLoader loader(task.train, config.get_int("train.batch_size"), /*shuffle=*/true,
                          uint64_t(config.get_int("seed")), /*drop_last=*/true);
  Trainer trainer(ctx, *model);
  trainer.add_loader("train", loader);
  trainer.loss = [&](int64_t) {
    data::Batch b = loader.next();  // the global batch; this micro-batch's rows below
    Tensor x = trainer.micro_batch(b.inputs), y = trainer.micro_batch(b.targets);
    Tensor ce = nn::cross_entropy(model->forward(x, task.padding_mask(x)), y);  // (B / parts, C) vs (B / parts)
    return lambda > 0 ? ce + nn::l0_penalty(*model) * lambda : ce;
  };
  trainer.evaluate = [&](int64_t) {
    Scores s = evaluate_classifier(*model, task, task.val);
    std::map<std::string, double> m{{"val_acc", s.accuracy}, {"val_loss", s.loss}};
    if (gated)
      for (const auto& [name, g] : analysis::gate_metrics(*model)) m[name] = g;
    return m;
  };
  if (!trainer.fit()) return;
  model->eval();
  const double test_acc = evaluate_classifier(*model, task, task.test).accuracy;
  ctx.summary("val_acc", evaluate_classifier(*model, task, task.val).accuracy);
  ctx.summary("test_acc", test_acc);

  // Gates: heads with an eval-mode gate value > 0.5 survive. gate_values lists the attention
  // modules in named_modules order, which is block order; without gates it gives each layer's
  // head_mask, all ones, so every head survives.
  const auto gates = analysis::gate_values(*model);
  if (gates.size() != model->blocks->size())
    fail<ValueError>("head_pruning: {} attention modules with gates or head masks for {} blocks", gates.size(), model->blocks->size());
  std::vector<std::vector<int64_t>> keep(gates.size());
  int64_t total = 0, kept = 0;
  std::string survivors = gated ? "# layer.head gate (heads with gate > 0.5 survive)\n"
                                : "# layer.head head_mask (no gates: every head survives)\n";
  std::string names;
  for (size_t l = 0; l < gates.size(); ++l)
    for (size_t i = 0; i < gates[l].second.size(); ++i) {
      ++total;
      const double g = gates[l].second[i];
      if (g > 0.5) {
        keep[l].push_back(int64_t(i));
        ++kept;
        survivors += fmt::format("{}.{} {:.4f}\n", l, i, g);
        names += fmt::format("{}{}.{}", names.empty() ? "" : " ", l, i);
      }
    }
  write_text_atomic(ctx.artifact_path("surviving_heads.txt").string(), survivors);
  if (gated)
    ctx.logf("head_pruning: lambda {}: {} of {} heads survive: {}", lambda, kept, total, names.empty() ? "none" : names);
  else
    ctx.logf("head_pruning: no gates: all {} heads kept", total);

  // The closed heads masked (head_mask = 0) and pruned (prune_heads): the same function. Without
  // gates nothing is closed, and both are the trained model.
  double masked_acc = test_acc, pruned_acc = test_acc, params_kept = 1.0;
  if (gated) {
    auto masked = copy_classifier(*model);
    for (size_t l = 0; l < keep.size(); ++l)
      for (int64_t i = 0; i < int64_t(gates[l].second.size()); ++i)
        if (std::find(keep[l].begin(), keep[l].end(), i) == keep[l].end()) set_mask(head_mask(*masked, l), i, 0.0);
    auto pruned = copy_classifier(*model);
    for (size_t l = 0; l < keep.size(); ++l) {
      auto block = pruned->blocks->at<nn::TransformerBlock>(l);
      if (keep[l].empty())  // prune_heads needs one head: a layer with none keeps its heads, all masked
        for (int64_t i = 0; i < int64_t(gates[l].second.size()); ++i) set_mask(head_mask(*pruned, l), i, 0.0);
      else
        block->attn = block->attn->prune_heads(keep[l]);  // forward uses block->attn
    }
    masked_acc = evaluate_classifier(*masked, task, task.test).accuracy;
    pruned_acc = evaluate_classifier(*pruned, task, task.test).accuracy;
    std::vector<std::vector<int64_t>> all(keep.size(), std::vector<int64_t>{0});
    params_kept = double(attention_params(*pruned, keep)) / double(attention_params(*model, all));
    plot_gates(ctx);
  }
  ctx.summary("heads_total", double(total));
  ctx.summary("heads_kept", double(kept));
  ctx.summary("masked_acc", masked_acc);
  ctx.summary("pruned_acc", pruned_acc);
  ctx.summary("attn_params_kept", params_kept);

  // Michel et al.'s baseline on this run's model: importance on the validation set, then heads
  // masked in order of increasing importance (ties: layer, then head).
  analysis::HeadImportance importance(analysis::classifier_probe(*model, task.pad_id));
  data::DataLoader val(task.val, 64, /*shuffle=*/false, 0);
  for (int64_t b = 0; b < val.size(); ++b) importance.add(val.next());
  const analysis::HeadMatrix score = importance.normalized();
  std::vector<Head> heads;
  for (size_t l = 0; l < score.size(); ++l)
    for (size_t i = 0; i < score[l].size(); ++i) heads.emplace_back(l, i);
  std::vector<Head> order = heads;
  std::stable_sort(order.begin(), order.end(),
                   [&](Head a, Head b) { return score[a.first][a.second] < score[b.first][b.second]; });
  const std::vector<double> by_importance = masking_curve(*model, order, task);
  for (size_t k = 0; k < by_importance.size(); ++k) ctx.summary(fmt::format("acc_keep{}", k), by_importance[k]);
  const bool has_area = total >= 2;  // one head: no k strictly between all and none
  if (has_area) ctx.summary("auc_importance", area(by_importance));
  plot::LineChart chart;
  chart.title = fmt::format("Test accuracy against heads kept (lambda = {})", lambda);
  chart.x_label = "heads kept";
  chart.y_label = "test accuracy";
  chart.series = {curve_series("importance order (Michel et al.)", by_importance)};

  // The control: random orders, averaged per k. The end points (all heads, none) are the same
  // model for every order, so they are the importance curve's values, not a mean of equal ones.
  if (random_orders > 0) {
    std::vector<double> by_chance(by_importance.size(), 0.0);
    const uint64_t seed = uint64_t(config.get_int("seed"));
    for (int64_t r = 0; r < random_orders; ++r) {
      const std::vector<double> acc = masking_curve(*model, random_order(heads, seed, r), task);
      for (size_t k = 0; k < acc.size(); ++k) by_chance[k] += acc[k] / double(random_orders);
    }
    by_chance.front() = by_importance.front();
    by_chance.back() = by_importance.back();
    for (size_t k = 0; k < by_chance.size(); ++k) ctx.summary(fmt::format("acc_rand{}", k), by_chance[k]);
    if (has_area) {
      ctx.summary("auc_random", area(by_chance));
      ctx.logf("head_pruning: area under the curve: importance order {:.4f}, random orders {:.4f} (mean of {})",
               area(by_importance), area(by_chance), random_orders);
    }
    chart.series.push_back(curve_series(fmt::format("random order (mean of {})", random_orders), by_chance));
  }
  chart.series.push_back(plot::Series{gated ? "Hard Concrete gates (this run)" : "all heads (no gates)",
                                      {double(kept)},
                                      {pruned_acc}});
  plot::save_svg(ctx.artifact_path("accuracy_vs_heads.svg").string(), chart);
}

const bool registered = register_experiment({
    .name = "head_pruning",
    .description = "gated classifier with an L0 penalty: gate trajectories, heads kept, pruned accuracy; "
                   "importance-order pruning baseline against random orders",
    .schema = pruning_schema(),
    .presets = {{"quick", "task.train_size = 4000\ntrain.steps = 500\n"},
                {"full",
                 "task.train_size = 20000\ntask.val_size = 2000\ntask.test_size = 2000\nmodel.d_model = 128\n"
                 "model.attention = \"mha(heads=8,gate=hard_concrete,gate_init=0.25)\"\nmodel.layers = 3\nmodel.ffn_hidden = 256\n"
                 "train.steps = 3000\ntrain.eval_every = 100\n"}},
    .run = run_pruning,
    .check = check_model,
});

}  // namespace
}  // namespace attnlab::catalog
