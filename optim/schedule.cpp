// Learning-rate schedules (formulas in schedule.hpp and docs/optim.md), their config-string
// parser (the grammar of tensor/option_string.hpp), and the Scheduler that applies one to an
// optimizer and checkpoints its position.
#include "optim/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>

#include <fmt/ranges.h>

#include "tensor/option_string.hpp"

namespace attnlab::optim {

namespace {

const char* kind_name(LRSchedule::Kind k) {
  switch (k) {
    case LRSchedule::Kind::Constant: return "constant";
    case LRSchedule::Kind::WarmupCosine: return "warmup_cosine";
    case LRSchedule::Kind::WarmupLinear: return "warmup_linear";
    case LRSchedule::Kind::WarmupInverseSqrt: return "warmup_inverse_sqrt";
  }
  return "?";
}

}  // namespace

LRSchedule::LRSchedule(Kind kind, int64_t warmup, int64_t total, double min_ratio)
    : kind_(kind), warmup_(warmup), total_(total), min_ratio_(min_ratio) {
  const char* name = kind_name(kind);
  if (warmup < 0) fail<ValueError>("{}: warmup must be >= 0, got {}", name, warmup);
  if (kind == Kind::WarmupCosine || kind == Kind::WarmupLinear) {
    if (total <= warmup)
      fail<ValueError>("{}: total must be greater than warmup, got total={} and warmup={}", name, total, warmup);
  }
  if (kind == Kind::WarmupInverseSqrt && warmup < 1)
    fail<ValueError>("{}: warmup must be >= 1 (the decay is sqrt(warmup / s)), got {}", name, warmup);
  if (!(min_ratio >= 0 && min_ratio <= 1))
    fail<ValueError>("{}: min_ratio must be in [0, 1], got {}", name, min_ratio);
}

LRSchedule LRSchedule::constant() { return LRSchedule(); }
LRSchedule LRSchedule::warmup_cosine(int64_t warmup, int64_t total, double min_ratio) {
  return LRSchedule(Kind::WarmupCosine, warmup, total, min_ratio);
}
LRSchedule LRSchedule::warmup_linear(int64_t warmup, int64_t total) {
  return LRSchedule(Kind::WarmupLinear, warmup, total, 0);
}
LRSchedule LRSchedule::warmup_inverse_sqrt(int64_t warmup) {
  return LRSchedule(Kind::WarmupInverseSqrt, warmup, 0, 0);
}

double LRSchedule::multiplier(int64_t t) const {
  if (t < 0) fail<ValueError>("LRSchedule::multiplier: step must be >= 0, got {}", t);
  if (kind_ == Kind::Constant) return 1.0;
  const double s = static_cast<double>(t) + 1;
  const double w = static_cast<double>(warmup_);
  if (s <= w) return s / w;
  switch (kind_) {
    case Kind::WarmupCosine: {
      const double q = std::min(1.0, (s - w) / (static_cast<double>(total_) - w));
      return min_ratio_ + (1 - min_ratio_) * (1 + std::cos(std::numbers::pi * q)) / 2;
    }
    case Kind::WarmupLinear:
      return std::max(0.0, (static_cast<double>(total_) - s) / (static_cast<double>(total_) - w));
    case Kind::WarmupInverseSqrt:
      return std::sqrt(w / s);
    case Kind::Constant:
      break;
  }
  return 1.0;
}

std::string LRSchedule::str() const {
  OptionString out{kind_name(kind_), {}};
  if (kind_ != Kind::Constant) out.options.emplace_back("warmup", std::to_string(warmup_));
  if (kind_ == Kind::WarmupCosine || kind_ == Kind::WarmupLinear) out.options.emplace_back("total", std::to_string(total_));
  if (kind_ == Kind::WarmupCosine) out.options.emplace_back("min_ratio", format_number(min_ratio_));
  return format_option_string(out, ",");
}

LRSchedule LRSchedule::parse(const std::string& spec) {
  const OptionString text = parse_option_string(spec, "LRSchedule::parse:");
  const std::string& name = text.name;

  struct Known {
    Kind kind;
    std::vector<std::string> options;  // the required ones first
    size_t required;
  };
  static const std::map<std::string, Known> known = {
      {"constant", {Kind::Constant, {}, 0}},
      {"warmup_cosine", {Kind::WarmupCosine, {"warmup", "total", "min_ratio"}, 2}},
      {"warmup_linear", {Kind::WarmupLinear, {"warmup", "total"}, 2}},
      {"warmup_inverse_sqrt", {Kind::WarmupInverseSqrt, {"warmup"}, 1}},
  };
  auto it = known.find(name);
  if (it == known.end()) {
    std::vector<std::string> names;
    for (const auto& [n, k] : known) names.push_back(n);
    fail<ValueError>("LRSchedule::parse: \"{}\": unknown schedule '{}'; expected one of {}", spec, name,
                     fmt::join(names, ", "));
  }
  const Known& k = it->second;

  std::map<std::string, double> values;
  for (const auto& [key, val] : text.options) {
    if (std::find(k.options.begin(), k.options.end(), key) == k.options.end()) {
      if (k.options.empty())
        fail<ValueError>("LRSchedule::parse: \"{}\": {} takes no options, got '{}'", spec, name, key);
      fail<ValueError>("LRSchedule::parse: \"{}\": unknown option '{}' for {}; expected {}", spec, key, name,
                       fmt::join(k.options, ", "));
    }
    const std::optional<double> v = parse_number(val);
    if (!v || !std::isfinite(*v))
      fail<ValueError>("LRSchedule::parse: \"{}\": option '{}' has value '{}', expected a number", spec, key, val);
    if (key != "min_ratio" && (*v != std::floor(*v) || std::abs(*v) > 1e15))
      fail<ValueError>("LRSchedule::parse: \"{}\": option '{}' must be an integer, got '{}'", spec, key, val);
    values[key] = *v;
  }
  for (size_t i = 0; i < k.required; ++i)
    if (!values.count(k.options[i]))
      fail<ValueError>("LRSchedule::parse: \"{}\": {} needs option '{}' (options: {})", spec, name, k.options[i],
                       fmt::join(k.options, ", "));
  auto get = [&](const char* key, double dflt) { return values.count(key) ? values[key] : dflt; };
  return LRSchedule(k.kind, static_cast<int64_t>(get("warmup", 0)), static_cast<int64_t>(get("total", 0)),
                    get("min_ratio", 0));
}

Scheduler::Scheduler(Optimizer& optimizer, LRSchedule schedule) : optimizer_(&optimizer), schedule_(schedule) {
  for (const ParamGroup& g : optimizer.param_groups()) base_lrs_.push_back(g.lr);
  apply();
}

void Scheduler::apply() {
  auto& groups = optimizer_->param_groups();
  if (groups.size() != base_lrs_.size())
    fail<ValueError>("Scheduler: the optimizer has {} groups but the scheduler has {} base lrs", groups.size(),
                     base_lrs_.size());
  const double m = schedule_.multiplier(t_);
  for (size_t g = 0; g < groups.size(); ++g) groups[g].lr = base_lrs_[g] * m;
}

void Scheduler::step() {
  ++t_;
  apply();
}

TensorMap Scheduler::state_dict() const {
  TensorMap out;
  out["t"] = scalar_tensor(static_cast<double>(t_), kInt64);
  out["base_lrs"] = from_vector(base_lrs_);
  return out;
}

void Scheduler::load_state_dict(const TensorMap& dict) {
  for (const auto& [key, t] : dict)
    if (key != "t" && key != "base_lrs")
      fail<ValueError>("Scheduler.load_state_dict: unexpected key '{}'; expected 't' and 'base_lrs'", key);
  auto t_it = dict.find("t");
  auto b_it = dict.find("base_lrs");
  if (t_it == dict.end()) fail<ValueError>("Scheduler.load_state_dict: missing key 't'");
  if (b_it == dict.end()) fail<ValueError>("Scheduler.load_state_dict: missing key 'base_lrs'");
  const Tensor& t = t_it->second;
  const Tensor& b = b_it->second;
  if (!t.defined() || t.dim() != 0 || t.dtype() != kInt64 || t.item() < 0)
    fail<ValueError>("Scheduler.load_state_dict: key 't' must be a 0-d int64 tensor >= 0");
  const size_t G = optimizer_->param_groups().size();
  if (!b.defined() || b.dim() != 1 || b.dtype() != kFloat64)
    fail<ValueError>("Scheduler.load_state_dict: key 'base_lrs' must be a 1-d float64 tensor");
  if (b.size(0) != static_cast<int64_t>(G))
    fail<ValueError>("Scheduler.load_state_dict: key 'base_lrs' has shape {} but the optimizer has {} groups",
                     to_string(b.shape()), G);
  auto lrs = b.to_vector<double>();
  for (size_t g = 0; g < lrs.size(); ++g)
    if (!(lrs[g] >= 0)) fail<ValueError>("Scheduler.load_state_dict: base_lrs[{}] must be >= 0, got {}", g, lrs[g]);
  base_lrs_ = std::move(lrs);
  t_ = static_cast<int64_t>(t.item());
  apply();
}

}  // namespace attnlab::optim
