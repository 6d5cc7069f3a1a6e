// nn::FeedForward (see feed_forward.hpp).
#include "nn/feed_forward.hpp"

#include "nn/activation.hpp"

namespace attnlab::nn {

FeedForward::FeedForward(int64_t d_model, int64_t hidden, std::string act, double p, bool bias)
    : activation(std::move(act)) {
  check_activation_name(activation, "FeedForward");
  fc1 = register_module("fc1", std::make_shared<Linear>(d_model, hidden, bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden, d_model, bias));
}

Tensor FeedForward::forward(const Tensor& x) {
  Tensor h;  // (..., hidden)
  if ((activation == "gelu" || activation == "gelu_tanh") && fc1->bias.defined()) {
    // fc1's bias added inside the GELU pass (bias_gelu): one read and write of h, not two.
    h = bias_gelu(fc1->forward_without_bias(x), fc1->bias, activation == "gelu" ? "none" : "tanh");
  } else {
    h = nn::activation(activation, fc1->forward(x));
  }
  h = dropout->forward(h);  // (..., hidden)
  return fc2->forward(h);                                  // (..., d_model)
}

std::string FeedForward::extra_repr() const { return fmt::format("activation=\"{}\"", activation); }

}  // namespace attnlab::nn
