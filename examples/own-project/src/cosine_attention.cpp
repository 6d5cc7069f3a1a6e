// `cosine`: multi-head attention on the cosine similarity of queries and keys (Henry et al.
// 2020, "Query-Key Normalization for Transformers"), a variant of this project registered beside
// attnlab's own:
//
//   head i:  P = softmax(s * cos(x W_q,i, c W_k,i)) (over keys, masked),  O_i = P (c W_v,i)
//   output:  concat_i (head_mask_i O_i) W_o + b_o    x (B, N, D), context c (B, M, D) (= x for self-attention)
//
// Options: heads h (dividing D), scale s. Parameters: q_proj, k_proj, v_proj, out_proj, each
// (D, D) with bias; buffer head_mask (h), ones. Cost: O(B h N M D/h) time, O(B h N M) memory
// (the probabilities).
//
// What makes it pass `own check "cosine(heads=2)"` (attnlab's docs/attention.md, "Adding a
// variant"): head_mask, so that a query row with no allowed key equals the output of all-zero
// heads (here out_proj's bias); a spec() that rebuilds the same layer; errors that name the
// variant ("cosine: ..."), which turn the checks needing an unsupported feature (here
// prune_heads) into SKIP lines.
#include <attnlab/attnlab.hpp>

namespace own {

using namespace attnlab;

class CosineAttention : public nn::Attention {
 public:
  CosineAttention(int64_t d_model, int64_t heads, double scale) : heads_(heads), scale_(scale) {
    d_model_ = d_model;
    q_proj = register_module("q_proj", std::make_shared<nn::Linear>(d_model, d_model));
    k_proj = register_module("k_proj", std::make_shared<nn::Linear>(d_model, d_model));
    v_proj = register_module("v_proj", std::make_shared<nn::Linear>(d_model, d_model));
    out_proj = register_module("out_proj", std::make_shared<nn::Linear>(d_model, d_model));
    head_mask = register_buffer("head_mask", ones({heads}));
  }

  nn::AttentionResult forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                              bool need_weights) override {
    const Tensor& c = nn::check_inputs("cosine", d_model_, x, context, causal);
    Tensor q = unit_rows(nn::split_heads(q_proj->forward(x), heads_));  // (B, h, N, dk)
    Tensor k = unit_rows(nn::split_heads(k_proj->forward(c), heads_));  // (B, h, M, dk)
    Tensor v = nn::split_heads(v_proj->forward(c), heads_);             // (B, h, M, dk)
    Tensor logits = mul(matmul(q, transpose(k, 2, 3)), scale_);          // (B, h, N, M)
    Tensor allowed = nn::allowed_mask(mask, x.size(1), c.size(1), causal, "cosine");
    Tensor p = softmax(logits, 3, allowed);                              // (B, h, N, M)
    Tensor o = matmul(p, v) * reshape(head_mask, {1, heads_, 1, 1});    // (B, h, N, dk)
    Tensor out = out_proj->forward(nn::merge_heads(o));                  // (B, N, D)
    return {out, need_weights ? p : Tensor()};
  }

  std::shared_ptr<nn::Attention> prune_heads(const std::vector<int64_t>&) const override {
    fail<ValueError>("cosine: prune_heads is not supported (heads share the D/h split of D)");
  }
  std::string spec() const override { return fmt::format("cosine(heads={}, scale={})", heads_, scale_); }
  std::string type_name() const override { return "CosineAttention"; }

  static nn::VariantSchema schema() {
    using T = nn::OptionType;
    return {"cosine",
            "attention on s * cos(q, k) (Henry et al. 2020; examples/own-project)",
            {{"heads", T::Int, "4", "heads h (h divides D)", {}},
             {"scale", T::Double, "10", "logit scale s of softmax(s cos(q, k))", {}}},
            "O(B h N M D/h)",
            "O(B h N M)"};
  }
  static std::shared_ptr<nn::Attention> make(const nn::Options& o, int64_t d_model) {
    const int64_t h = o.get_int("heads");
    if (h < 1 || d_model % h != 0) o.reject("heads", fmt::format("{} does not divide d_model {}", h, d_model));
    if (!(o.get_double("scale") > 0)) o.reject("scale", "must be positive");
    return std::make_shared<CosineAttention>(d_model, h, o.get_double("scale"));
  }

  std::shared_ptr<nn::Linear> q_proj, k_proj, v_proj, out_proj;
  Tensor head_mask;  // (h): head i's output is scaled by head_mask[i]; its gradient is head importance

 private:
  // Each row of t (..., d) divided by its L2 norm.
  static Tensor unit_rows(const Tensor& t) { return t * rsqrt(sum(t * t, {3}, true) + 1e-12); }
  int64_t heads_;
  double scale_;
};

// The registration line: `own variants` lists it, and any spec string may name it.
const bool registered = nn::register_variant({CosineAttention::schema(), CosineAttention::make});

}  // namespace own
