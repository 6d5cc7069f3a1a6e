/// @file
/// Trainer: the training loop most experiments share (docs/experiments.md). AdamW with the usual
/// decay/no-decay split, a warmup-cosine schedule, gradient-norm clipping, a mean train_loss
/// every train.log_every steps, an evaluation every train.eval_every steps, checkpoints every
/// train.checkpoint_every steps, on a stop signal and at the end, and exact resumption.
///
/// A checkpoint holds everything the next step depends on: the model's state_dict ("model."),
/// the optimizer ("optim."), the scheduler ("sched."), each added loader's {epoch, position}
/// ("loader.<name>."), the process-wide default generator (dropout and sampling in modules),
/// the generators of nn::Dropout layers ("rng.<module>"), the context's generator (through
/// RunContext::save_checkpoint), the step and the partial train_loss window. So a run stopped at
/// any step and resumed ends with parameters and metrics bitwise equal to an uninterrupted run
/// (with the same thread count; tests/runner checks it with residual dropout on).
/// Limitation: generators that attention layers own (attention dropout, Hard Concrete gates,
/// random features redrawn in training) are not in any state_dict and nn/ has no API to list
/// them, so a run using those in train mode resumes exactly only up to their draws.
///
/// Two keys change where training starts and how parameters are optimized (docs/experiments.md):
/// train.init_from loads the model tensors of another run's checkpoint before the first step of
/// a fresh run (fine-tuning, e.g. adding Hard Concrete gates to a converged model), and
/// train.groups gives parameters matched by name their own peak lr and weight decay.
///
/// train.accumulate and data-parallel ranks (docs/distributed.md): train.batch_size is the global
/// batch of one step. It is cut into ranks x train.accumulate equal micro-batches; rank r runs
/// micro-batches r * accumulate ... (r + 1) * accumulate - 1, one forward and backward each.
/// Every loss call of a step starts from the same generator and loader state, so it draws the
/// same global batch, and takes its rows with micro_batch(). The gradients are summed over the
/// micro-batches (autograd accumulation), then over the ranks (dist::all_reduce_sum) and divided
/// by their number: the gradient of the mean of the micro-batch losses. Rank 0 alone reads the
/// checkpoint (or train.init_from) and broadcasts the whole training state before the first step;
/// the ranks then stay equal because each applies the same update to the same gradients.
///
/// Experiments that need another loop can skip the Trainer and use RunContext directly (such a
/// loop runs whole on every rank under mpirun).
/// @ingroup runner
#pragma once
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "experiments/data/loader.hpp"
#include "experiments/runner/experiment.hpp"
#include "nn/module.hpp"
#include "optim/adam.hpp"
#include "optim/schedule.hpp"

/// @addtogroup runner
/// @{
namespace attnlab::runner {

/// The train.* keys the Trainer reads, with these defaults.
struct TrainDefaults {
  int64_t steps = 200;  ///< train.steps: optimizer steps
  int64_t batch_size = 32;  ///< train.batch_size: examples per step (the global batch)
  double lr = 1e-3;  ///< train.lr: the peak learning rate
  double weight_decay = 0.01;  ///< train.weight_decay: AdamW's decoupled decay on weights (not biases or norms)
  int64_t warmup = 20;  ///< train.warmup: steps of linear warmup
  double min_lr_ratio = 0.1;  ///< train.min_lr_ratio: the cosine schedule's final lr / peak lr
  double clip = 1.0;          ///< max gradient norm; 0 = no clipping
  int64_t eval_every = 100;   ///< 0 = only at the end
  int64_t log_every = 10;    ///< train.log_every: steps between metrics lines
  int64_t checkpoint_every = 0;  ///< 0 = only on stop and at the end
  std::string init_from = "";    ///< a run directory or checkpoint file; "" = random initialisation
  std::string groups = "";       ///< parameter groups by name pattern (parse_groups); "" = none
  int64_t accumulate = 1;        ///< micro-batches per step on each rank
};
/// The upper bound of train.steps and of the step counts beside it (docs/experiments.md, "Bounded
/// counts"): 10^8 steps, years of training at the speeds of this machine.
inline constexpr int64_t kMaxSteps = 100'000'000;
Schema& add_train_keys(Schema& schema, const TrainDefaults& defaults = {});

/// train.precision: "float32" (the default) or "bf16": matrix products under autocast
/// (autograd/autocast.hpp) with float32 master weights, gradients, optimizer state, norms,
/// softmax and losses. Whether bf16 engages depends on the build (oneDNN) and the CPU (native
/// bf16, or ATTNLAB_AUTOCAST=force); the run logs the decision and meta.json records it.
Schema& add_precision_key(Schema& schema);
/// The resolved train.precision: what was asked, whether bf16 engages, and why.
struct Precision {
  std::string requested;  ///< the key's value
  bool bf16 = false;      ///< whether products run in bf16
  std::string reason;     ///< the autocast decision's line, or "float32: train.precision = float32"
};
/// Validates train.precision (ConfigError naming the value and its origin) and decides.
Precision resolve_precision(const Config& config);

/// ConfigError naming train.batch_size, the rank count and train.accumulate when the global batch
/// does not split into world_size x train.accumulate equal micro-batches (or train.accumulate < 1).
void check_batch_split(const Config& config, int world_size);

// ---- train.groups ----

/// One entry of train.groups. An option left out keeps the default: lr = train.lr, and
/// weight_decay as the default split gives it (train.weight_decay on weights that are at least
/// 2-d and not biases or norms, 0 on the rest).
struct GroupSpec {
  std::string pattern;  ///< the parameter-name pattern the entry applies to
  std::optional<double> lr = {};            ///< peak lr; the schedule scales it like train.lr
  std::optional<double> weight_decay = {};  ///< the group's weight decay
};

/// Parses "PATTERN: lr=X, weight_decay=Y; PATTERN: ...". Entries are separated by ';', a pattern
/// from its options by ':', options by ','; spaces around any of them are ignored and an entry may
/// have no options. ConfigError starting "train.groups: " for an empty pattern, a missing ':', an
/// unknown or repeated option, or a value that is not a finite number >= 0.
std::vector<GroupSpec> parse_groups(const std::string& text);

/// Whether the whole of `name` matches `pattern`: '*' matches any run of characters (dots
/// included, so "*.gate.*" matches "blocks.0.attn.gate.log_alpha"), '?' one character,
/// anything else itself.
bool glob_match(std::string_view pattern, std::string_view name);

/// The optimizer's parameter groups. First the two groups of optim::decay_groups over the
/// parameters no spec claims (always present, so checkpoints of runs without train.groups keep
/// their layout), then per spec, in order: one group when it sets weight_decay, otherwise the two
/// of the default split. A parameter joins the first spec whose pattern matches its name.
/// ConfigError naming the pattern when a spec matches no parameter that an earlier spec left.
std::vector<optim::ParamGroup> make_param_groups(const nn::NamedTensors& named, double lr, double weight_decay,
                                                 const std::vector<GroupSpec>& specs);

// ---- train.init_from ----

/// What load_init_from copied into the model.
struct InitFromResult {
  std::string file;                           ///< the checkpoint read
  int64_t loaded = 0;                         ///< tensors copied into the model
  std::vector<std::string> fresh_gates = {};  ///< gate tensors of the model not in the checkpoint
  std::vector<std::string> unused_gates = {}; ///< gate tensors of the checkpoint not in the model
};

/// Copies the "model." tensors of a checkpoint into `model`. `path` is a run directory (its
/// checkpoint.safetensors, the latest one) or a checkpoint file. Every tensor of the model's
/// state_dict must be in the checkpoint with the same shape, and every model tensor of the
/// checkpoint must be in the model, except Hard Concrete gate tensors (a "gate" component in the
/// dotted name), which may be on one side only: a model that gains gates keeps their fresh
/// initialisation. ConfigError starting "train.init_from: " naming the path, or the file and each
/// offending tensor (with both shapes for a shape mismatch). Nothing is copied on error.
InitFromResult init_from_checkpoint(nn::Module& model, const std::string& path);

/// The runner's training loop: AdamW with a warmup-cosine schedule, clipping, evaluation, checkpoints and resume, from the train.* keys (docs/experiments.md).
class Trainer {
 public:
  /// Builds AdamW over make_param_groups(model.named_parameters(), ...) and the schedule from
  /// ctx.config()'s train.*.
  Trainer(RunContext& ctx, nn::Module& model);

  /// One training step's loss (a scalar with a graph); draws its own batch (from a loader added
  /// with add_loader, or from ctx.generator()).
  std::function<Tensor(int64_t step)> loss;
  /// Optional: metrics of an evaluation at `step`, run under NoGradGuard in eval mode.
  std::function<std::map<std::string, double>(int64_t step)> evaluate;

  /// A loader whose position is checkpointed.
  void add_loader(const std::string& name, data::DataLoader& loader);

  /// The rows of the global batch `batch` (first dimension = train.batch_size) that the current
  /// loss call computes: all of them with one rank and train.accumulate = 1, otherwise micro-batch
  /// rank * accumulate + m of ranks x accumulate equal parts. A loss must pass every batch tensor
  /// through it when train.accumulate > 1 or under mpirun (ValueError otherwise).
  Tensor micro_batch(const Tensor& batch);

  /// Restores the last checkpoint (if any; otherwise, in a fresh run, loads train.init_from),
  /// then trains to train.steps. Returns true when every step is done (a final checkpoint is
  /// saved), false when ctx.should_stop() interrupted it (a checkpoint at the current step is
  /// saved).
  bool fit();

  int64_t step() const { return step_; }  ///< the steps done so far
  int64_t total_steps() const { return total_; }  ///< train.steps
  /// Training steps per second since this process started training (evaluation excluded); 0 before any step.
  double steps_per_second() const;
  optim::AdamW& optimizer() { return *opt_; }  ///< the optimizer (its groups, lrs and state)
  /// The train_loss of the last metrics line (NaN before the first).
  double last_train_loss() const { return last_train_loss_; }
  /// The last evaluation's metrics (empty before the first).
  const std::map<std::string, double>& last_eval() const { return last_eval_; }

 private:
  TensorMap state() const;
  void restore(const TensorMap& state);
  void start();                 ///< checkpoint or init_from on rank 0, then share_state
  void share_state();           ///< rank 0's state on every rank
  double compute_gradients();   ///< the step's forward and backward passes; returns the mean loss
  double average_gradients(double loss_sum, int64_t parts);
  bool stop_requested() const;
  void report_communication();
  RunContext& ctx_;
  nn::Module& model_;
  std::unique_ptr<optim::AdamW> opt_;
  std::unique_ptr<optim::Scheduler> sched_;
  std::vector<Tensor> params_;
  std::map<std::string, data::DataLoader*> loaders_;
  std::map<std::string, double> last_eval_;
  std::string init_from_;
  int64_t total_, log_every_, eval_every_, checkpoint_every_;
  double clip_;
  int64_t accumulate_ = 1;
  int64_t micro_ = 0;          ///< the micro-batch the current loss call computes
  bool micro_batch_used_ = false;
  bool stop_agreed_ = false;   ///< every rank saw the stop flag of some rank in the last reduction
  int64_t step_ = 0;
  double last_train_loss_ = std::numeric_limits<double>::quiet_NaN();
  double loss_sum_ = 0;    ///< train_loss window
  int64_t loss_count_ = 0;
  double train_seconds_ = 0;
  int64_t session_steps_ = 0;
};

}  // namespace attnlab::runner
/// @}
