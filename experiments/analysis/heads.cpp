// Head importance and LRP head relevance (see heads.hpp; derivation in docs/analysis.md).
#include "experiments/analysis/heads.hpp"

#include <cmath>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"

namespace attnlab::analysis {
namespace {

HeadMatrix zeros_like_heads(const Probe& probe) {
  HeadMatrix m;
  for (size_t l = 0; l < probe.blocks.size(); ++l)
    m.emplace_back(size_t(head_mask_of(*probe.blocks[l], int64_t(l)).numel()), 0.0);
  return m;
}

// Makes every layer's head_mask a differentiable leaf for one backward, then plain again.
struct HeadMaskGrads {
  std::vector<Tensor> masks;
  explicit HeadMaskGrads(const Probe& probe) {
    for (size_t l = 0; l < probe.blocks.size(); ++l) {
      Tensor m = head_mask_of(*probe.blocks[l], int64_t(l));
      m.set_grad(Tensor());
      m.requires_grad_(true);
      masks.push_back(m);
    }
  }
  ~HeadMaskGrads() {
    for (Tensor& m : masks) {
      m.set_grad(Tensor());
      m.requires_grad_(false);
    }
  }
  std::vector<double> grad(size_t l) const {
    Tensor g = masks[l].grad();
    return g.defined() ? g.to_vector<double>() : std::vector<double>(size_t(masks[l].numel()), 0.0);
  }
};

}  // namespace

HeadMatrix normalize_l2(const HeadMatrix& m) {
  HeadMatrix out = m;
  for (auto& row : out) {
    double s = 0;
    for (double v : row) s += v * v;
    if (s > 0)
      for (double& v : row) v /= std::sqrt(s);
  }
  return out;
}

HeadMatrix normalize_l1(const HeadMatrix& m) {
  HeadMatrix out = m;
  for (auto& row : out) {
    double s = 0;
    for (double v : row) s += std::abs(v);
    if (s > 0)
      for (double& v : row) v /= s;
  }
  return out;
}

// ---------------------------------------------------------------------------- importance

HeadImportance::HeadImportance(const Probe& probe) : probe_(probe), sum_(zeros_like_heads(probe)) {}

void HeadImportance::add(const data::Batch& batch) {
  FreezeScope freeze(*probe_.model);
  HeadMaskGrads masks(probe_);
  Tensor loss = probe_.loss(probe_.forward(batch), batch);  // ()
  loss.backward();
  for (size_t l = 0; l < sum_.size(); ++l) {
    const std::vector<double> g = masks.grad(l);
    for (size_t i = 0; i < g.size(); ++i) sum_[l][i] += std::abs(g[i]);
  }
  ++batches_;
}

HeadMatrix HeadImportance::normalized() const { return normalize_l2(sum_); }

// ---------------------------------------------------------------------------- relevance

HeadRelevance::HeadRelevance(const Probe& probe) : probe_(probe), sum_(zeros_like_heads(probe)) {
  check_.branch.assign(sum_.size(), 0.0);
}

void HeadRelevance::add(const data::Batch& batch) {
  FreezeScope freeze(*probe_.model);
  HeadMaskGrads masks(probe_);
  std::vector<Tensor> inputs;
  for (const Tensor& t : probe_.input_tensors) {
    Tensor leaf = t;
    leaf.set_grad(Tensor());
    leaf.requires_grad_(true);
    inputs.push_back(leaf);
  }
  std::vector<Tensor> branches(sum_.size());
  Tensor y;
  {
    ConservativeModeGuard conservative;
    ObserverScope scope(probe_, [&](int64_t l, const nn::AttentionResult& r) {
      if (!r.attention.defined() || r.attention.numel() == 0)
        fail<ValueError>("head relevance: layer {} ({}) has no attention probabilities; the AH-rule needs them", l,
                         probe_.blocks[l]->attn->spec());
      r.output.retain_grad();
      branches[l] = r.output;  // (B, N, D)
    });
    y = probe_.explained(probe_.forward(batch));  // ()
  }
  y.backward();
  for (size_t l = 0; l < sum_.size(); ++l) {
    // R_i = sum(o_i * dy/do_i) = xi_i * dy/dxi_i, since o_i = xi_i * (g_i * P_i V_i).
    const std::vector<double> g = masks.grad(l), xi = masks.masks[l].to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) sum_[l][i] += xi[i] * g[i];
    if (branches[l].grad().defined()) check_.branch[l] += sum(branches[l].detach() * branches[l].grad()).item();
  }
  check_.explained += y.item();
  for (Tensor& t : inputs) {
    if (t.grad().defined()) check_.input_relevance += sum(t.detach() * t.grad()).item();
    t.set_grad(Tensor());
  }
}

HeadMatrix HeadRelevance::normalized() const { return normalize_l1(sum_); }

}  // namespace attnlab::analysis
