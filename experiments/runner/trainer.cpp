// Trainer (trainer.hpp): the shared training loop and its checkpoint layout.
#include "experiments/runner/trainer.hpp"

#include <chrono>
#include <cmath>
#include <cstring>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "optim/clip.hpp"
#include "tensor/random.hpp"

namespace attnlab::runner {
namespace {

Tensor i64s(const std::vector<int64_t>& v) { return from_vector(v); }

// Exact int64 reads (item() goes through double, which would round a 64-bit generator state).
std::vector<int64_t> read_i64s(const TensorMap& m, const std::string& key, size_t n) {
  auto it = m.find(key);
  if (it == m.end()) fail<ValueError>("Trainer: checkpoint has no '{}'", key);
  Tensor t = contiguous(it->second);
  if (t.dtype() != kInt64 || size_t(t.numel()) != n)
    fail<ValueError>("Trainer: checkpoint entry '{}' should be {} int64 values", key, n);
  const int64_t* p = t.data<int64_t>();
  return std::vector<int64_t>(p, p + n);
}

TensorMap with_prefix(const std::string& prefix, const TensorMap& m) {
  TensorMap out;
  for (const auto& [k, v] : m) out[prefix + k] = v;
  return out;
}

TensorMap strip_prefix(const std::string& prefix, const TensorMap& m) {
  TensorMap out;
  for (const auto& [k, v] : m)
    if (k.compare(0, prefix.size(), prefix) == 0) out[k.substr(prefix.size())] = v;
  return out;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

Schema& add_train_keys(Schema& s, const TrainDefaults& d) {
  return s.add("train.steps", d.steps, "optimizer steps")
      .add("train.batch_size", d.batch_size, "examples per step")
      .add("train.lr", d.lr, "peak learning rate (AdamW)")
      .add("train.weight_decay", d.weight_decay, "AdamW decoupled weight decay (not on biases and norms)")
      .add("train.warmup", d.warmup, "linear warmup steps before the cosine decay")
      .add("train.min_lr_ratio", d.min_lr_ratio, "final learning rate as a fraction of train.lr")
      .add("train.clip", d.clip, "maximum gradient norm, 0 = no clipping")
      .add("train.eval_every", d.eval_every, "evaluate every this many steps (0 = only at the end)")
      .add("train.log_every", d.log_every, "a train_loss line every this many steps")
      .add("train.checkpoint_every", d.checkpoint_every, "checkpoint every this many steps (0 = on stop and at the end)");
}

Trainer::Trainer(RunContext& ctx, nn::Module& model) : ctx_(ctx), model_(model) {
  const Config& c = ctx.config();
  auto nonneg = [&](const std::string& key, int64_t lo) {
    int64_t v = c.get_int(key);
    if (v < lo) fail<ConfigError>("Trainer: {} must be >= {}, got {} (from {})", key, lo, v, c.origin(key));
    return v;
  };
  total_ = nonneg("train.steps", 0);
  log_every_ = nonneg("train.log_every", 1);
  eval_every_ = nonneg("train.eval_every", 0);
  checkpoint_every_ = nonneg("train.checkpoint_every", 0);
  const int64_t warmup = nonneg("train.warmup", 0);
  clip_ = c.get_float("train.clip");
  const double lr = c.get_float("train.lr"), wd = c.get_float("train.weight_decay"),
               min_ratio = c.get_float("train.min_lr_ratio");
  if (!(lr > 0)) fail<ConfigError>("Trainer: train.lr must be > 0, got {}", lr);
  if (!(clip_ >= 0)) fail<ConfigError>("Trainer: train.clip must be >= 0, got {}", clip_);
  if (!(min_ratio >= 0 && min_ratio <= 1)) fail<ConfigError>("Trainer: train.min_lr_ratio must be in [0, 1], got {}", min_ratio);
  for (auto& [name, p] : model.named_parameters()) params_.push_back(p);
  opt_ = std::make_unique<optim::AdamW>(optim::decay_groups(model.named_parameters(), wd),
                                        optim::AdamWOptions{.lr = lr, .weight_decay = wd});
  // warmup_cosine needs total > warmup; a run no longer than its warmup keeps a constant lr.
  auto schedule = total_ > warmup ? optim::LRSchedule::warmup_cosine(warmup, total_, min_ratio)
                                  : optim::LRSchedule::constant();
  sched_ = std::make_unique<optim::Scheduler>(*opt_, schedule);
}

void Trainer::add_loader(const std::string& name, data::DataLoader& loader) { loaders_[name] = &loader; }

TensorMap Trainer::state() const {
  TensorMap s = with_prefix("model.", model_.state_dict());
  for (auto& [k, v] : with_prefix("optim.", opt_->state_dict())) s[k] = v;
  for (auto& [k, v] : with_prefix("sched.", sched_->state_dict())) s[k] = v;
  for (auto& [name, l] : loaders_) s["loader." + name] = i64s({l->state().epoch, l->state().position});
  const Generator& g = default_generator();
  s["trainer.default_generator"] = i64s({int64_t(g.seed()), int64_t(g.offset())});
  // Generators the modules own (dropout layers, attention dropout, gate noise) are not in the
  // state_dict.
  for (auto& [name, gen] : model_.named_generators())
    s["rng." + name] = i64s({int64_t(gen->seed()), int64_t(gen->offset())});
  s["trainer.step"] = i64s({step_, loss_count_});
  s["trainer.loss_sum"] = from_vector(std::vector<double>{loss_sum_});
  return s;
}

void Trainer::restore(const TensorMap& s) {
  model_.load_state_dict(strip_prefix("model.", s));
  opt_->load_state_dict(strip_prefix("optim.", s));
  sched_->load_state_dict(strip_prefix("sched.", s));
  for (auto& [name, l] : loaders_) {
    auto v = read_i64s(s, "loader." + name, 2);
    l->set_state({v[0], v[1]});
  }
  auto g = read_i64s(s, "trainer.default_generator", 2);
  default_generator().set_state(uint64_t(g[0]), uint64_t(g[1]));
  for (auto& [name, gen] : model_.named_generators()) {
    // Checkpoints written before generators were registered name a Dropout's "rng.<module>"
    // and hold no attention generators: those keep their seeded state (such a run resumes
    // correctly, not bitwise).
    std::string key = "rng." + name;
    const std::string legacy = key.substr(0, key.size() - std::string(".generator").size());
    if (!s.count(key) && name.ends_with(".generator") && s.count(legacy)) key = legacy;
    if (!s.count(key)) continue;
    auto v = read_i64s(s, key, 2);
    gen->set_state(uint64_t(v[0]), uint64_t(v[1]));
  }
  auto st = read_i64s(s, "trainer.step", 2);
  step_ = st[0];
  loss_count_ = st[1];
  auto it = s.find("trainer.loss_sum");
  if (it == s.end() || it->second.numel() != 1) fail<ValueError>("Trainer: checkpoint has no 'trainer.loss_sum'");
  Tensor ls = contiguous(it->second);
  loss_sum_ = ls.dtype() == kFloat64 ? *ls.data<double>() : ls.item();
}

double Trainer::steps_per_second() const { return train_seconds_ > 0 ? double(session_steps_) / train_seconds_ : 0; }

bool Trainer::fit() {
  if (!loss) fail<ValueError>("Trainer::fit: set trainer.loss first");
  if (auto ck = ctx_.load_checkpoint()) restore(ck->second);
  model_.train();
  while (step_ < total_) {
    if (ctx_.should_stop()) {
      ctx_.save_checkpoint(step_, state());
      return false;
    }
    const double t0 = now();
    Tensor l = loss(step_);
    opt_->zero_grad();
    l.backward();
    if (clip_ > 0) optim::clip_grad_norm_(params_, clip_);
    const double lr = opt_->param_groups()[0].lr;
    opt_->step();
    sched_->step();
    const double value = l.item();
    train_seconds_ += now() - t0;
    ++session_steps_;
    ++step_;
    if (!std::isfinite(value)) fail<ValueError>("Trainer: the loss is {} at step {}", value, step_);
    loss_sum_ += value;
    ++loss_count_;
    ctx_.progress(step_, total_, value);

    std::map<std::string, double> line;
    if (step_ % log_every_ == 0 || step_ == total_) {
      line["train_loss"] = last_train_loss_ = loss_sum_ / double(loss_count_);
      line["lr"] = lr;
      loss_sum_ = 0;
      loss_count_ = 0;
    }
    if (evaluate && ((eval_every_ > 0 && step_ % eval_every_ == 0) || step_ == total_)) {
      NoGradGuard no_grad;
      model_.eval();
      last_eval_ = evaluate(step_);
      model_.train();
      for (auto& [k, v] : last_eval_) line[k] = v;
    }
    if (!line.empty()) ctx_.metrics(step_, line);  // one line per step: no step recorded twice
    if (step_ == total_ || (checkpoint_every_ > 0 && step_ % checkpoint_every_ == 0))
      ctx_.save_checkpoint(step_, state());
  }
  return true;
}

}  // namespace attnlab::runner
