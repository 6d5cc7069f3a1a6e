/// @file
/// Learning-rate schedules. An LRSchedule maps the step index t = 0, 1, 2, ... (the t-th call
/// of optimizer.step(), counting from 0) to a multiplier of each group's base lr; a Scheduler
/// applies it to an optimizer. With s = t + 1 (the 1-based number of the step being taken):
///
///   constant                              1
///   warmup: s <= warmup                   s / warmup        (every schedule but constant)
///   warmup_cosine(warmup, total, min_ratio), s > warmup:
///       q = min(1, (s - warmup) / (total - warmup))
///       min_ratio + (1 - min_ratio) * (1 + cos(pi * q)) / 2
///   warmup_linear(warmup, total), s > warmup:
///       max(0, (total - s) / (total - warmup))
///   warmup_inverse_sqrt(warmup), s > warmup:
///       sqrt(warmup / s)
///
/// So the first step runs at base_lr / warmup, step `warmup` (t = warmup - 1) at the full
/// base_lr, and the last step of a `total`-step run (t = total - 1) at min_ratio * base_lr
/// (cosine) or 0 (linear); later steps stay there. warmup = 0 means no warmup.
/// @ingroup optim
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "optim/optimizer.hpp"

/// @addtogroup optim
/// @{
namespace attnlab::optim {

/// A learning-rate schedule: the multiplier of the base lr at each step (see the file's description).
class LRSchedule {
 public:
  /// The schedule's family.
  enum class Kind { Constant, WarmupCosine, WarmupLinear, WarmupInverseSqrt };

  LRSchedule() = default;  ///< constant
  static LRSchedule constant();  ///< multiplier 1 at every step
  static LRSchedule warmup_cosine(int64_t warmup, int64_t total, double min_ratio = 0);  ///< linear warmup, then a cosine from 1 to min_ratio at `total`; ValueError for warmup < 0 or total <= warmup
  static LRSchedule warmup_linear(int64_t warmup, int64_t total);  ///< linear warmup, then a linear decay to 0 at `total`; ValueError for warmup < 0 or total <= warmup
  static LRSchedule warmup_inverse_sqrt(int64_t warmup);  ///< linear warmup, then sqrt(warmup / s) (Vaswani et al. 2017)

  /// From the config form: "constant", "warmup_cosine(warmup=100,total=1000,min_ratio=0.1)",
  /// "warmup_linear(warmup=10, total=500)", "warmup_inverse_sqrt(warmup=4000)". Options are
  /// name=value (any order, spaces allowed); min_ratio defaults to 0. Unknown schedules,
  /// unknown, repeated or missing options and bad values throw ValueError.
  static LRSchedule parse(const std::string& spec);
  /// The form parse() reads back (round-trips exactly).
  std::string str() const;

  /// The multiplier at step t >= 0.
  double multiplier(int64_t t) const;

  Kind kind() const { return kind_; }  ///< the schedule's family
  int64_t warmup() const { return warmup_; }  ///< warmup steps
  int64_t total() const { return total_; }  ///< the step where the decay ends (0 for constant and inverse sqrt)
  double min_ratio() const { return min_ratio_; }  ///< warmup_cosine's final multiplier

 private:
  LRSchedule(Kind kind, int64_t warmup, int64_t total, double min_ratio);
  Kind kind_ = Kind::Constant;
  int64_t warmup_ = 0;
  int64_t total_ = 0;
  double min_ratio_ = 0;
};

/// Drives an optimizer's learning rates: each group's lr = base_lr * schedule.multiplier(t).
/// The base lrs are the groups' lrs when the Scheduler is built, and construction already sets
/// the lrs for t = 0, so the loop is `opt.step(); sched.step();`. The optimizer must outlive
/// the Scheduler.
class Scheduler {
 public:
  Scheduler(Optimizer& optimizer, LRSchedule schedule);  ///< takes the groups' lrs as base lrs and sets the lrs for t = 0

  /// Advances t by one and sets the lrs for the next optimizer step.
  void step();
  int64_t t() const { return t_; }  ///< the steps taken so far
  double multiplier() const { return schedule_.multiplier(t_); }  ///< the multiplier of the next optimizer step
  const std::vector<double>& base_lrs() const { return base_lrs_; }  ///< one base lr per group
  const LRSchedule& schedule() const { return schedule_; }  ///< the schedule applied

  /// For checkpoints: "t" (int64 0-d) and "base_lrs" (float64, one per group).
  TensorMap state_dict() const;
  /// Restores t and the base lrs exactly and sets the optimizer's lrs for step t. Throws
  /// ValueError on a missing or unknown key or a group count that does not match.
  void load_state_dict(const TensorMap& dict);

 private:
  void apply();
  Optimizer* optimizer_;
  LRSchedule schedule_;
  std::vector<double> base_lrs_;
  int64_t t_ = 0;
};

}  // namespace attnlab::optim
/// @}
