// The float32 matrix-product route (tensor/matmul_route.hpp): oneDNN's float32 products against
// the naive loop on every layout the OpenBLAS path handles (transposed views, broadcast and
// folded batches, stride-0 operands, k = 0, empty and odd sizes, row and column blocks), the
// primitive cache, two threads at once, the route's parsing and the `auto` rule. On a build
// without oneDNN the route is always OpenBLAS and asking for oneDNN is an error naming the build.
#include "tensor/blas_info.hpp"
#include "tensor/kernels/matmul_onednn.hpp"
#include "tensor/matmul_route.hpp"
#include "tensor_testing.hpp"

#include <cstdlib>
#include <thread>

using namespace attnlab;
using namespace attnlab::testing;

namespace {

Tensor rnd(const Dims& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, g, kFloat32);
}

// matmul(a, b) under the oneDNN route against the naive loop in double: shape and values, to a
// tolerance relative to the entries' scale (sums of k products of unit normals).
void check_onednn(const Tensor& a, const Tensor& b) {
  Dims want_shape;
  const std::vector<double> want = naive_matmul(a, b, &want_shape);
  MatmulRouteGuard route(MatmulRoute::OneDNN);
  Tensor got = matmul(a, b);
  CHECK(got.dtype() == kFloat32);
  CHECK(got.shape() == want_shape);
  const double scale = std::sqrt(double(std::max<int64_t>(a.shape().back(), 1)));
  CHECK(vec_close(got.to_vector<double>(), want, 1e-5, 1e-5 * scale));
}

// Sets an environment variable for one scope and restores it afterwards.
class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~EnvGuard() { had_ ? (void)setenv(name_, old_.c_str(), 1) : (void)unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

}  // namespace

TEST_CASE("matmul route: oneDNN float32 products match the naive loop on every layout") {
  if (!onednn_built()) {
    CHECK_ERROR(ValueError, set_matmul_route(MatmulRoute::OneDNN), "without oneDNN");
    return;
  }
  for (int threads : {1, 2}) {
    INFO("threads ", threads);
    ThreadCountGuard guard(threads);
    check_onednn(rnd({3, 4}, 1), rnd({4, 5}, 2));
    check_onednn(rnd({37, 29}, 3), rnd({29, 41}, 4));          // odd sizes
    check_onednn(rnd({3, 2, 4}, 5), rnd({3, 4, 5}, 6));        // batched
    check_onednn(rnd({2, 1, 3, 4}, 7), rnd({5, 4, 6}, 8));     // broadcast batch -> (2,5,3,6)
    check_onednn(rnd({1, 3, 4}, 9), rnd({2, 1, 4, 2}, 10));    // broadcast both ways
    check_onednn(rnd({2, 3, 50, 24}, 11), rnd({24, 33}, 12));  // folded batch (a linear layer)
    check_onednn(rnd({5, 4}, 13), rnd({3, 4, 2}, 14));         // a shared left operand
    check_onednn(rnd({1, 7}, 15), rnd({7, 1}, 16));            // a dot product
    check_onednn(rnd({6, 1}, 17), rnd({1, 5}, 18));            // an outer product (k = 1)
    // Transposed views, read in place: a column-major left, right, and both; batched q @ k^T.
    Tensor at = rnd({33, 70}, 19).as_strided(Dims{70, 33}, Dims{1, 70}, 0);
    Tensor bt = rnd({45, 33}, 20).as_strided(Dims{33, 45}, Dims{1, 33}, 0);
    check_onednn(at, rnd({33, 45}, 21));
    check_onednn(rnd({70, 33}, 22), bt);
    check_onednn(at, bt);
    Tensor k = rnd({2, 3, 7, 4}, 23), q = rnd({2, 3, 5, 4}, 24);
    check_onednn(q, transpose(k, 2, 3));
    // Layouts oneDNN cannot read in place: every other column, stride-0 rows and batches.
    check_onednn(slice(rnd({5, 12}, 25), 1, 0, 12, 2), rnd({6, 7}, 26));
    check_onednn(expand(rnd({1, 4}, 27), {5, 4}), rnd({4, 3}, 28));
    check_onednn(rnd({4, 2, 6}, 29), expand(rnd({1, 6, 3}, 30), {4, 6, 3}));
    // Rows of a wider matrix (row stride 9) with a shared right operand: not foldable.
    check_onednn(narrow(rnd({3, 5, 9}, 31), 2, 2, 4), rnd({4, 6}, 32));
    // Row blocks (tall) and column blocks (wide, with a last block narrower than the others).
    check_onednn(rnd({301, 64}, 33), rnd({64, 40}, 34));
    check_onednn(rnd({8, 64}, 35), rnd({64, 333}, 36));
  }
  // k = 0 (zeros, also over a reused buffer) and empty results.
  MatmulRouteGuard route(MatmulRoute::OneDNN);
  { Tensor junk = full({3, 4}, 7.0f); }
  CHECK(matmul(zeros({3, 0}), zeros({0, 4})).to_vector<float>() == std::vector<float>(12, 0.0f));
  CHECK(matmul(zeros({0, 3}), zeros({3, 4})).shape() == Dims{0, 4});
  CHECK(matmul(zeros({2, 3}), zeros({3, 0})).shape() == Dims{2, 0});
  CHECK(matmul(zeros({0, 2, 3}), zeros({3, 4})).shape() == Dims{0, 2, 4});
  // float64 stays on OpenBLAS under every route: its product is the OpenBLAS one, bit for bit.
  Tensor a64 = to(rnd({20, 30}, 37), kFloat64), b64 = to(rnd({30, 10}, 38), kFloat64);
  Tensor on_route = matmul(a64, b64);
  MatmulRouteGuard blas(MatmulRoute::OpenBLAS);
  CHECK(bitwise_equal(on_route, matmul(a64, b64)));
}

TEST_CASE("matmul route: a repeated product reuses its cached oneDNN primitives") {
  if (!onednn_built()) return;
  MatmulRouteGuard route(MatmulRoute::OneDNN);
  Tensor a = rnd({97, 48}, 40), b = rnd({48, 31}, 41);
  Tensor first = matmul(a, b);
  const int64_t cached = kernels::onednn_cached_primitives();
  CHECK(cached >= 1);
  CHECK(cached <= kernels::kOnednnCacheCapacity);
  for (int i = 0; i < 3; ++i) CHECK(bitwise_equal(matmul(a, b), first));
  CHECK(kernels::onednn_cached_primitives() == cached);
}

TEST_CASE("matmul route: oneDNN products from two threads at once give the serial answers") {
  if (!onednn_built()) return;
  MatmulRouteGuard route(MatmulRoute::OneDNN);
  Tensor a = rnd({200, 150}, 42), b = rnd({150, 120}, 43);
  Tensor c = rnd({64, 150}, 44).as_strided(Dims{150, 64}, Dims{1, 150}, 0);
  const Tensor want_ab = matmul(a, b), want_c = matmul(c, rnd({64, 300}, 45));
  const Tensor right = rnd({64, 300}, 45);
  std::atomic<int> mismatches{0};
  auto worker = [&] {
    for (int i = 0; i < 5; ++i) {
      if (!bitwise_equal(matmul(a, b), want_ab)) ++mismatches;
      if (!bitwise_equal(matmul(c, right), want_c)) ++mismatches;
    }
  };
  std::thread t1(worker), t2(worker);
  t1.join();
  t2.join();
  CHECK(mismatches.load() == 0);
}

TEST_CASE("matmul route: names, parsing, the environment and errors") {
  for (MatmulRoute r : {MatmulRoute::Auto, MatmulRoute::OpenBLAS})
    CHECK(parse_matmul_route(matmul_route_name(r), "x") == r);
  CHECK_ERROR(ValueError, parse_matmul_route("mkl", "ATTNLAB_MATMUL"), "ATTNLAB_MATMUL", "\"mkl\"",
              "auto, openblas or onednn");
  CHECK_ERROR(ValueError, parse_matmul_route("OpenBLAS", "--routes"), "--routes", "auto, openblas or onednn");
  if (onednn_built()) {
    CHECK(parse_matmul_route("onednn", "x") == MatmulRoute::OneDNN);
  } else {
    CHECK_ERROR(ValueError, parse_matmul_route("onednn", "ATTNLAB_MATMUL"), "ATTNLAB_MATMUL=onednn", "without oneDNN",
                "auto or openblas");
  }
  {
    EnvGuard env("ATTNLAB_MATMUL", "openblas");
    CHECK(matmul_route_from_environment() == MatmulRoute::OpenBLAS);
  }
  {
    EnvGuard env("ATTNLAB_MATMUL", "");
    CHECK(matmul_route_from_environment() == MatmulRoute::Auto);
  }
  {
    EnvGuard env("ATTNLAB_MATMUL", "fastest");
    CHECK_ERROR(ValueError, matmul_route_from_environment(), "ATTNLAB_MATMUL=\"fastest\"", "auto, openblas or onednn");
  }
  // The guard restores the route in force.
  const MatmulRoute before = matmul_route();
  {
    MatmulRouteGuard g(MatmulRoute::OpenBLAS);
    CHECK(matmul_route() == MatmulRoute::OpenBLAS);
  }
  CHECK(matmul_route() == before);
}

TEST_CASE("matmul route: the auto rule and its description") {
  // Forced routes ignore the shape.
  {
    MatmulRouteGuard g(MatmulRoute::OpenBLAS);
    CHECK_FALSE(float32_matmul_on_onednn(1, 4096, 4096, 4096));
    CHECK(matmul_route_description().rfind("openblas: ", 0) == 0);
  }
  if (onednn_built()) {
    MatmulRouteGuard g(MatmulRoute::OneDNN);
    CHECK(float32_matmul_on_onednn(1, 2, 2, 2));
    CHECK(matmul_route_description().find("oneDNN") != std::string::npos);
  }
  MatmulRouteGuard g(MatmulRoute::Auto);
  if (!onednn_built()) CHECK_FALSE(matmul_auto_uses_onednn());
  // The bound follows OpenBLAS's kernel; below it never, at and above it exactly where this
  // machine routes at all, counting the batch.
  bool avx512_blas = false;  // OpenBLAS's AVX-512 kernels
  for (const char* k : {"(kernel SkylakeX)", "(kernel Cooperlake)", "(kernel SapphireRapids)"})
    avx512_blas |= blas_description().find(k) != std::string::npos;
  CHECK(matmul_auto_min_flops() == (avx512_blas ? kOnednnMinFlopsBlasAvx512 : kOnednnMinFlops));
  CHECK(kOnednnMinFlops < kOnednnMinFlopsBlasAvx512);
  CHECK_FALSE(float32_matmul_on_onednn(1, 64, 64, 64));                               // 0.5 MFLOP
  CHECK(float32_matmul_on_onednn(1, 1024, 1024, 1024) == matmul_auto_uses_onednn());  // 2.1 GFLOP
  const int64_t n = 128;                                                              // 4.2 MFLOP per element
  const int64_t just_enough = int64_t(std::ceil(matmul_auto_min_flops() / (2.0 * n * n * n)));
  CHECK(float32_matmul_on_onednn(just_enough, n, n, n) == matmul_auto_uses_onednn());
  CHECK_FALSE(float32_matmul_on_onednn(just_enough - 1, n, n, n));
  const std::string d = matmul_route_description();
  CHECK(d.rfind("auto: ", 0) == 0);
  CHECK(d.find("OpenBLAS kernel") != std::string::npos);
  CHECK((d.find("MFLOP or more on oneDNN") != std::string::npos) == matmul_auto_uses_onednn());
}
