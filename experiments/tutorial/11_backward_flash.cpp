// Tutorial 11: the backward of attention by hand, and the online-softmax tiling that lets the
// fused kernel (nn/attention/kernels/tile_attention.hpp) never hold the (N, M) matrix.
// Backward: with O = P V, P = softmax(S), S = Q K^T / sqrt(dk) and dO given,
//   dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dP * P)), dQ = dS K / sqrt(dk), dK = dS^T Q / sqrt(dk)
// (FlashAttention, Dao et al. 2022, appendix B.2). Tiling: Milakov & Gimelshein 2018, "Online
// normalizer calculation for softmax". Float64 throughout, so "equal" means equal to 1e-12.
#include <algorithm>

#include "autograd/gradcheck.hpp"
#include "experiments/tutorial/tutorial.hpp"

using namespace attnlab;
using tutorial::check;
using tutorial::say;
using tutorial::show;

namespace {

constexpr int64_t kN = 6, kM = 8, kDk = 4, kDv = 3;  // 6 queries, 8 keys, key size 4, value size 3

// Dense attention composed from engine ops: the autograd engine differentiates it.
Tensor dense_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  Tensor s = matmul(q, transpose(k, 0, 1)) / std::sqrt(double(kDk));  // (N, M)
  return matmul(softmax(s, -1), v);                                   // (N, dv)
}

void backward_by_hand(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_out) {
  tutorial::section("the backward, derived");
  say("Write S = Q K^T / sqrt(dk), P = softmax(S) row by row and O = P V. Given the loss's gradient\n"
      "dO with respect to the output, the two matmuls give their usual rules: dV = P^T dO and\n"
      "dP = dO V^T. The softmax is the interesting step. For one row p = softmax(s), dp_j/ds_i =\n"
      "p_j (delta_ij - p_i), so ds_i = sum_j dp_j p_j (delta_ij - p_i) = p_i (dp_i - sum_j dp_j p_j):\n"
      "every row of dS is P times (dP minus one number per row, the row sum of dP * P).");
  const double scale = 1.0 / std::sqrt(double(kDk));
  Tensor s = matmul(q, transpose(k, 0, 1)) * scale;                 // (N, M)
  Tensor p = softmax(s, -1);                                        // (N, M)
  Tensor o = matmul(p, v);                                          // (N, dv)
  Tensor dv = matmul(transpose(p, 0, 1), d_out);                    // (M, dv)
  Tensor dp = matmul(d_out, transpose(v, 0, 1));                    // (N, M)
  Tensor row = sum(dp * p, {-1}, true);                             // (N, 1)
  Tensor ds = p * (dp - row);                                       // (N, M)
  Tensor dq = matmul(ds, k) * scale;                                // (N, dk)
  Tensor dk = matmul(transpose(ds, 0, 1), q) * scale;               // (M, dk)
  show("dS = P * (dP - rowsum(dP * P))", ds);
  check(tutorial::max_abs_diff(sum(ds, {-1}), zeros({kN}, kFloat64)) < 1e-12,
        "every row of dS sums to 0 (softmax ignores a constant added to a row, so its gradient has no such part)");

  say("The engine's autograd differentiates the same composed forward (matmul, softmax, matmul)\n"
      "with its own backward formulas (autograd/derivatives.cpp). Calling backward on sum(O * dO)\n"
      "hands it exactly the upstream gradient dO.");
  Tensor qa = q.detach().requires_grad_(), ka = k.detach().requires_grad_(), va = v.detach().requires_grad_();
  sum(dense_attention(qa, ka, va) * d_out).backward();
  check(tutorial::max_abs_diff(qa.grad(), dq) < 1e-12, "hand dQ equals autograd's to 1e-12");
  check(tutorial::max_abs_diff(ka.grad(), dk) < 1e-12, "hand dK equals autograd's to 1e-12");
  check(tutorial::max_abs_diff(va.grad(), dv) < 1e-12, "hand dV equals autograd's to 1e-12");

  say("Autograd could share a mistake with the hand derivation, so a third, independent judge:\n"
      "gradcheck nudges every input element by +-1e-6 and compares the slope of the loss with\n"
      "the analytic gradient (central differences).");
  GradcheckResult g = gradcheck([](const std::vector<Tensor>& in) { return dense_attention(in[0], in[1], in[2]); },
                                {qa.detach().requires_grad_(), ka.detach().requires_grad_(), va.detach().requires_grad_()});
  fmt::print("gradcheck: max |analytic - numeric| = {:.2e}\n", g.max_abs_error);
  check(bool(g), "gradcheck agrees with the analytic gradient of attention (atol 1e-5, rtol 1e-3)");

  say("The backward needs rowsum(dP * P) per row, which seems to need all of P. It does not:\n"
      "rowsum(dP * P) = sum_j (dO_i . v_j) p_ij = dO_i . (sum_j p_ij v_j) = dO_i . O_i, a dot product\n"
      "of two rows the forward already has. This is why a fused kernel can keep only O and one\n"
      "number per row (its log-sum-exp) and recompute P tile by tile in the backward.");
  check(tutorial::max_abs_diff(row, sum(d_out * o, {-1}, true)) < 1e-12, "rowsum(dP * P) equals rowsum(dO * O) to 1e-12");
}

void online_softmax(const Tensor& q, const Tensor& k, const Tensor& v) {
  tutorial::section("online softmax: attention one tile of keys at a time");
  say("Dense attention holds the whole (N, M) score matrix. The tiled form reads the keys in tiles\n"
      "of Bc columns and keeps, per query row, three running quantities: the largest score seen m,\n"
      "the sum l of exp(score - m), and the unnormalised output acc = sum exp(score - m) v. When a\n"
      "tile raises the maximum from m to m', the old l and acc are rescaled by exp(m - m'), so the\n"
      "result after the last tile is exactly softmax(S) V = acc / l, with no (N, M) matrix held.");
  const int64_t bc = 3;  // keys per tile: 8 keys in tiles of 3, 3 and 2
  const double scale = 1.0 / std::sqrt(double(kDk));
  Tensor m = full({kN, 1}, -INFINITY, kFloat64);  // (N, 1) running max
  Tensor l = zeros({kN, 1}, kFloat64);            // (N, 1) running sum of exp
  Tensor acc = zeros({kN, kDv}, kFloat64);        // (N, dv) running numerator
  int64_t largest_tiled = 0;                      // bytes of the largest intermediate
  auto note = [&](const Tensor& t) { largest_tiled = std::max<int64_t>(largest_tiled, t.numel() * 8); };
  for (int64_t start = 0; start < kM; start += bc) {
    const int64_t w = std::min(bc, kM - start);
    Tensor s = matmul(q, transpose(narrow(k, 0, start, w), 0, 1)) * scale;  // (N, w)
    Tensor m_new = maximum(m, amax(s, {-1}, true));                          // (N, 1)
    Tensor correction = exp(m - m_new);                                      // (N, 1)
    Tensor e = exp(s - m_new);                                               // (N, w)
    l = l * correction + sum(e, {-1}, true);
    acc = acc * correction + matmul(e, narrow(v, 0, start, w));              // (N, dv)
    m = m_new;
    for (const Tensor& t : {s, m_new, correction, e, l, acc}) note(t);
    fmt::print("tile keys [{}, {}): running max of row 0 = {:.4f}, running sum = {:.4f}\n", start, start + w,
               m.at({0, 0}), l.at({0, 0}));
  }
  Tensor tiled = acc / l;  // (N, dv)
  Tensor s = matmul(q, transpose(k, 0, 1)) * scale;  // (N, M)
  Tensor p = softmax(s, -1);                          // (N, M)
  Tensor dense = matmul(p, v);                        // (N, dv)
  const int64_t largest_dense = std::max({s.numel(), p.numel(), dense.numel()}) * 8;
  show("tiled output acc / l", tiled);
  check(tutorial::max_abs_diff(tiled, dense) < 1e-12, "the tiled online softmax equals dense attention to 1e-12");
  fmt::print("largest intermediate: dense {} bytes (the (N, M) = ({}, {}) scores), tiled {} bytes (an (N, Bc) = ({}, {}) tile)\n",
             largest_dense, kN, kM, largest_tiled, kN, bc);
  check(largest_tiled == kN * bc * 8 && largest_dense == kN * kM * 8,
        "the tiled form's largest intermediate is one (N, Bc) tile; dense holds (N, M)");
  say("At N = M = 4096, h = 8 heads in float32 the dense scores alone are 8 * 4096^2 * 4 bytes =\n"
      "512 MiB per sequence, and softmax makes a second matrix as large; the tiled kernel holds a few\n"
      "(N, Bc) tiles and O. `attnlab explain mha --d-model 64 --seq 128 --composed` lists the dense\n"
      "steps with what each does; without --composed, the fused one (docs/cli.md).");
}

void lesson() {
  say("Training needs the gradient of the loss with respect to Q, K and V. This lesson derives it by\n"
      "hand for one head, checks it against the engine's autograd and against finite differences,\n"
      "and then computes the forward the way the fused kernel does: keys in tiles, softmax online.");
  Generator gen(11);
  Tensor q = randn({kN, kDk}, gen, kFloat64);      // (N, dk)
  Tensor k = randn({kM, kDk}, gen, kFloat64);      // (M, dk)
  Tensor v = randn({kM, kDv}, gen, kFloat64);      // (M, dv)
  Tensor d_out = randn({kN, kDv}, gen, kFloat64);  // (N, dv): the gradient arriving from above
  backward_by_hand(q, k, v, d_out);
  online_softmax(q, k, v);
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Tutorial 11: the backward of attention by hand, and the online-softmax tiling.",
                       lesson);
}
