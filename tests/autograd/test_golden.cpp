// Golden tests: every differentiable op's outputs and input gradients against PyTorch 1.13.
//
// tests/reference/ops_reference.py runs each case in PyTorch, in float64 and float32, and
// writes its inputs, outputs, upstream gradients and input gradients to
// tests/reference/ops_golden.safetensors (the layout is described there). Here each case is
// one line: the same computation in attnlab, on x = the case's inputs. check_case runs it for
// both dtypes, backpropagates the recorded upstream gradients and compares. The last test
// makes sure the C++ tables and the file name the same cases, so a case added on one side
// only fails the suite.
#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "helpers.hpp"

namespace {

using namespace attnlab;
using In = const std::vector<Tensor>&;

// A case's outputs: one tensor, values and indices, or a list (split, chunk).
struct Outs {
  Outs(Tensor t) : v{std::move(t)} {}
  Outs(ValuesIndices r) : v{std::move(r.values), std::move(r.indices)} {}
  Outs(std::vector<Tensor> ts) : v(std::move(ts)) {}
  std::vector<Tensor> v;
};

struct Case {
  const char* name;
  std::function<Outs(In)> fn;
};
using Cases = std::vector<Case>;

struct GoldenFile {
  TensorMap tensors;
  Metadata metadata;
  std::set<std::string> cases;
};

const GoldenFile& golden() {
  static const GoldenFile file = [] {
    GoldenFile f;
    f.tensors = load_safetensors(ATTNLAB_REFERENCE_DIR "/ops_golden.safetensors", &f.metadata);
    for (const auto& entry : f.tensors) f.cases.insert(entry.first.substr(0, entry.first.find('.')));
    return f;
  }();
  return file;
}

// Float64 results differ from PyTorch's only by the order of roundings, so they must agree
// to near machine precision. Float32 allows a few hundred ulps: sums, BLAS blocking and exp
// approximations round differently.
struct Tolerance {
  double rtol, atol;
};
constexpr Tolerance kTol64{1e-10, 1e-12};
constexpr Tolerance kTol32{1e-5, 1e-6};

// "" when got matches want (same dtype and shape; |got - want| <= atol + rtol |want|, with
// infinities equal), else the first mismatch and the largest error.
std::string mismatch(const Tensor& got, const Tensor& want, Tolerance tol) {
  if (!got.defined()) return "undefined tensor";
  if (got.dtype() != want.dtype()) return fmt::format("dtype {}, expected {}", got.dtype(), want.dtype());
  if (got.shape() != want.shape()) return fmt::format("shape {}, expected {}", got.shape(), want.shape());
  if (!got.is_floating_point()) tol = {0, 0};
  const auto a = got.to_vector<double>(), b = want.to_vector<double>();
  std::string first;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::abs(a[i] - b[i]);
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::isinf(a[i]) || std::isinf(b[i]) ? a[i] == b[i] : err <= tol.atol + tol.rtol * std::abs(b[i])) continue;
    if (first.empty()) first = fmt::format("element {} is {:.17g}, expected {:.17g}", i, a[i], b[i]);
    worst = std::isnan(err) ? err : std::max(worst, err);
  }
  return first.empty() ? "" : fmt::format("{} (largest error {:.3g})", first, worst);
}

// Runs one case in float64 and float32 against the file's inputs, outputs and gradients.
void check_case(const std::string& name, const std::function<Outs(In)>& fn) {
  const GoldenFile& g = golden();
  const auto expr = g.metadata.find("case/" + name);
  for (const char* tag : {"f64", "f32"}) {
    const std::string key = name + "." + tag;
    const Tolerance tol = std::string(tag) == "f64" ? kTol64 : kTol32;
    INFO(key, ": ", expr != g.metadata.end() ? expr->second : std::string("(no description)"));
    auto get = [&](const std::string& field) -> const Tensor* {
      auto it = g.tensors.find(key + "." + field);
      return it == g.tensors.end() ? nullptr : &it->second;
    };
    if (!get("out")) {
      FAIL_CHECK(key, " is missing from ops_golden.safetensors: regenerate it with tests/reference/ops_reference.py");
      continue;
    }
    // Fresh leaves (detach shares the data, not the autograd state) so runs never mix.
    std::vector<Tensor> x;
    for (int i = 0; const Tensor* t = get(fmt::format("in{}", i)); ++i) {
      x.push_back(t->detach());
      if (x.back().is_floating_point()) x.back().requires_grad_();
    }
    try {
      const std::vector<Tensor> outs = fn(x).v;
      std::vector<Tensor> roots, upstream;
      for (size_t k = 0; k < outs.size(); ++k) {
        const std::string out = k ? fmt::format("out{}", k) : "out";
        const Tensor* want = get(out);
        if (!want) {
          FAIL_CHECK(key, ": attnlab gives output ", k, ", which PyTorch does not have");
          continue;
        }
        const std::string err = mismatch(outs[k], *want, tol);
        CHECK_MESSAGE(err.empty(), key, ".", out, ": ", err);
        if (const Tensor* up = get("grad_" + out)) {
          CHECK_MESSAGE(outs[k].requires_grad(), key, ".", out, " does not require grad");
          if (!outs[k].requires_grad()) continue;
          roots.push_back(outs[k]);
          upstream.push_back(*up);
        }
      }
      CHECK_MESSAGE(!get(fmt::format("out{}", outs.size())), key, ": PyTorch has more outputs than attnlab's ",
                    outs.size());
      if (!roots.empty()) run_backward(roots, upstream, false);
      for (size_t i = 0; i < x.size(); ++i) {
        if (!x[i].is_floating_point()) continue;
        const std::string field = fmt::format("grad{}", i);
        const Tensor* want = get(field);
        if (!want) {
          FAIL_CHECK(key, ".", field, " is missing");
          continue;
        }
        const Tensor got = x[i].grad().defined() ? x[i].grad() : zeros_like(*want);  // unused input
        const std::string err = mismatch(got, *want, tol);
        CHECK_MESSAGE(err.empty(), key, ".", field, ": ", err);
      }
    } catch (const std::exception& e) {
      FAIL_CHECK(key, " threw: ", std::string(e.what()));
    }
  }
}

void check_cases(const Cases& cases) {
  for (const Case& c : cases) check_case(c.name, c.fn);
}

// ---- the cases; each name matches a case in ops_reference.py ----

const Cases kBinary = {
    {"add", [](In x) { return x[0] + x[1]; }},
    {"add_bcast", [](In x) { return x[0] + x[1]; }},
    {"add_scalar", [](In x) { return x[0] + 1.5; }},
    {"sub_bcast", [](In x) { return x[0] - x[1]; }},
    {"rsub_scalar", [](In x) { return 2.0 - x[0]; }},
    {"mul_bcast", [](In x) { return x[0] * x[1]; }},
    {"mul_transposed", [](In x) { return transpose(x[0], 0, 1) * x[1]; }},
    {"mul_scalar", [](In x) { return x[0] * -2.5; }},
    {"mul_self", [](In x) { return x[0] * x[0] + sin(x[0]); }},
    {"div_bcast", [](In x) { return x[0] / x[1]; }},
    {"div_scalar", [](In x) { return x[0] / 4.0; }},
    {"rdiv_scalar", [](In x) { return 3.0 / x[0]; }},
    {"pow", [](In x) { return pow(x[0], x[1]); }},
    {"pow_bcast", [](In x) { return pow(x[0], x[1]); }},
    {"pow_zero", [](In x) { return pow(x[0], x[1]); }},
    {"pow_scalar", [](In x) { return pow(x[0], 2.5); }},
    {"pow_scalar_int", [](In x) { return pow(x[0], 3.0) + pow(x[0], 2.0) + pow(x[0], 1.0); }},
    {"pow_scalar_half", [](In x) { return pow(x[0], 0.5) + pow(x[0], 0.0); }},
    {"rpow_scalar", [](In x) { return pow(2.0, x[0]); }},
    {"maximum", [](In x) { return maximum(x[0], x[1]); }},
    {"minimum", [](In x) { return minimum(x[0], x[1]); }},
};

const Cases kUnary = {
    {"neg", [](In x) { return neg(x[0]); }},
    {"exp", [](In x) { return exp(x[0]); }},
    {"log", [](In x) { return log(x[0]); }},
    {"sqrt", [](In x) { return sqrt(x[0]); }},
    {"rsqrt", [](In x) { return rsqrt(x[0]); }},
    {"abs", [](In x) { return abs(x[0]); }},
    {"square", [](In x) { return square(x[0]); }},
    {"reciprocal", [](In x) { return reciprocal(x[0]); }},
    {"sin", [](In x) { return sin(x[0]); }},
    {"cos", [](In x) { return cos(x[0]); }},
    {"tanh", [](In x) { return tanh(x[0]); }},
    {"sigmoid", [](In x) { return sigmoid(x[0]); }},
    {"relu", [](In x) { return relu(x[0]); }},
    {"gelu", [](In x) { return gelu(x[0]); }},
    {"gelu_tanh", [](In x) { return gelu(x[0], "tanh"); }},
    {"elu", [](In x) { return elu(x[0]); }},
    {"elu_alpha", [](In x) { return elu(x[0], 0.7); }},
    {"softplus", [](In x) { return softplus(x[0]); }},
    {"softplus_beta", [](In x) { return softplus(x[0], 2.0, 5.0); }},
    {"clamp", [](In x) { return clamp(x[0], -0.5, 0.75); }},
    {"clamp_min", [](In x) { return clamp_min(x[0], 0.25); }},
    {"clamp_max", [](In x) { return clamp_max(x[0], 0.25); }},
    {"exp_permuted", [](In x) { return exp(permute(x[0], {2, 0, 1})); }},
    {"tanh_strided", [](In x) { return tanh(slice(x[0], 1, 0, 6, 2)); }},
    {"where", [](In x) { return where(x[0], x[1], x[2]); }},
    {"where_scalar", [](In x) { return where(x[0], x[1], 0.5); }},
    {"masked_fill", [](In x) { return masked_fill(x[0], x[1], -1.25); }},
};

const Cases kReductions = {
    {"sum_all", [](In x) { return sum(x[0]); }},
    {"sum_dims", [](In x) { return sum(x[0], {0, 2}); }},
    {"sum_keepdim", [](In x) { return sum(x[0], {-2}, true); }},
    {"sum_transposed", [](In x) { return sum(transpose(x[0], 0, 2), {-1}); }},
    {"mean_all", [](In x) { return mean(x[0]); }},
    {"mean_dims", [](In x) { return mean(x[0], {1, 2}, true); }},
    {"var", [](In x) { return var(x[0], {-1}); }},
    {"var_c0", [](In x) { return var(x[0], {0, 2}, 0, true); }},
    {"var_all", [](In x) { return var(x[0], {}); }},
    {"max_all", [](In x) { return max(x[0]); }},
    {"min_all", [](In x) { return min(x[0]); }},
    {"max_all_ties", [](In x) { return max(x[0]); }},
    {"max_dim", [](In x) { return max(x[0], 1); }},
    {"max_dim_keepdim", [](In x) { return max(x[0], -1, true); }},
    {"min_dim", [](In x) { return min(x[0], 0); }},
    {"amax", [](In x) { return amax(x[0], {-1}); }},
    {"amax_dims", [](In x) { return amax(x[0], {0, 2}, true); }},
    {"amax_ties", [](In x) { return amax(x[0], {-1}); }},
    {"logsumexp", [](In x) { return logsumexp(x[0], {-1}); }},
    {"logsumexp_dims", [](In x) { return logsumexp(x[0], {0, 1}, true); }},
};

const Cases kSoftmax = {
    {"softmax", [](In x) { return softmax(x[0], -1); }},
    {"softmax_dim0", [](In x) { return softmax(x[0], 0); }},
    {"softmax_transposed", [](In x) { return softmax(transpose(x[0], 0, 1), -1); }},
    {"softmax_masked", [](In x) { return softmax(x[0], -1, x[1]); }},
    {"softmax_masked_bcast", [](In x) { return softmax(x[0], -1, x[1]); }},
    {"log_softmax", [](In x) { return log_softmax(x[0], 1); }},
    {"log_softmax_masked", [](In x) { return log_softmax(x[0], -1, x[1]); }},
};

const Cases kProducts = {
    {"matmul", [](In x) { return matmul(x[0], x[1]); }},
    {"matmul_batched_bcast", [](In x) { return matmul(x[0], x[1]); }},
    {"matmul_batched_weight", [](In x) { return matmul(x[0], x[1]); }},
    {"matmul_transposed", [](In x) { return matmul(transpose(x[0], -2, -1), transpose(x[1], 0, 1)); }},
    {"matmul_vec_mat", [](In x) { return matmul(x[0], x[1]); }},
    {"matmul_mat_vec", [](In x) { return matmul(x[0], x[1]); }},
    {"matmul_dot", [](In x) { return matmul(x[0], x[1]); }},
    {"einsum_attention", [](In x) { return einsum("bhnd,bhmd->bhnm", {x[0], x[1]}); }},
    {"einsum_ellipsis", [](In x) { return einsum("...ij,...jk", {x[0], x[1]}); }},
    {"einsum_three", [](In x) { return einsum("bnr,hr,bmr->bhnm", {x[0], x[1], x[2]}); }},
    {"einsum_diagonal", [](In x) { return einsum("ii->i", {x[0]}); }},
    {"einsum_sum", [](In x) { return einsum("ij->", {x[0]}); }},
    {"einsum_outer", [](In x) { return einsum("i,j->ij", {x[0], x[1]}); }},
};

const Cases kIndexing = {
    {"cat", [](In x) { return cat({x[0], x[1], x[2]}, 0); }},
    {"cat_last_transposed", [](In x) { return cat({transpose(x[0], 0, 1), x[1]}, -1); }},
    {"stack", [](In x) { return stack({x[0], x[1], x[2]}, 1); }},
    {"split", [](In x) { return split(x[0], 2, 1); }},
    {"split_sizes", [](In x) { return split(x[0], std::vector<int64_t>{1, 3}, 0); }},
    {"chunk", [](In x) { return chunk(x[0], 3, -1); }},
    {"gather", [](In x) { return gather(x[0], 1, x[1]); }},
    {"gather_dim0", [](In x) { return gather(x[0], 0, x[1]); }},
    {"scatter_add", [](In x) { return scatter_add(x[0], 0, x[1], x[2]); }},
    {"scatter_add_dim1", [](In x) { return scatter_add(x[0], 1, x[1], x[2]); }},
    {"index_select", [](In x) { return index_select(x[0], 0, x[1]); }},
    {"index_select_dim1", [](In x) { return index_select(x[0], 1, x[1]); }},
    {"embedding", [](In x) { return embedding(x[0], x[1]); }},
    {"cumsum", [](In x) { return cumsum(x[0], -1); }},
    {"cumsum_dim0", [](In x) { return cumsum(x[0], 0); }},
    {"topk", [](In x) { return topk(x[0], 2); }},
    {"topk_smallest", [](In x) { return topk(x[0], 3, 0, false); }},
    {"sort", [](In x) { return sort(x[0]); }},
    {"sort_desc_dim0", [](In x) { return sort(x[0], 0, true); }},
    {"tril", [](In x) { return tril(x[0]); }},
    {"tril_neg", [](In x) { return tril(x[0], -1); }},
    {"triu", [](In x) { return triu(x[0], 1); }},
};

const Cases kViews = {
    {"reshape", [](In x) { return reshape(x[0], {4, -1}); }},
    {"reshape_copy", [](In x) { return reshape(transpose(x[0], 0, 1), {-1}); }},
    {"view", [](In x) { return view(x[0], {3, 2, 4}); }},
    {"flatten", [](In x) { return flatten(x[0], 1); }},
    {"permute", [](In x) { return permute(x[0], {2, 0, 1}); }},
    {"transpose", [](In x) { return transpose(x[0], 0, -1); }},
    {"narrow", [](In x) { return narrow(x[0], 1, 1, 2); }},
    {"slice_step", [](In x) { return slice(x[0], 0, 1, 6, 2); }},
    {"slice_negative", [](In x) { return slice(x[0], -1, -3, 5); }},
    {"select", [](In x) { return select(x[0], 1, -1); }},
    {"expand", [](In x) { return expand(x[0], {2, 3, -1}); }},
    {"broadcast_to", [](In x) { return broadcast_to(x[0], {2, 3, 4}); }},
    {"squeeze", [](In x) { return squeeze(x[0]); }},
    {"squeeze_dim", [](In x) { return squeeze(x[0], 2); }},
    {"unsqueeze", [](In x) { return unsqueeze(x[0], -1); }},
    {"contiguous", [](In x) { return contiguous(transpose(x[0], 0, 1)); }},
    {"clone", [](In x) { return clone(x[0]) * 2.0; }},
    {"to_other", [](In x) { return to(x[0], x[0].dtype() == kFloat64 ? kFloat32 : kFloat64); }},
};

// Layers composed from the ops above, against PyTorch's own (fused) implementations.
const Cases kLayers = {
    {"layer_norm",
     [](In x) {  // x (2,3,8), weight (8), bias (8)
       Tensor centered = x[0] - mean(x[0], {-1}, true);                            // (2,3,8)
       return centered * rsqrt(var(x[0], {-1}, 0, true) + 1e-5) * x[1] + x[2];  // (2,3,8)
     }},
    {"mlp_gelu",
     [](In x) {  // x (4,6), W1 (8,6), b1 (8), W2 (3,8), b2 (3)
       Tensor h = gelu(matmul(x[0], transpose(x[1], 0, 1)) + x[2]);  // (4,8)
       return matmul(h, transpose(x[3], 0, 1)) + x[4];               // (4,3)
     }},
    {"attention",
     [](In x) {  // q, k, v (B,h,T,d) = (2,2,5,4); mask (B,1,T,T), true = may attend
       Tensor scores = matmul(x[0], transpose(x[1], -2, -1)) / std::sqrt(4.0);  // (B,h,T,T)
       return matmul(softmax(scores, -1, x[3]), x[2]);                          // (B,h,T,d)
     }},
};

// The fused training-step ops (kernels/fused.cpp) against F.layer_norm and F.gelu(x + b).
const Cases kFused = {
    {"layer_norm_fused", [](In x) { return layer_norm(x[0], x[1], x[2], 1e-5); }},
    {"layer_norm_fused_plain", [](In x) { return layer_norm(x[0], {}, {}, 1e-3); }},
    {"add_layer_norm",
     [](In x) {
       AddLayerNorm a = add_layer_norm(x[0], x[1], x[2], x[3], 1e-5);
       return std::vector<Tensor>{a.sum, a.normed};
     }},
    {"bias_gelu", [](In x) { return bias_gelu(x[0], x[1]); }},
    {"bias_gelu_tanh", [](In x) { return bias_gelu(x[0], x[1], "tanh"); }},
};

const std::vector<const Cases*> kAllTables = {&kBinary,   &kUnary, &kReductions, &kSoftmax, &kProducts,
                                              &kIndexing, &kViews, &kLayers,     &kFused};

}  // namespace

TEST_CASE("golden: elementwise binary ops match PyTorch") { check_cases(kBinary); }
TEST_CASE("golden: elementwise unary ops, where and masked_fill match PyTorch") { check_cases(kUnary); }
TEST_CASE("golden: reductions match PyTorch") { check_cases(kReductions); }
TEST_CASE("golden: softmax and log_softmax (masked) match PyTorch") { check_cases(kSoftmax); }
TEST_CASE("golden: matmul and einsum match PyTorch") { check_cases(kProducts); }
TEST_CASE("golden: structure and indexing ops match PyTorch") { check_cases(kIndexing); }
TEST_CASE("golden: views and copies match PyTorch") { check_cases(kViews); }
TEST_CASE("golden: composed layers match PyTorch's layer_norm, linear+gelu and attention") { check_cases(kLayers); }
TEST_CASE("golden: fused layer_norm, add_layer_norm and bias_gelu match PyTorch") { check_cases(kFused); }

TEST_CASE("golden: the C++ cases and the golden file name the same cases") {
  std::set<std::string> in_cpp;
  for (const Cases* table : kAllTables)
    for (const Case& c : *table) CHECK_MESSAGE(in_cpp.insert(c.name).second, "case ", c.name, " appears twice");
  const std::set<std::string>& in_file = golden().cases;
  for (const std::string& name : in_file)
    CHECK_MESSAGE(in_cpp.count(name), "case ", name, " is in ops_golden.safetensors but has no C++ twin here");
  for (const std::string& name : in_cpp)
    CHECK_MESSAGE(in_file.count(name), "case ", name, " has no data: rerun tests/reference/ops_reference.py");
  CHECK(in_cpp == in_file);
  CHECK(in_file.size() >= 100);
}

TEST_CASE("golden: the comparison catches a wrong value, shape, dtype and infinity") {
  using attnlab::testing::t64;
  const Tensor want = t64({1.0, -2.0, INFINITY}, {3});
  CHECK(mismatch(t64({1.0, -2.0, INFINITY}, {3}), want, kTol64).empty());
  CHECK(mismatch(t64({1.0 + 1e-13, -2.0, INFINITY}, {3}), want, kTol64).empty());
  CHECK(!mismatch(t64({1.0 + 1e-9, -2.0, INFINITY}, {3}), want, kTol64).empty());
  CHECK(!mismatch(t64({1.0, -2.0, -INFINITY}, {3}), want, kTol64).empty());
  CHECK(!mismatch(t64({1.0, -2.0, NAN}, {3}), want, kTol64).empty());
  CHECK(!mismatch(t64({1.0, -2.0, INFINITY}, {1, 3}), want, kTol64).empty());
  CHECK(!mismatch(attnlab::testing::t32({1.0f, -2.0f, INFINITY}, {3}), want, kTol32).empty());
}
