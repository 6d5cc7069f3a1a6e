// Adam and AdamW: one fused pass (read g, p, m, v; write m, v, p) over the elements of every
// parameter that has a gradient, the order of floating-point operations following torch
// 1.13's _single_tensor_adam(w): the bias corrections are computed in double from the
// parameter's own step count, as torch does with Python floats, then every coefficient is cast
// to the parameter's dtype. step() runs the pass over a segment table (one segment per
// parameter, with its own coefficients) so that one parallel_for splits all elements into even
// chunks whatever the tensor sizes; step_per_tensor() is the per-tensor twin.
#include "optim/adam.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "autograd/grad_mode.hpp"
#include "tensor/creation.hpp"
#include "tensor/parallel.hpp"

namespace attnlab::optim {

namespace {

void check_adam(const AdamOptions& o, const char* name) {
  if (!(o.eps >= 0)) fail<ValueError>("{}: option eps must be >= 0, got {}", name, o.eps);
  if (!(o.beta1 >= 0 && o.beta1 < 1)) fail<ValueError>("{}: option beta1 must be in [0, 1), got {}", name, o.beta1);
  if (!(o.beta2 >= 0 && o.beta2 < 1)) fail<ValueError>("{}: option beta2 must be in [0, 1), got {}", name, o.beta2);
}

AdamOptions as_adam(const AdamWOptions& o) { return {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}; }

std::vector<ParamGroup> one_group(const std::vector<Tensor>& params) { return {ParamGroup{params, {}}}; }

}  // namespace

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled, const char* name)
    : Optimizer(std::move(groups), name, options.lr, options.weight_decay), options_(options), decoupled_(decoupled) {
  check_adam(options_, name);
}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options) : Adam(std::move(groups), options, false, "Adam") {}
Adam::Adam(const std::vector<Tensor>& params, const AdamOptions& options) : Adam(one_group(params), options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : Adam(std::move(groups), as_adam(options), true, "AdamW") {}
AdamW::AdamW(const std::vector<Tensor>& params, const AdamWOptions& options) : AdamW(one_group(params), options) {}

std::vector<Optimizer::BufferSpec> Adam::buffer_specs() const {
  return {{"exp_avg", true}, {"exp_avg_sq", true}, {"step", false}};
}

std::vector<std::pair<std::string, double>> Adam::options() const {
  return {{"beta1", options_.beta1}, {"beta2", options_.beta2}, {"eps", options_.eps}};
}

void Adam::set_options(const std::map<std::string, double>& values) {
  AdamOptions o = options_;
  o.beta1 = values.at("beta1");
  o.beta2 = values.at("beta2");
  o.eps = values.at("eps");
  check_adam(o, name_.c_str());
  options_ = o;
}

namespace {

// One parameter's share of the pass: its pointers and the coefficients that depend on its
// group and its own step count.
template <class T>
struct Segment {
  int64_t begin;  // index of its first element in the pass
  int64_t size;
  T* p;        // (size,) parameter
  const T* g;  // (size,) gradient
  T* m;        // (size,) first moment
  T* v;        // (size,) second moment
  T wd, keep, bc2_sqrt, neg_step_size;
  bool l2, decay;
};

// The coefficients shared by every parameter.
template <class T>
struct Betas {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
};

// Elements [from, to) of one segment: the update itself, shared by step() and step_per_tensor().
template <class T>
void update(const Segment<T>& s, int64_t from, int64_t to, const Betas<T>& b) {
  T* pd = s.p;
  const T* gd = s.g;
  T* md = s.m;
  T* vd = s.v;
  const T wd = s.wd, keep = s.keep, bc2_sqrt = s.bc2_sqrt, neg_step_size = s.neg_step_size;
  const T beta1 = b.beta1, one_minus_beta1 = b.one_minus_beta1, beta2 = b.beta2, one_minus_beta2 = b.one_minus_beta2;
  const T eps = b.eps;
  const bool l2 = s.l2, decay = s.decay;
  for (int64_t i = from; i < to; ++i) {
    T g = gd[i];
    T x = pd[i];
    if (l2) g = g + wd * x;
    if (decay) x = x * keep;
    const T m = md[i] * beta1 + one_minus_beta1 * g;
    const T v = vd[i] * beta2 + one_minus_beta2 * g * g;
    md[i] = m;
    vd[i] = v;
    const T denom = std::sqrt(v) / bc2_sqrt + eps;
    pd[i] = x + neg_step_size * m / denom;
  }
}

// One parallel_for over the elements of all segments: chunk boundaries depend only on the
// total, so a small bias and a large matrix are split alike.
template <class T>
void run_pass(const std::vector<Segment<T>>& segments, const Betas<T>& b) {
  if (segments.empty()) return;
  const int64_t total = segments.back().begin + segments.back().size;
  parallel_for(total, kParallelGrain, [&](int64_t begin, int64_t end) {
    // The first segment that ends after `begin`.
    auto it = std::upper_bound(segments.begin(), segments.end(), begin,
                               [](int64_t i, const Segment<T>& s) { return i < s.begin + s.size; });
    for (; it != segments.end() && it->begin < end; ++it) {
      const int64_t from = std::max(begin, it->begin) - it->begin;
      const int64_t to = std::min(end, it->begin + it->size) - it->begin;
      update(*it, from, to, b);
    }
  });
}

// The segment of one parameter at its step count `t` (already advanced): the bias corrections in
// double, as torch computes them with Python floats, then every coefficient cast to T.
template <class T>
Segment<T> segment_of(const ParamGroup& group, const AdamOptions& o, bool decoupled, double t, int64_t n, T* p,
                      const T* g, T* m, T* v) {
  const double bias_correction1 = 1 - std::pow(o.beta1, t);
  const double bias_correction2 = 1 - std::pow(o.beta2, t);
  const double step_size = group.lr / bias_correction1;
  const bool l2 = !decoupled && group.weight_decay != 0;
  const bool decay = decoupled && group.weight_decay != 0;  // torch multiplies by 1 when wd = 0
  return {0, n, p, g, m, v, static_cast<T>(group.weight_decay), static_cast<T>(1 - group.lr * group.weight_decay),
          static_cast<T>(std::sqrt(bias_correction2)), static_cast<T>(-step_size), l2, decay};
}

template <class T>
Betas<T> betas_of(const AdamOptions& o) {
  return {static_cast<T>(o.beta1), static_cast<T>(1 - o.beta1), static_cast<T>(o.beta2), static_cast<T>(1 - o.beta2),
          static_cast<T>(o.eps)};
}

}  // namespace

void Adam::step() {
  NoGradGuard no_grad;
  const AdamOptions& o = options_;
  const char* op = decoupled_ ? "AdamW.step" : "Adam.step";
  flat_.sync(groups_, op);

  // Every parameter with a gradient, checked before anything changes. Moved parameters are
  // contiguous, so `work` is the parameter itself except for the few that could not move.
  struct Item {
    const ParamGroup* group;
    size_t index;
    detail::UpdateTarget target;
  };
  std::vector<Item> items;
  for (const ParamGroup& group : groups_) {
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      items.push_back({&group, i, detail::UpdateTarget(p, grad, op)});
    }
  }

  // The segment table: state bound to its flat slices, step counts advanced, coefficients.
  std::vector<Segment<float>> segments32;
  std::vector<Segment<double>> segments64;
  int64_t total32 = 0, total64 = 0;
  for (Item& item : items) {
    const ParamGroup& group = *item.group;
    const Tensor& p = item.target.param;
    const std::string& name = group.names[item.index];
    auto& st = state_of(p);
    Tensor m_t = flat_.bind_state(p, 0, st.count("exp_avg") ? st["exp_avg"] : Tensor(), op, name);
    Tensor v_t = flat_.bind_state(p, 1, st.count("exp_avg_sq") ? st["exp_avg_sq"] : Tensor(), op, name);
    st["exp_avg"] = m_t;
    st["exp_avg_sq"] = v_t;
    if (!st.count("step")) st["step"] = scalar_tensor(0, kFloat64);
    double& t = *st["step"].data<double>();
    t += 1;
    const int64_t n = p.numel();
    if (n == 0) continue;
    dispatch_floating(p.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      Segment<T> s = segment_of(group, o, decoupled_, t, n, item.target.work.data<T>(), item.target.grad.data<T>(),
                                m_t.data<T>(), v_t.data<T>());
      if constexpr (std::is_same_v<T, float>) {
        s.begin = total32;
        total32 += n;
        segments32.push_back(s);
      } else {
        s.begin = total64;
        total64 += n;
        segments64.push_back(s);
      }
    });
  }

  run_pass(segments32, betas_of<float>(o));
  run_pass(segments64, betas_of<double>(o));
  for (Item& item : items) item.target.finish();
  ++step_count_;
}

void Adam::step_per_tensor() {
  NoGradGuard no_grad;
  const AdamOptions& o = options_;
  const char* op = decoupled_ ? "AdamW.step" : "Adam.step";
  for (const ParamGroup& group : groups_) {
    for (const Tensor& p : group.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      detail::UpdateTarget target(p, grad, op);
      auto& st = state_of(p);
      if (st.empty()) {
        st["exp_avg"] = zeros(p.shape(), p.dtype());
        st["exp_avg_sq"] = zeros(p.shape(), p.dtype());
        st["step"] = scalar_tensor(0, kFloat64);
      }
      double& t = *st["step"].data<double>();
      t += 1;
      Tensor m_t = st["exp_avg"], v_t = st["exp_avg_sq"];
      dispatch_floating(p.dtype(), op, [&](auto tag) {
        using T = decltype(tag);
        const Segment<T> s = segment_of(group, o, decoupled_, t, p.numel(), target.work.data<T>(),
                                        target.grad.data<T>(), m_t.data<T>(), v_t.data<T>());
        const Betas<T> b = betas_of<T>(o);
        parallel_for(p.numel(), kParallelGrain, [&](int64_t begin, int64_t end) { update(s, begin, end, b); });
      });
      target.finish();
    }
  }
  ++step_count_;
}

}  // namespace attnlab::optim
