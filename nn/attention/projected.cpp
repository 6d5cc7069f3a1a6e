#include "nn/attention/projected.hpp"

#include "autograd/ops.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/registry.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::nn {

ProjectedAttention::ProjectedAttention(std::string variant, int64_t d_model, const HeadConfig& c, bool has_k_proj)
    : config(c), gen(default_generator().next_u64()), variant_(std::move(variant)) {
  register_generator("generator", gen);  // attention dropout: saved in checkpoints
  d_model_ = d_model;
  const int64_t h = c.heads;
  q_proj = register_module("q_proj", std::make_shared<Linear>(d_model, h * c.key_size, c.bias));
  if (has_k_proj) k_proj = register_module("k_proj", std::make_shared<Linear>(d_model, h * c.key_size, c.bias));
  v_proj = register_module("v_proj", std::make_shared<Linear>(d_model, h * c.value_size, c.bias));
  out_proj = register_module("out_proj", std::make_shared<Linear>(h * c.value_size, d_model, c.bias));
  if (c.gate.kind == "hard_concrete") gate = register_module("gate", std::make_shared<HardConcreteGate>(h, c.gate));
  head_mask = register_buffer("head_mask", ones({h}));
}

ProjectedAttention::Heads ProjectedAttention::project(const Tensor& x, const Tensor& c) {
  const int64_t h = config.heads;
  Heads out;
  out.q = split_heads((*q_proj)(x), h);                  // (B, h, N, dk)
  if (k_proj) out.k = split_heads((*k_proj)(c), h);      // (B, h, M, dk)
  out.v = split_heads((*v_proj)(c), h);                  // (B, h, M, dv)
  return out;
}

Tensor ProjectedAttention::finish(const Tensor& o) {
  return (*out_proj)(merge_heads(o * head_scale(gate, head_mask)));  // (B, N, D)
}

Tensor ProjectedAttention::prune_tensor(const std::string& name, const Tensor& from, const Tensor& to,
                                        const std::vector<int64_t>& keep) const {
  if (from.shape() == to.shape()) return from;
  if (from.dim() >= 1 && from.size(0) == config.heads) return take_heads(from, keep, 1, 0);
  fail<ValueError>("{}: prune_heads does not know how to prune {} of shape {} to {}", variant_, name,
                   to_string(from.shape()), to_string(to.shape()));
}

void ProjectedAttention::own_options(OptionValues&) const {}

std::string ProjectedAttention::spec_with_heads(int64_t h) const {
  const VariantSchema& schema = registered_schema(variant_);
  OptionValues values;
  set_head_options(values, config, schema);
  own_options(values);
  values.set("heads", h);
  return format_spec(schema, values);
}

std::string ProjectedAttention::spec() const { return spec_with_heads(config.heads); }

namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

std::shared_ptr<Attention> ProjectedAttention::prune_heads(const std::vector<int64_t>& keep) const {
  check_keep(keep, config.heads, variant_.c_str());
  const int64_t dk = config.key_size, dv = config.value_size;
  auto out = make_attention(spec_with_heads(static_cast<int64_t>(keep.size())), d_model_);
  out->to(q_proj->weight.dtype());
  NoGradGuard no_grad;
  const TensorMap src = state_dict();
  for (auto& [name, dst] : out->state_dict()) {
    auto it = src.find(name);
    if (it == src.end()) fail<ValueError>("{}: prune_heads: the smaller layer has {} which this one lacks", variant_, name);
    const Tensor& from = it->second;
    Tensor value;
    if (name == "out_proj.weight")
      value = take_heads(from, keep, dv, 1);
    else if (name == "out_proj.bias")
      value = from;
    else if (starts_with(name, "q_proj.") || starts_with(name, "k_proj."))
      value = take_heads(from, keep, dk, 0);
    else if (starts_with(name, "v_proj."))
      value = take_heads(from, keep, dv, 0);
    else if (name == "head_mask" || name == "gate.log_alpha")
      value = take_heads(from, keep, 1, 0);
    else
      value = prune_tensor(name, from, dst, keep);
    if (value.shape() != dst.shape())
      fail<ShapeError>("{}: prune_heads: {} pruned to {}, expected {}", variant_, name, to_string(value.shape()),
                       to_string(dst.shape()));
    Tensor d = dst;
    kernels::copy_(d, value);
  }
  out->train(is_training());
  return out;
}

}  // namespace attnlab::nn
