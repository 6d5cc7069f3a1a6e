// Trainer: the training loop most experiments share (docs/experiments.md). AdamW with the usual
// decay/no-decay split, a warmup-cosine schedule, gradient-norm clipping, a mean train_loss
// every train.log_every steps, an evaluation every train.eval_every steps, checkpoints every
// train.checkpoint_every steps, on a stop signal and at the end, and exact resumption.
//
// A checkpoint holds everything the next step depends on: the model's state_dict ("model."),
// the optimizer ("optim."), the scheduler ("sched."), each added loader's {epoch, position}
// ("loader.<name>."), the process-wide default generator (dropout and sampling in modules),
// the generators of nn::Dropout layers ("rng.<module>"), the context's generator (through
// RunContext::save_checkpoint), the step and the partial train_loss window. So a run stopped at
// any step and resumed ends with parameters and metrics bitwise equal to an uninterrupted run
// (with the same thread count; tests/runner checks it with residual dropout on).
// Limitation: generators that attention layers own (attention dropout, Hard Concrete gates,
// random features redrawn in training) are not in any state_dict and nn/ has no API to list
// them, so a run using those in train mode resumes exactly only up to their draws.
//
// Experiments that need another loop can skip the Trainer and use RunContext directly.
#pragma once
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "experiments/data/loader.hpp"
#include "experiments/runner/experiment.hpp"
#include "nn/module.hpp"
#include "optim/adam.hpp"
#include "optim/schedule.hpp"

namespace attnlab::runner {

// The train.* keys the Trainer reads, with these defaults.
struct TrainDefaults {
  int64_t steps = 200;
  int64_t batch_size = 32;
  double lr = 1e-3;
  double weight_decay = 0.01;
  int64_t warmup = 20;
  double min_lr_ratio = 0.1;
  double clip = 1.0;          // max gradient norm; 0 = no clipping
  int64_t eval_every = 100;   // 0 = only at the end
  int64_t log_every = 10;
  int64_t checkpoint_every = 0;  // 0 = only on stop and at the end
};
Schema& add_train_keys(Schema& schema, const TrainDefaults& defaults = {});

class Trainer {
 public:
  // Builds AdamW over model.named_parameters() and the schedule from ctx.config()'s train.*.
  Trainer(RunContext& ctx, nn::Module& model);

  // One training step's loss (a scalar with a graph); draws its own batch (from a loader added
  // with add_loader, or from ctx.generator()).
  std::function<Tensor(int64_t step)> loss;
  // Optional: metrics of an evaluation at `step`, run under NoGradGuard in eval mode.
  std::function<std::map<std::string, double>(int64_t step)> evaluate;

  // A loader whose position is checkpointed.
  void add_loader(const std::string& name, data::DataLoader& loader);

  // Restores the last checkpoint (if any), then trains to train.steps. Returns true when every
  // step is done (a final checkpoint is saved), false when ctx.should_stop() interrupted it (a
  // checkpoint at the current step is saved).
  bool fit();

  int64_t step() const { return step_; }
  int64_t total_steps() const { return total_; }
  // Training steps per second in this session (evaluation excluded); 0 before any step.
  double steps_per_second() const;
  optim::AdamW& optimizer() { return *opt_; }
  // The train_loss of the last metrics line (NaN before the first).
  double last_train_loss() const { return last_train_loss_; }
  // The last evaluation's metrics (empty before the first).
  const std::map<std::string, double>& last_eval() const { return last_eval_; }

 private:
  TensorMap state() const;
  void restore(const TensorMap& state);
  RunContext& ctx_;
  nn::Module& model_;
  std::unique_ptr<optim::AdamW> opt_;
  std::unique_ptr<optim::Scheduler> sched_;
  std::vector<Tensor> params_;
  std::map<std::string, data::DataLoader*> loaders_;
  std::map<std::string, double> last_eval_;
  int64_t total_, log_every_, eval_every_, checkpoint_every_;
  double clip_;
  int64_t step_ = 0;
  double last_train_loss_ = std::numeric_limits<double>::quiet_NaN();
  double loss_sum_ = 0;    // train_loss window
  int64_t loss_count_ = 0;
  double train_seconds_ = 0;
  int64_t session_steps_ = 0;
};

}  // namespace attnlab::runner
