// `fnet` (see fnet.hpp) and the input checks shared by the attention-free variants.
//
// Choices the papers leave open (docs/attention.md, `fnet`):
// - The spec string is `fnet`; `causal` is accepted as an option only so that causal=true
//   fails with a message that says why (the FFT mixes every position with every other).
// - prune_heads is an error (no heads); l0_penalty() is 0 (no gates); there is no head_mask.
#include "nn/attention/fnet.hpp"

#include "autograd/ops.hpp"
#include "nn/attention/kernels/fourier_mix.hpp"

namespace attnlab::nn {

void check_attention_free(const char* variant, int64_t d_model, const Tensor& x, const Tensor& context,
                          const Tensor& mask, bool causal) {
  if (causal)
    fail<ValueError>("{}: causal=true is not allowed: {} mixes every position with every other (not causal)", variant,
                     variant);
  check_inputs(variant, d_model, x, context, false, /*allows_context=*/false);
  if (mask.defined())
    fail<ValueError>("{}: takes no mask (attention-free token mixing has no keys to mask), got a mask of shape {}",
                     variant, to_string(mask.shape()));
}

VariantSchema FNet::schema() {
  return {"fnet",
          "attention-free Fourier mixing, y = Re(FFT_seq(FFT_hidden(x))) (Lee-Thorp et al. 2021)",
          {{"causal", OptionType::Bool, "false", "must be false: fnet is not causal", {}}},
          "O(B N D log(N D)) (FFTW)",
          "O(B N D): no parameters, nothing kept for backward",
          Capabilities::none()};
}

std::shared_ptr<Attention> FNet::make(const Options& o, int64_t d_model) {
  if (o.get_bool("causal")) o.reject("causal", "fnet is not causal: the FFT mixes every position with every other");
  if (d_model <= 0) fail<ValueError>("fnet: d_model must be positive, got {}", d_model);
  return std::make_shared<FNet>(d_model);
}

FNet::FNet(int64_t d_model) { d_model_ = d_model; }

AttentionResult FNet::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal, bool) {
  check_attention_free("fnet", d_model_, x, context, mask, causal);
  return {fourier::fourier_mix(x), Tensor()};  // (B, N, D)
}

std::shared_ptr<Attention> FNet::prune_heads(const std::vector<int64_t>&) const {
  fail<ValueError>("fnet: prune_heads: fnet is attention-free and has no heads to prune");
}

}  // namespace attnlab::nn
