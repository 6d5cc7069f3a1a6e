// FFTW-backed FNet mixing (see fourier_mix.hpp): plan cache, the per-batch transform, autograd.
#include "nn/attention/kernels/fourier_mix.hpp"

#include <fftw3.h>

#include <complex>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "autograd/node.hpp"
#include "tensor/kernels.hpp"
#include "tensor/parallel.hpp"

namespace attnlab::nn::fourier {
namespace {

// The float and double halves of the FFTW API behind one name.
template <class T> struct Fftw;
template <> struct Fftw<double> {
  using Plan = fftw_plan;
  static Plan plan(int n0, int n1) {
    double* in = fftw_alloc_real(size_t(n0) * n1);
    fftw_complex* out = fftw_alloc_complex(size_t(n0) * (n1 / 2 + 1));
    Plan p = fftw_plan_dft_r2c_2d(n0, n1, in, out, FFTW_ESTIMATE | FFTW_UNALIGNED | FFTW_PRESERVE_INPUT);
    fftw_free(in);
    fftw_free(out);
    return p;
  }
  static void execute(Plan p, const double* in, std::complex<double>* out) {
    // r2c with FFTW_PRESERVE_INPUT only reads `in`.
    fftw_execute_dft_r2c(p, const_cast<double*>(in), reinterpret_cast<fftw_complex*>(out));
  }
  static void destroy(Plan p) { fftw_destroy_plan(p); }
};
template <> struct Fftw<float> {
  using Plan = fftwf_plan;
  static Plan plan(int n0, int n1) {
    float* in = fftwf_alloc_real(size_t(n0) * n1);
    fftwf_complex* out = fftwf_alloc_complex(size_t(n0) * (n1 / 2 + 1));
    Plan p = fftwf_plan_dft_r2c_2d(n0, n1, in, out, FFTW_ESTIMATE | FFTW_UNALIGNED | FFTW_PRESERVE_INPUT);
    fftwf_free(in);
    fftwf_free(out);
    return p;
  }
  static void execute(Plan p, const float* in, std::complex<float>* out) {
    fftwf_execute_dft_r2c(p, const_cast<float*>(in), reinterpret_cast<fftwf_complex*>(out));
  }
  static void destroy(Plan p) { fftwf_destroy_plan(p); }
};

// Plans by (N, D), made once. FFTW's planner is not thread-safe, so every planner call (and
// the cache) sits behind one mutex; executing a finished plan is thread-safe.
template <class T>
typename Fftw<T>::Plan plan_for(int n0, int n1) {
  struct Cache {
    std::mutex mu;
    std::map<std::pair<int, int>, typename Fftw<T>::Plan> plans;
    ~Cache() {
      for (auto& [key, p] : plans) Fftw<T>::destroy(p);
    }
  };
  static Cache cache;
  std::lock_guard<std::mutex> lock(cache.mu);
  auto it = cache.plans.find({n0, n1});
  if (it != cache.plans.end()) return it->second;
  typename Fftw<T>::Plan p = Fftw<T>::plan(n0, n1);
  if (!p) fail<ValueError>("fnet: FFTW could not plan a {} x {} real transform", n0, n1);
  cache.plans.emplace(std::make_pair(n0, n1), p);
  return p;
}

template <class T>
void mix(const T* x, T* y, int64_t B, int64_t N, int64_t D) {
  auto plan = plan_for<T>(static_cast<int>(N), static_cast<int>(D));
  const int64_t H = D / 2 + 1;  // stored half of the last dim
  parallel_for(B, std::max<int64_t>(1, kParallelGrain / (N * D)), [&](int64_t b0, int64_t b1) {
    std::vector<std::complex<T>> z(N * H);  // (N, D/2 + 1)
    for (int64_t b = b0; b < b1; ++b) {
      Fftw<T>::execute(plan, x + b * N * D, z.data());
      T* yb = y + b * N * D;
      for (int64_t n = 0; n < N; ++n) {
        const int64_t nc = (N - n) % N;  // the conjugate partner's row
        for (int64_t d = 0; d < D; ++d) yb[n * D + d] = d < H ? z[n * H + d].real() : z[nc * H + (D - d)].real();
      }
    }
  });
}

}  // namespace

Tensor fourier_mix_kernel(const Tensor& x0) {
  if (x0.dim() != 3) fail<ShapeError>("fnet: expected (B, N, D), got {}", to_string(x0.shape()));
  const Tensor x = attnlab::kernels::contiguous(x0);
  const int64_t B = x.size(0), N = x.size(1), D = x.size(2);
  if (N > INT32_MAX || D > INT32_MAX) fail<ShapeError>("fnet: N={} and D={} must fit FFTW's int sizes", N, D);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  if (y.numel() == 0) return y;
  dispatch_floating(x.dtype(), "fnet", [&](auto tag) {
    using T = decltype(tag);
    mix<T>(x.data<T>(), y.data<T>(), B, N, D);
  });
  return y;
}

Tensor fourier_mix(const Tensor& x) {
  return record("fourier_mix", fourier_mix_kernel(x), {x},
                [](const Tensor& g, const Tensor&, const Node&) { return Grads{fourier_mix_kernel(g)}; });
}

}  // namespace attnlab::nn::fourier
