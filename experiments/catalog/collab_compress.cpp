// `collab_compress`: the collaborative-heads reproduction (Cordonnier, Loukas, Jaggi 2020,
// "Multi-Head Attention: Collaborate Instead of Concatenate"; docs/results/collaborative/).
// Trains an `mha` encoder classifier, then
//  (a) the energy spectrum of its key/query projections (the paper's Figure 1): singular values
//      of the concatenated W_Q (h*dk, D), W_K, and of the concatenated per-head products
//      [Wq_1^T Wk_1, ..., Wq_h^T Wk_h] (D, h*D), as cumulative energy against rank, after
//      training and at initialisation (a random product is already less than full in energy,
//      so the untrained spectrum is the baseline the trained one is read against);
//  (b) for each shared key size Dk~ in collab.shared_key_sizes, every attention layer converted
//      by nn::to_collaborative (a CP decomposition), test accuracy before and after a short
//      fine-tuning of the whole converted model;
//  (c) the control for (b)'s fine-tuning: a copy of the trained mha model fine-tuned the same
//      way (steps, lr, loader seed, so the same batches in the same order). Fine-tuning alone
//      moves accuracy, so "conversion + fine-tuning recovers accuracy" is read against
//      acc_mha_ft, and delta_dk<k>_ft = acc_dk<k>_ft - acc_mha_ft is the paired effect.
// Metrics: the Trainer's curves; summary: val_acc, test_acc, rank90_*/rank95_* (mean over
// layers; q, k, qk = products), init_rank90_*, acc_mha_ft (= test_acc with no fine-tuning
// steps), acc_dk<k>, acc_dk<k>_ft, delta_dk<k>_ft, cp_error_dk<k>.
// Artifacts: spectrum.svg, spectrum.csv, accuracy_vs_dk.svg.
//
// Stopped during (b) or (c), the run resumes from the Trainer's final checkpoint and redoes them,
// which is deterministic (their loaders and the CP fits are seeded from `seed`).
#include <fstream>
#include <sstream>

#include "attnlab.hpp"
#include "experiments/analysis/spectrum.hpp"
#include "experiments/models/models.hpp"
#include "experiments/plot/svg.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/trainer.hpp"
#include "nn/attention/collaborative.hpp"
#include "nn/loss.hpp"
#include "tensor/option_string.hpp"

namespace attnlab::catalog {
namespace {

using namespace runner;
using namespace models;

Schema collab_schema() {
  Schema s;
  add_task_keys(s, "fashion_mnist");
  add_model_keys(s, {.attention = "mha(heads=4)", .d_model = 64, .layers = 2, .ffn_hidden = 128});
  add_train_keys(s, {.steps = 500, .batch_size = 32, .lr = 3e-3, .warmup = 30, .eval_every = 100});
  s.add("collab.shared_key_sizes", "2,4,8,16,32,64",
        "comma-separated shared key sizes Dk~ to convert to (each between 1 and the model's h*dk)");
  s.add("collab.finetune_steps", int64_t(50),
        "AdamW steps of each converted model and of the mha control (0 = no fine-tuning)");
  s.add("collab.finetune_lr", 1e-3, "learning rate of the fine-tuning (constant)");
  s.add("collab.cp_iterations", int64_t(300), "maximum ALS sweeps of each CP decomposition");
  s.bound("collab.finetune_steps", 0, kMaxSteps).bound("collab.cp_iterations", 0, 1'000'000);
  return s;
}

std::vector<int64_t> parse_sizes(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t begin = item.find_first_not_of(' '), end = item.find_last_not_of(' ');
    const std::optional<int64_t> v =
        begin == std::string::npos ? std::nullopt : parse_integer(std::string_view(item).substr(begin, end + 1 - begin));
    if (!v || *v <= 0) fail<ConfigError>("collab.shared_key_sizes: '{}' in '{}' is not a positive integer", item, text);
    out.push_back(*v);
  }
  if (out.empty()) fail<ConfigError>("collab.shared_key_sizes: expected a list like \"4,8,16\", got '{}'", text);
  return out;
}

std::vector<std::shared_ptr<nn::MultiHeadAttention>> mha_layers(const nn::EncoderClassifier& model) {
  std::vector<std::shared_ptr<nn::MultiHeadAttention>> out;
  for (size_t l = 0; l < model.blocks->size(); ++l) {
    auto block = model.blocks->at<nn::TransformerBlock>(l);
    auto m = std::dynamic_pointer_cast<nn::MultiHeadAttention>(block->attn);
    if (!m)
      fail<ConfigError>("collab_compress: model.attention must be mha (to_collaborative converts mha layers), "
                        "layer {} is {}",
                        l, block->attn->spec());
    out.push_back(m);
  }
  return out;
}

// Per layer: cumulative energy of W_Q, W_K and the concatenated products.
struct Spectra {
  std::vector<std::vector<double>> q, k, qk;  // [layer][rank-1]
};

Spectra spectra_of(const nn::EncoderClassifier& model) {
  Spectra s;
  for (const auto& m : mha_layers(model)) {
    const Tensor& wq = m->q_proj->weight;  // (h*dk, D)
    const Tensor& wk = m->k_proj->weight;  // (h*dk, D)
    s.q.push_back(analysis::cumulative_energy(analysis::singular_values(wq)));
    s.k.push_back(analysis::cumulative_energy(analysis::singular_values(wk)));
    s.qk.push_back(analysis::cumulative_energy(
        analysis::singular_values(analysis::concat_qk_products(wq, wk, m->config.heads))));  // of (D, h*D)
  }
  return s;
}

double mean_rank(const std::vector<std::vector<double>>& layers, double fraction) {
  double sum = 0;
  for (const auto& c : layers) sum += double(analysis::energy_rank(c, fraction));
  return sum / double(layers.size());
}

std::vector<double> mean_curve(const std::vector<std::vector<double>>& layers) {
  std::vector<double> out(layers.front().size(), 0.0);
  for (const auto& c : layers)
    for (size_t r = 0; r < out.size(); ++r) out[r] += c[r] / double(layers.size());
  return out;
}

plot::Series energy_series(const std::string& name, const std::vector<double>& curve) {
  plot::Series s{name, {}, {}};
  for (size_t r = 0; r < curve.size(); ++r) {
    s.x.push_back(double(r + 1));
    s.y.push_back(curve[r]);
  }
  return s;
}

void write_spectra(RunContext& ctx, const Spectra& trained, const Spectra& init) {
  plot::LineChart chart;
  chart.title = "Cumulative energy of key/query projections (mean over layers)";
  chart.x_label = "rank r";
  chart.y_label = "sum_{j<=r} s_j^2 / sum s_j^2";
  chart.series = {energy_series("W_Q (trained)", mean_curve(trained.q)),
                  energy_series("W_K (trained)", mean_curve(trained.k)),
                  energy_series("[W_Qi W_Ki^T] (trained)", mean_curve(trained.qk)),
                  energy_series("W_Q (init)", mean_curve(init.q)),
                  energy_series("[W_Qi W_Ki^T] (init)", mean_curve(init.qk))};
  plot::save_svg(ctx.artifact_path("spectrum.svg").string(), chart);

  std::string csv = "state,layer,matrix,rank,cumulative_energy\n";
  for (const auto& [state, s] : {std::pair{"trained", &trained}, std::pair{"init", &init}})
    for (size_t l = 0; l < s->q.size(); ++l)
      for (const auto& [name, c] : {std::pair{"q", &s->q[l]}, std::pair{"k", &s->k[l]}, std::pair{"qk", &s->qk[l]}})
        for (size_t r = 0; r < c->size(); ++r) csv += fmt::format("{},{},{},{},{:.9g}\n", state, l, name, r + 1, (*c)[r]);
  write_text_atomic(ctx.artifact_path("spectrum.csv").string(), csv);
}

// The model with every attention layer converted to collaborative(Dk~): a new classifier whose
// attention spec is the converted layer's pinned spec, loaded with the trained weights outside
// attention and the converted ones inside. Returns the mean CP relative error over layers.
std::shared_ptr<nn::EncoderClassifier> convert(const nn::EncoderClassifier& model, int64_t dk, int64_t iterations,
                                               uint64_t seed, double& cp_error) {
  TensorMap state = model.state_dict();
  std::string spec;
  cp_error = 0;
  const auto layers = mha_layers(model);
  for (size_t l = 0; l < layers.size(); ++l) {
    nn::CPReport report;
    auto c = nn::to_collaborative(*layers[l], dk, {.max_iterations = iterations, .seed = seed + l}, &report);
    cp_error += report.relative_error / double(layers.size());
    if (spec.empty()) spec = c->spec();
    const std::string prefix = fmt::format("blocks.{}.attn.", l);
    for (auto it = state.begin(); it != state.end();)
      it = it->first.rfind(prefix, 0) == 0 ? state.erase(it) : std::next(it);
    for (const auto& [name, t] : c->state_dict()) state[prefix + name] = t;
  }
  nn::EncoderConfig cfg = model.config;
  cfg.block.attention = spec;
  auto out = std::make_shared<nn::EncoderClassifier>(cfg);
  out->load_state_dict(state);
  return out;
}

// Returns false when a stop signal interrupted it.
bool finetune(nn::EncoderClassifier& model, const TaskData& task, const Config& config, RunContext& ctx,
              uint64_t seed) {
  data::DataLoader loader(task.train, config.get_int("train.batch_size"), /*shuffle=*/true, seed, /*drop_last=*/true);
  optim::AdamW opt(model.parameters(), {.lr = config.get_float("collab.finetune_lr")});
  std::vector<Tensor> params = model.parameters();
  model.train();
  for (int64_t step = 0; step < config.get_int("collab.finetune_steps"); ++step) {
    if (ctx.should_stop()) return false;
    data::Batch b = loader.next();
    Tensor loss = nn::cross_entropy(model.forward(b.inputs, task.padding_mask(b.inputs)), b.targets);  // (B, C) vs (B)
    optim::check_finite_loss(loss, "collab_compress fine-tuning", step + 1);
    opt.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(params, config.get_float("train.clip"));
    opt.step();
  }
  model.eval();
  return true;
}

void run_collab(const Config& config, RunContext& ctx) {
  const TaskData& task = ctx.data();
  const std::vector<int64_t> sizes = parse_sizes(config.get_string("collab.shared_key_sizes"));
  auto model = build_classifier(config, task);
  const auto layers = mha_layers(*model);
  const int64_t full = layers.front()->q_proj->weight.size(0);  // h*dk
  for (int64_t dk : sizes)
    if (dk > full)
      fail<ConfigError>("collab.shared_key_sizes: {} exceeds the model's h*dk = {} (model.attention = {})", dk, full,
                        config.get_string("model.attention"));
  const Spectra init = spectra_of(*model);  // before training: the baseline spectrum

  data::DataLoader loader(task.train, config.get_int("train.batch_size"), /*shuffle=*/true,
                          uint64_t(config.get_int("seed")), /*drop_last=*/true);
  Trainer trainer(ctx, *model);
  trainer.add_loader("train", loader);
  trainer.loss = [&](int64_t) {
    data::Batch b = loader.next();  // the global batch; this micro-batch's rows below
    Tensor x = trainer.micro_batch(b.inputs), y = trainer.micro_batch(b.targets);
    return nn::cross_entropy(model->forward(x, task.padding_mask(x)), y);  // (B / parts, C) vs (B / parts)
  };
  trainer.evaluate = [&](int64_t) {
    Scores s = evaluate_classifier(*model, task, task.val);
    return std::map<std::string, double>{{"val_acc", s.accuracy}, {"val_loss", s.loss}};
  };
  if (!trainer.fit()) return;
  model->eval();
  const double test_acc = evaluate_classifier(*model, task, task.test).accuracy;
  ctx.summary("val_acc", evaluate_classifier(*model, task, task.val).accuracy);
  ctx.summary("test_acc", test_acc);

  const Spectra trained = spectra_of(*model);
  write_spectra(ctx, trained, init);
  for (const auto& [name, s] : {std::pair{"q", &trained.q}, std::pair{"k", &trained.k}, std::pair{"qk", &trained.qk}}) {
    ctx.summary(fmt::format("rank90_{}", name), mean_rank(*s, 0.90));
    ctx.summary(fmt::format("rank95_{}", name), mean_rank(*s, 0.95));
  }
  for (const auto& [name, s] : {std::pair{"q", &init.q}, std::pair{"k", &init.k}, std::pair{"qk", &init.qk}})
    ctx.summary(fmt::format("init_rank90_{}", name), mean_rank(*s, 0.90));
  ctx.logf("collab_compress: 90% energy at rank q {:.1f}, k {:.1f}, products {:.1f} of {} (init: products {:.1f})",
           mean_rank(trained.q, 0.9), mean_rank(trained.k, 0.9), mean_rank(trained.qk, 0.9), trained.qk.front().size(),
           mean_rank(init.qk, 0.9));

  // Every fine-tuning, the control's and each Dk~'s, reads the same batches in the same order.
  const uint64_t seed = uint64_t(config.get_int("seed"));
  const uint64_t finetune_seed = seed + 1000;
  auto control = copy_classifier(*model);
  if (!finetune(*control, task, config, ctx, finetune_seed)) return;  // stopped: redone on resume
  const double acc_mha_ft = evaluate_classifier(*control, task, task.test).accuracy;
  ctx.summary("acc_mha_ft", acc_mha_ft);
  ctx.logf("collab_compress: mha fine-tuned {} steps: test acc {:.4f} (before {:.4f})",
           config.get_int("collab.finetune_steps"), acc_mha_ft, test_acc);

  plot::Series before{"converted", {}, {}}, after{"converted + fine-tuned", {}, {}}, base{"mha (trained)", {}, {}},
      base_ft{"mha + fine-tuned (control)", {}, {}};
  for (int64_t dk : sizes) {
    double cp_error = 0;
    auto converted = convert(*model, dk, config.get_int("collab.cp_iterations"), seed, cp_error);
    converted->eval();
    const double acc = evaluate_classifier(*converted, task, task.test).accuracy;
    if (!finetune(*converted, task, config, ctx, finetune_seed)) return;  // stopped: redone on resume
    const double acc_ft = evaluate_classifier(*converted, task, task.test).accuracy;
    ctx.summary(fmt::format("acc_dk{}", dk), acc);
    ctx.summary(fmt::format("acc_dk{}_ft", dk), acc_ft);
    ctx.summary(fmt::format("delta_dk{}_ft", dk), acc_ft - acc_mha_ft);
    ctx.summary(fmt::format("cp_error_dk{}", dk), cp_error);
    ctx.logf("collab_compress: Dk~ = {}: CP error {:.4f}, test acc {:.4f}, fine-tuned {:.4f} (mha {:.4f}, "
             "fine-tuned {:.4f})",
             dk, cp_error, acc, acc_ft, test_acc, acc_mha_ft);
    for (plot::Series* s : {&before, &after, &base, &base_ft}) s->x.push_back(double(dk));
    before.y.push_back(acc);
    after.y.push_back(acc_ft);
    base.y.push_back(test_acc);
    base_ft.y.push_back(acc_mha_ft);
  }
  plot::LineChart chart;
  chart.title = fmt::format("Test accuracy after to_collaborative (h*dk = {})", full);
  chart.x_label = "shared key size Dk~";
  chart.y_label = "test accuracy";
  chart.log_x = true;
  chart.series = {before, after, base, base_ft};
  plot::save_svg(ctx.artifact_path("accuracy_vs_dk.svg").string(), chart);
}

const bool registered = register_experiment({
    .name = "collab_compress",
    .description = "mha classifier: key/query energy spectrum, accuracy after to_collaborative per shared key size",
    .schema = collab_schema(),
    .presets = {{"quick", "task.train_size = 4000\ntrain.steps = 500\n"},
                {"full",
                 "task.train_size = 20000\ntask.val_size = 2000\ntask.test_size = 2000\nmodel.d_model = 128\n"
                 "model.attention = \"mha(heads=8)\"\nmodel.ffn_hidden = 256\ntrain.steps = 3000\n"
                 "train.eval_every = 250\ncollab.shared_key_sizes = \"4,8,16,32,64,128\"\n"
                 "collab.finetune_steps = 500\ncollab.cp_iterations = 1000\n"}},
    .run = run_collab,
    .check = check_model,
});

}  // namespace
}  // namespace attnlab::catalog
