// `recall`: recall against state size. A token model (embedding, learned positions,
// model.layers blocks of model.attention + FFN + norms, a per-position output head) trained on
// a generated recall task with one target per scored position: `mqar` (multi-query associative
// recall, Arora et al. 2023) or `induction` (induction copying, Olsson et al. 2022); token
// layouts in experiments/data/mqar.hpp. Cross-entropy on the scored positions only.
// Metrics: train_loss and lr every train.log_every steps, val_acc at each evaluation;
// summary: val_acc, test_acc (fraction of scored positions predicted exactly), train_loss, the
// layer costs state_per_token and density at task.length (nn/attention/costs.hpp), steps_per_s,
// peak_rss_mb, params.
#include "attnlab.hpp"
#include "experiments/models/models.hpp"
#include "experiments/data/mqar.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/trainer.hpp"
#include "nn/attention/costs.hpp"
#include "nn/init.hpp"
#include "nn/loss.hpp"

namespace attnlab::catalog {
namespace {

using namespace runner;
using namespace models;

Schema recall_schema() {
  Schema s;
  add_task_keys(s, "mqar");
  s.add("task.num_queries", int64_t(0), "mqar: queries per example, distinct keys of its pairs (0 = task.num_pairs)");
  s.add("task.pair_tokens", int64_t(1),
        "mqar: positions per key-value pair, 1 (one id per pair) or 2 (k v, Zoology's layout; docs/experiments.md)");
  s.bound("task.num_queries", 0, 1 << 20).bound("task.pair_tokens", 0, 1 << 20);
  add_model_keys(s, {.attention = "mha(heads=2)", .d_model = 32, .layers = 2, .ffn_hidden = 64});
  s.add("model.causal", "auto",
        "auto (false for mqar, true for induction) | true | false: causal self-attention in every block");
  s.add("model.positions", "learned", "learned (pos_emb of task.length rows) | none (order from the attention alone)");
  add_train_keys(s, {.steps = 1500, .batch_size = 32, .lr = 3e-3, .warmup = 50, .eval_every = 500});
  return s;
}

// model.causal resolved for the task; ConfigError naming the key for another value, and for
// non-causal attention on induction, whose next token is in the input.
bool causal_of(const Config& c) {
  const std::string v = c.get_string("model.causal"), task = c.get_string("task.name");
  if (v != "auto" && v != "true" && v != "false")
    fail<ConfigError>("model.causal must be auto, true or false, got '{}' (from {})", v, c.origin("model.causal"));
  if (task == "induction" && v == "false")
    fail<ConfigError>("model.causal = false (from {}) with task.name = induction: a non-causal layer sees the next "
                      "token it is asked to predict; use model.causal = true or auto",
                      c.origin("model.causal"));
  return v == "auto" ? task == "induction" : v == "true";
}

void check_recall(const Config& c) {
  check_model(c);
  causal_of(c);
  const std::string task = c.get_string("task.name");
  if (task != "mqar" && task != "induction")
    fail<ConfigError>("task.name = '{}' (from {}): recall trains on mqar or induction", task, c.origin("task.name"));
}

// Token embedding + learned positions -> blocks -> final norm -> per-position logits.
class RecallModel : public nn::Module {
 public:
  RecallModel(const nn::BlockConfig& block, int64_t layers, int64_t vocab, int64_t classes, int64_t max_len,
              bool learned_positions, bool causal)
      : causal(causal) {
    const int64_t D = block.d_model;
    tok_emb = register_module("tok_emb", std::make_shared<nn::Embedding>(vocab, D));
    if (learned_positions) pos_emb = register_module("pos_emb", std::make_shared<nn::Embedding>(max_len, D));
    blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
    for (int64_t i = 0; i < layers; ++i) blocks->push_back(std::make_shared<nn::TransformerBlock>(block));
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(D, block.norm_eps));
    head = register_module("head", std::make_shared<nn::Linear>(D, classes));
    // CausalLM's small embedding init (nn/transformer.cpp): the blocks steer the residual stream early.
    nn::init::normal_(tok_emb->weight, 0.0, 0.02);
    if (pos_emb) nn::init::normal_(pos_emb->weight, 0.0, 0.02);
  }
  // tokens (B, N) -> logits (B, N, C)
  Tensor forward(const Tensor& tokens) {
    Tensor x = embedding(tok_emb->weight, tokens);  // (B, N, D)
    if (pos_emb) x = x + unsqueeze(narrow(pos_emb->weight, 0, 0, tokens.size(1)), 0);  // (B, N, D)
    for (const auto& m : *blocks) x = static_cast<nn::TransformerBlock&>(*m).forward(x, {}, causal);
    return (*head)((*norm)(x));  // (B, N, C)
  }
  nn::Attention& attention(size_t layer) { return *blocks->at<nn::TransformerBlock>(layer)->attn; }
  std::string type_name() const override { return "RecallModel"; }

  bool causal;
  std::shared_ptr<nn::Embedding> tok_emb, pos_emb;
  std::shared_ptr<nn::ModuleList> blocks;
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Linear> head;
};

// The fraction of scored positions (targets != kIgnoreTarget) whose argmax is the target.
double accuracy(RecallModel& model, const data::TensorDataset& split, int64_t batch = 256) {
  NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0, scored = 0;
  for (int64_t i = 0; i < split.size(); i += batch) {
    stop_point();  // a stop signal is honoured between batches (RunStopped)
    const int64_t b = std::min(batch, split.size() - i);
    Tensor x = narrow(split.inputs, 0, i, b), y = narrow(split.targets, 0, i, b);  // (b, N) each
    correct += sum(eq(argmax(model.forward(x), -1), y)).item<int64_t>();          // ignored targets never match
    scored += sum(ne(y, double(data::kIgnoreTarget))).item<int64_t>();
  }
  model.train();
  return scored ? double(correct) / double(scored) : 0;
}

void run_recall(const Config& config, RunContext& ctx) {
  const TaskData& task = ctx.data();
  const bool causal = causal_of(config);
  const nn::BlockConfig block = block_config(config);
  auto model = std::make_shared<RecallModel>(block, config.get_int("model.layers"), task.vocab_size, task.num_classes,
                                             task.seq_len,
                                             config.get_string("model.positions") == "learned", causal);
  const int64_t n = task.seq_len;
  const double state = nn::attention_state_per_token(model->attention(0), n);
  const double density = nn::attention_density(model->attention(0), n, causal);
  ctx.logf("recall: {} on {} (N {}, {}, {} parameters): state_per_token {:.3f}, density {:.4f}", block.attention,
           task.name, n, causal ? "causal" : "bidirectional", model->num_parameters(), state, density);
  data::DataLoader loader(task.train, config.get_int("train.batch_size"), /*shuffle=*/true,
                          uint64_t(config.get_int("seed")), /*drop_last=*/true);
  Trainer trainer(ctx, *model);
  trainer.add_loader("train", loader);
  trainer.loss = [&](int64_t) {
    data::Batch b = loader.next();
    Tensor x = trainer.micro_batch(b.inputs), y = trainer.micro_batch(b.targets);  // (B / parts, N) each
    Tensor logits = model->forward(x);                                              // (B / parts, N, C)
    return nn::cross_entropy(reshape(logits, {-1, task.num_classes}), reshape(y, {-1}), data::kIgnoreTarget);
  };
  trainer.evaluate = [&](int64_t) { return std::map<std::string, double>{{"val_acc", accuracy(*model, task.val)}}; };
  if (!trainer.fit()) return;
  ctx.summary("val_acc", accuracy(*model, task.val));
  ctx.summary("test_acc", accuracy(*model, task.test));
  ctx.summary("train_loss", trainer.last_train_loss());
  ctx.summary("state_per_token", state);
  // Recorded for the variants whose pattern restricts the pairs, so a report can mark one that is
  // dense at this N (docs/experiments.md, "Claims and verdicts"); the others mix every pair.
  if (nn::attention_restricts_pairs(model->attention(0))) ctx.summary("density", density);
  ctx.summary("steps_per_s", trainer.steps_per_second());
  ctx.summary("peak_rss_mb", peak_rss_mb());
  ctx.summary("params", double(model->num_parameters()));
}

const bool registered = register_experiment({
    .name = "recall",
    .description = "recall against state size: a per-position model with model.attention on mqar or induction "
                   "(val_acc, test_acc, state_per_token, density)",
    .schema = recall_schema(),
    // The tuned N = 64 task (docs/experiments.md, "Tuning"): P = N/4 pairs over K = N/2 keys,
    // enough examples that 1000 steps of batch 32 see each about once.
    .presets = {{"quick", "task.num_pairs = 16\ntask.num_keys = 32\ntask.train_size = 30000\ntrain.steps = 300\n"
                          "train.eval_every = 100\n"},
                {"full", "task.num_pairs = 16\ntask.num_keys = 32\ntask.train_size = 30000\ntrain.steps = 1000\n"}},
    .run = run_recall,
    .check = check_recall,
});

}  // namespace
}  // namespace attnlab::catalog
