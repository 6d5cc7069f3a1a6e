// Trainer (trainer.hpp): the shared training loop and its checkpoint layout, the parameter
// groups of train.groups and the initialisation from another run of train.init_from.
#include "experiments/runner/trainer.hpp"

#include "experiments/runner/stop_scope.hpp"

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <fmt/ranges.h>

#include "autograd/autocast.hpp"
#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "dist/distributed.hpp"
#include "optim/clip.hpp"
#include "optim/finite_loss.hpp"
#include "tensor/kernels.hpp"
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

std::string_view trimmed(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\n") - b + 1);
}

// The pieces of `s` between `sep`s, trimmed.
std::vector<std::string_view> split_trimmed(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t start = 0;;) {
    const size_t end = s.find(sep, start);
    out.push_back(trimmed(s.substr(start, end == std::string_view::npos ? end : end - start)));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

double group_option_value(std::string_view pattern, std::string_view name, std::string_view text) {
  double v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size())
    fail<ConfigError>("train.groups: '{}': {} = '{}' is not a number", pattern, name, text);
  if (!std::isfinite(v) || v < 0)
    fail<ConfigError>("train.groups: '{}': {} must be a finite number >= 0, got {}", pattern, name, text);
  return v;
}

// A Hard Concrete gate's tensor: a "gate" module somewhere on the dotted path.
bool is_gate_tensor(const std::string& name) { return name.starts_with("gate.") || name.find(".gate.") != std::string::npos; }

std::filesystem::path init_checkpoint_file(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) fail<ConfigError>("train.init_from: empty path");
  const fs::path p(path);
  if (!fs::exists(p)) fail<ConfigError>("train.init_from: '{}' does not exist", path);
  if (!fs::is_directory(p)) return p;
  if (!fs::exists(p / "checkpoint.safetensors"))
    fail<ConfigError>("train.init_from: '{}' holds no checkpoint (no checkpoint.safetensors; did the run save one?)", path);
  return p / "checkpoint.safetensors";
}

// What a loss call draws from: the context's, the default and the modules' generators and the
// loaders. Restored before each micro-batch after the first, so that every micro-batch of a step
// draws the same global batch (and the same dropout stream).
class DrawState {
 public:
  DrawState(Generator& ctx, const nn::Module& model, const std::map<std::string, data::DataLoader*>& loaders) {
    keep(&ctx);
    keep(&default_generator());
    for (auto& [name, gen] : model.named_generators()) keep(gen);
    for (auto& [name, l] : loaders) loaders_.emplace_back(l, l->state());
  }
  void restore() const {
    for (const auto& [gen, seed, offset] : generators_) gen->set_state(seed, offset);
    for (const auto& [l, st] : loaders_) l->set_state(st);
  }

 private:
  void keep(Generator* g) { generators_.emplace_back(g, g->seed(), g->offset()); }
  std::vector<std::tuple<Generator*, uint64_t, uint64_t>> generators_;
  std::vector<std::pair<data::DataLoader*, data::LoaderState>> loaders_;
};

}  // namespace

void check_batch_split(const Config& c, int world_size) {
  const int64_t accumulate = c.get_int("train.accumulate"), batch = c.get_int("train.batch_size");
  if (accumulate < 1)
    fail<ConfigError>("train.accumulate must be >= 1, got {} (from {})", accumulate, c.origin("train.accumulate"));
  const int64_t parts = int64_t(world_size) * accumulate;
  if (batch % parts != 0)
    fail<ConfigError>("train.batch_size = {} (from {}) does not split into {} ranks x train.accumulate = {} equal "
                      "micro-batches; use a multiple of {}",
                      batch, c.origin("train.batch_size"), world_size, accumulate, parts);
}

std::vector<GroupSpec> parse_groups(const std::string& text) {
  std::vector<GroupSpec> specs;
  if (trimmed(text).empty()) return specs;
  for (std::string_view entry : split_trimmed(text, ';')) {
    if (entry.empty()) continue;  // "a: lr=1;" or "a: lr=1;; b: lr=2"
    const size_t colon = entry.find(':');
    if (colon == std::string_view::npos)
      fail<ConfigError>("train.groups: '{}' has no ':' (expected \"PATTERN: lr=X, weight_decay=Y\")", entry);
    GroupSpec spec{.pattern = std::string(trimmed(entry.substr(0, colon)))};
    if (spec.pattern.empty()) fail<ConfigError>("train.groups: '{}' has an empty pattern", entry);
    const std::string_view options = trimmed(entry.substr(colon + 1));
    if (!options.empty()) {
      for (std::string_view option : split_trimmed(options, ',')) {
        const size_t eq = option.find('=');
        const std::string_view name = trimmed(option.substr(0, eq));
        if (eq == std::string_view::npos || name.empty())
          fail<ConfigError>("train.groups: '{}': expected name=value, got '{}'", spec.pattern, option);
        std::optional<double>* slot = name == "lr" ? &spec.lr : name == "weight_decay" ? &spec.weight_decay : nullptr;
        if (!slot) fail<ConfigError>("train.groups: '{}': unknown option '{}' (options: lr, weight_decay)", spec.pattern, name);
        if (slot->has_value()) fail<ConfigError>("train.groups: '{}': option '{}' given twice", spec.pattern, name);
        *slot = group_option_value(spec.pattern, name, trimmed(option.substr(eq + 1)));
      }
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

bool glob_match(std::string_view pattern, std::string_view name) {
  // Greedy matching with one backtrack point: on a mismatch, the last '*' absorbs one more
  // character. Linear in practice, and never exponential.
  size_t p = 0, n = 0, star = std::string_view::npos, star_n = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_n = n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++star_n;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<optim::ParamGroup> make_param_groups(const nn::NamedTensors& named, double lr, double weight_decay,
                                                 const std::vector<GroupSpec>& specs) {
  // Which spec claims each parameter (specs.size() = none).
  std::vector<size_t> owner(named.size(), specs.size());
  for (size_t s = 0; s < specs.size(); ++s) {
    bool any = false, fresh = false;
    for (size_t i = 0; i < named.size(); ++i) {
      if (!glob_match(specs[s].pattern, named[i].first)) continue;
      any = true;
      if (owner[i] == specs.size()) {
        owner[i] = s;
        fresh = true;
      }
    }
    if (!any) fail<ConfigError>("train.groups: pattern '{}' matches no parameter", specs[s].pattern);
    if (!fresh)
      fail<ConfigError>("train.groups: pattern '{}' matches only parameters of earlier groups", specs[s].pattern);
  }
  auto claimed_by = [&](size_t s) {
    nn::NamedTensors out;
    for (size_t i = 0; i < named.size(); ++i)
      if (owner[i] == s) out.push_back(named[i]);
    return out;
  };
  std::vector<optim::ParamGroup> groups = optim::decay_groups(claimed_by(specs.size()), weight_decay);
  for (optim::ParamGroup& g : groups) g.lr = lr;
  for (size_t s = 0; s < specs.size(); ++s) {
    const nn::NamedTensors mine = claimed_by(s);
    std::vector<optim::ParamGroup> split;
    if (specs[s].weight_decay) {
      // One group: the spec's decay applies to biases and norms too.
      split.push_back({.params = {}, .weight_decay = *specs[s].weight_decay});
      for (const auto& [name, p] : mine) {
        split[0].params.push_back(p);
        split[0].names.push_back(name);
      }
    } else {
      split = optim::decay_groups(mine, weight_decay);
    }
    for (optim::ParamGroup& g : split) {
      g.lr = specs[s].lr.value_or(lr);
      groups.push_back(std::move(g));
    }
  }
  return groups;
}

InitFromResult init_from_checkpoint(nn::Module& model, const std::string& path) {
  InitFromResult result{.file = init_checkpoint_file(path).string()};
  // The header first: a file whose tensors do not fit the model is refused before any data is read.
  std::map<std::string, Dims> saved;
  for (const auto& [name, shape] : safetensors_shapes(result.file))
    if (name.rfind("model.", 0) == 0) saved[name.substr(6)] = shape;
  if (saved.empty())
    fail<ConfigError>("train.init_from: {} holds no 'model.' tensors (not a Trainer checkpoint)", result.file);
  const TensorMap own = model.state_dict();
  std::vector<std::string> problems, take;
  for (const auto& [name, t] : own) {
    auto it = saved.find(name);
    if (it == saved.end()) {
      if (is_gate_tensor(name))
        result.fresh_gates.push_back(name);
      else
        problems.push_back(fmt::format("'{}' is not in the checkpoint", name));
    } else if (it->second != t.shape()) {
      problems.push_back(fmt::format("'{}' has shape {} in the checkpoint but {} in the model", name,
                                     to_string(it->second), to_string(t.shape())));
    } else {
      take.push_back(name);
    }
  }
  for (const auto& [name, shape] : saved) {
    if (own.count(name)) continue;
    if (is_gate_tensor(name))
      result.unused_gates.push_back(name);
    else
      problems.push_back(fmt::format("'{}' of the checkpoint is not in the model", name));
  }
  if (!problems.empty())
    fail<ConfigError>("train.init_from: {} does not fit the model: {}", result.file, fmt::join(problems, "; "));
  const TensorMap data = strip_prefix("model.", load_safetensors(result.file));
  TensorMap chosen;
  for (const std::string& name : take) chosen.emplace(name, data.at(name));
  model.load_state_dict(chosen, /*strict=*/false);
  result.loaded = int64_t(chosen.size());
  return result;
}

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
      .add("train.checkpoint_every", d.checkpoint_every, "checkpoint every this many steps (0 = on stop and at the end)")
      .add("train.init_from", d.init_from,
           "a run directory or checkpoint file whose model tensors start a fresh run (\"\" = none; ignored on resume)")
      .add("train.groups", d.groups,
           "parameter groups by name pattern: \"*.gate.*: lr=0.1, weight_decay=0; PATTERN: ...\" (\"\" = none)")
      .add("train.accumulate", d.accumulate,
           "micro-batches per step on each rank: gradients of train.batch_size / (ranks x this) rows each, summed, "
           "then averaged")
      .bound("train.steps", 0, kMaxSteps)
      .bound("train.batch_size", 1, 1 << 20)
      .bound("train.warmup", 0, kMaxSteps)
      .bound("train.eval_every", 0, kMaxSteps)
      .bound("train.log_every", 1, kMaxSteps)
      .bound("train.checkpoint_every", 0, kMaxSteps)
      .bound("train.accumulate", 1, 1 << 16);
}

Schema& add_precision_key(Schema& s) {
  return s.add("train.precision", "float32",
               "float32 | bf16: matrix products in bf16 with float32 accumulation and float32 master weights where "
               "oneDNN and the CPU's native bf16 allow (ATTNLAB_AUTOCAST=force: any CPU), else float32");
}

Precision resolve_precision(const Config& c) {
  Precision p;
  p.requested = c.get_string("train.precision");
  if (p.requested == "float32") {
    p.reason = "float32: train.precision = float32";
    return p;
  }
  if (p.requested != "bf16")
    fail<ConfigError>("train.precision must be float32 or bf16, got '{}' (from {})", p.requested,
                      c.origin("train.precision"));
  const AutocastDecision d = autocast_decision(autocast_policy_from_env());
  p.bf16 = d.bf16;
  p.reason = d.reason;
  return p;
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
  if (!(lr > 0) || std::isinf(lr)) fail<ConfigError>("Trainer: train.lr must be finite and > 0, got {}", lr);
  if (!(clip_ >= 0) || std::isinf(clip_))
    fail<ConfigError>("Trainer: train.clip must be finite and >= 0 (0 = no clipping), got {}", clip_);
  if (!(min_ratio >= 0 && min_ratio <= 1)) fail<ConfigError>("Trainer: train.min_lr_ratio must be in [0, 1], got {}", min_ratio);
  if (!(wd >= 0)) fail<ConfigError>("Trainer: train.weight_decay must be >= 0, got {}", wd);
  init_from_ = c.get_string("train.init_from");
  if (c.schema().find("train.accumulate")) {
    if (c.schema().find("train.batch_size")) check_batch_split(c, dist::world_size());
    accumulate_ = nonneg("train.accumulate", 1);
  }
  const nn::NamedTensors named = model.named_parameters();
  for (auto& [name, p] : named) params_.push_back(p);
  const std::vector<GroupSpec> specs = parse_groups(c.get_string("train.groups"));
  opt_ = std::make_unique<optim::AdamW>(make_param_groups(named, lr, wd, specs),
                                        optim::AdamWOptions{.lr = lr, .weight_decay = wd});
  // One line per spec; its optimizer groups follow the default two, one or two each
  // (make_param_groups).
  const auto& groups = opt_->param_groups();
  for (size_t s = 0, g = 2; s < specs.size(); ++s) {
    const size_t n = specs[s].weight_decay ? 1 : 2;
    size_t count = 0;
    for (size_t k = g; k < g + n; ++k) count += groups[k].params.size();
    ctx.logf("train.groups: '{}' (lr {}, weight_decay {}): {} parameters", specs[s].pattern, groups[g].lr,
             specs[s].weight_decay ? fmt::format("{}", *specs[s].weight_decay) : "as default", count);
    g += n;
  }
  // warmup_cosine needs total > warmup; a run no longer than its warmup keeps a constant lr.
  // The scheduler multiplies every group's own base lr by the same factor, so the groups of
  // train.groups keep their ratio to train.lr through warmup and decay.
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

Tensor Trainer::micro_batch(const Tensor& batch) {
  micro_batch_used_ = true;
  const int64_t parts = accumulate_ * dist::world_size();
  if (parts == 1) return batch;
  if (batch.dim() == 0 || batch.size(0) % parts != 0)
    fail<ConfigError>("Trainer::micro_batch: a batch of {} rows does not split into {} ranks x train.accumulate = {} "
                      "equal micro-batches; use a train.batch_size that is a multiple of {}",
                      batch.dim() ? batch.size(0) : 0, dist::world_size(), accumulate_, parts);
  const int64_t rows = batch.size(0) / parts;
  return contiguous(narrow(batch, 0, (dist::rank() * accumulate_ + micro_) * rows, rows));
}

void Trainer::start() {
  if (!dist::is_root()) return share_state();
  if (auto ck = ctx_.load_checkpoint()) {
    restore(ck->second);  // a resumed run continues its own training, whatever init_from says
    if (step_ > total_)
      fail<ValueError>("Trainer: the checkpoint is at step {}, beyond train.steps = {}; it is not this run's", step_,
                       total_);
  } else if (!init_from_.empty()) {
    InitFromResult r = init_from_checkpoint(model_, init_from_);
    ctx_.logf("init_from {}: {} tensors loaded", init_from_, r.loaded);
    if (!r.fresh_gates.empty())
      ctx_.logf("init_from {}: not in the checkpoint, freshly initialised: {}", init_from_, fmt::join(r.fresh_gates, ", "));
    if (!r.unused_gates.empty())
      ctx_.logf("init_from {}: gate tensors the model lacks, not loaded: {}", init_from_, fmt::join(r.unused_gates, ", "));
  }
  share_state();
}

void Trainer::share_state() {
  if (dist::world_size() == 1) return;
  TensorMap s;
  if (dist::is_root()) {
    s = state();
    s["run.generator"] = i64s({int64_t(ctx_.generator().seed()), int64_t(ctx_.generator().offset())});
  }
  dist::broadcast(s);
  if (dist::is_root()) return;
  restore(s);
  auto g = read_i64s(s, "run.generator", 2);
  ctx_.generator().set_state(uint64_t(g[0]), uint64_t(g[1]));
}

double Trainer::compute_gradients() {
  opt_->zero_grad();
  const int64_t parts = accumulate_ * dist::world_size();
  if (parts == 1) {
    Tensor l = loss(step_);
    const double value = optim::check_finite_loss(l, "Trainer", step_ + 1);
    l.backward();
    return value;
  }
  const DrawState draws(ctx_.generator(), model_, loaders_);
  double sum = 0;
  for (micro_ = 0; micro_ < accumulate_; ++micro_) {
    if (micro_ > 0) draws.restore();
    micro_batch_used_ = false;
    Tensor l = loss(step_);
    if (!micro_batch_used_)
      fail<ValueError>("Trainer: train.accumulate = {} with {} ranks needs a loss that takes its rows of the global "
                       "batch with Trainer::micro_batch, and this experiment's loss does not (use train.accumulate = 1 "
                       "and one process)",
                       accumulate_, dist::world_size());
    sum += l.item();
    l.backward();
  }
  micro_ = 0;
  return average_gradients(sum, parts);
}

// The reduction over micro-batches and ranks. A small reduction of doubles comes first: the loss
// sum, the stop flag, and per parameter whether some part gave it a gradient (a parameter no part
// reached keeps no gradient, as in one process); then the gradients, in buckets.
double Trainer::average_gradients(double loss_sum, int64_t parts) {
  std::vector<double> control{loss_sum, ctx_.should_stop() ? 1.0 : 0.0};
  for (const Tensor& p : params_) control.push_back(p.grad().defined() ? 1.0 : 0.0);
  dist::all_reduce_sum(control);
  stop_agreed_ = control[1] > 0;
  const double mean = control[0] / double(parts);
  optim::check_finite_loss(scalar_tensor(mean, kFloat64), "Trainer", step_ + 1);
  NoGradGuard no_grad;
  std::vector<size_t> which;
  std::vector<Tensor> grads;  // fresh copies: a gradient tensor may be shared with another's
  for (size_t i = 0; i < params_.size(); ++i) {
    if (control[2 + i] == 0) continue;
    const Tensor g = params_[i].grad();
    which.push_back(i);
    grads.push_back(g.defined() ? kernels::clone(g) : zeros_like(params_[i]));
  }
  dist::all_reduce_sum(grads);
  for (size_t k = 0; k < which.size(); ++k) params_[which[k]].set_grad(grads[k] / double(parts));
  return mean;
}

bool Trainer::stop_requested() const { return dist::world_size() == 1 ? ctx_.should_stop() : stop_agreed_; }

void Trainer::report_communication() {
  if (dist::world_size() == 1 || session_steps_ == 0) return;
  const dist::CommStats c = dist::comm_stats();
  const double steps = double(session_steps_), ms = 1000 * c.seconds / steps;
  ctx_.logf("data-parallel: {} ranks, {:.0f} bytes all-reduced per step in {:.1f} MPI calls, {:.2f} ms per step in "
            "MPI ({:.1f}% of the training time)",
            dist::world_size(), double(c.bytes) / steps, double(c.calls) / steps, ms,
            100 * c.seconds / std::max(train_seconds_, 1e-9));
  ctx_.summary("allreduce_bytes_per_step", double(c.bytes) / steps);
  ctx_.summary("allreduce_ms_per_step", ms);
}

bool Trainer::fit() {
  if (!loss) fail<ValueError>("Trainer::fit: set trainer.loss first");
  start();
  if (ctx_.dry_run()) return false;  // every check before the first step has run
  dist::reset_comm_stats();
  model_.train();
  while (step_ < total_) {
    if (stop_requested()) {
      ctx_.request_stop();  // a signal to another rank stops this one too
      ctx_.save_checkpoint(step_, state());
      return false;
    }
    const double t0 = now();
    const double value = compute_gradients();
    if (clip_ > 0) optim::clip_grad_norm_(params_, clip_);
    const double lr = opt_->param_groups()[0].lr;
    opt_->step();
    sched_->step();
    train_seconds_ += now() - t0;
    ++session_steps_;
    ++step_;
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
      try {
        const StopPointScope scope;  // a signal from the step itself waits for the next step
        last_eval_ = evaluate(step_);
      } catch (const RunStopped&) {
        // A stop signal during the evaluation: the step is trained, so its checkpoint is saved;
        // its evaluation is not recorded (its train_loss is).
        if (!line.empty()) ctx_.metrics(step_, line);
        ctx_.logf("stop signal during the evaluation at step {}: that evaluation is not recorded", step_);
        ctx_.request_stop();
        ctx_.save_checkpoint(step_, state());
        return false;
      }
      model_.train();
      for (auto& [k, v] : last_eval_) line[k] = v;
    }
    if (!line.empty()) ctx_.metrics(step_, line);  // one line per step: no step recorded twice
    if (step_ == total_ || (checkpoint_every_ > 0 && step_ % checkpoint_every_ == 0))
      ctx_.save_checkpoint(step_, state());
  }
  report_communication();
  return true;
}

}  // namespace attnlab::runner
