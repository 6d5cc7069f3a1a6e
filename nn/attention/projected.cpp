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

std::vector<HeadSlice> ProjectedAttention::head_slices() const {
  const int64_t dk = config.key_size, dv = config.value_size;
  return {{"q_proj.", dk}, {"k_proj.", dk}, {"v_proj.", dv}, {"out_proj.weight", dv, 1}};
}

std::shared_ptr<Attention> ProjectedAttention::prune_heads(const std::vector<int64_t>& keep) const {
  check_keep(keep, config.heads, variant_.c_str());
  auto out = make_attention(spec_with_heads(static_cast<int64_t>(keep.size())), d_model_);
  copy_pruned_state(*this, *out, keep, head_slices(), variant_,
                    [&](const std::string& name, const Tensor& from, const Tensor& to) {
                      if (!from.defined())
                        fail<ValueError>("{}: prune_heads: the smaller layer has {} which this one lacks", variant_, name);
                      return prune_tensor(name, from, to, keep);
                    });
  return out;
}

}  // namespace attnlab::nn
