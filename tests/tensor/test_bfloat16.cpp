// bfloat16 (tensor/bfloat16.hpp): conversion from float32 against a nearest-even reference
// computed in double over every upper half and the rounding-critical lower halves; NaN, inf,
// overflow and signed zero; tensors converting both ways, printing, safetensors round trips;
// and the bf16 matrix product (kernels::matmul_bf16) against its naive twin (the float32 product
// of the converted operands) and against the float32 product of the unrounded operands.
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <unistd.h>

#include "tensor/bf16_info.hpp"
#include "tensor/kernels.hpp"
#include "tensor_testing.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

// The bf16 nearest to the finite float x, ties to the even mantissa, from first principles:
// the two bf16 neighbours of x are the truncation and the next value up in magnitude.
uint16_t nearest_even_reference(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint16_t lo = uint16_t(u >> 16), hi = uint16_t(lo + 1);  // hi may be inf: fine
  const double dx = x, dlo = bfloat16_bits_to_float(lo);
  const double dhi = (hi & 0x7fff) == 0x7f80 ? std::copysign(std::ldexp(1.0, 128), dx) : double(bfloat16_bits_to_float(hi));
  const double elo = std::abs(dx - dlo), ehi = std::abs(dhi - dx);
  if (elo < ehi) return lo;
  if (ehi < elo) return hi;
  return (lo & 1) ? hi : lo;
}

Tensor rnd(const Dims& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, g, kFloat32);
}

// matmul of bf16 operands: float32, equal to its naive twin up to float32 summation order, and
// to the float32 product of the unrounded operands up to bf16 rounding of the inputs.
void check_bf16_product(const Tensor& a, const Tensor& b) {
  Tensor a16 = kernels::to_dtype(a, kBFloat16), b16 = kernels::to_dtype(b, kBFloat16);
  Tensor got = kernels::matmul(a16, b16);
  CHECK(got.dtype() == kFloat32);
  Tensor twin = kernels::matmul(kernels::to_dtype(a16, kFloat32), kernels::to_dtype(b16, kFloat32));
  REQUIRE(got.shape() == twin.shape());
  const int64_t k = a.size(-1);
  CHECK(vec_close(got.to_vector<double>(), twin.to_vector<double>(), 1e-5, 1e-6 * double(k)));
  // Each rounded operand is off by at most 2^-9 relative, so the product by about 2^-8.
  CHECK(rel_norm_err(got, kernels::matmul(a, b)) < 1e-2);
}

}  // namespace

TEST_CASE("bfloat16: float32 -> bf16 rounds to nearest even for every upper half and critical lower half") {
  const uint32_t lows[] = {0x0000, 0x0001, 0x3fff, 0x7fff, 0x8000, 0x8001, 0xbfff, 0xffff};
  int64_t checked = 0;
  for (uint32_t hi = 0; hi < 65536; ++hi)
    for (uint32_t lo : lows) {
      const float x = std::bit_cast<float>((hi << 16) | lo);
      if (std::isnan(x)) continue;
      const uint16_t got = float_to_bfloat16_bits(x), want = nearest_even_reference(x);
      if (got != want) FAIL_CHECK("x bits 0x" << std::hex << ((hi << 16) | lo) << ": got 0x" << got << ", want 0x" << want);
      ++checked;
    }
  CHECK(checked > 500000);
}

TEST_CASE("bfloat16: NaN stays NaN, overflow rounds to inf, signed zero and inf are kept, bf16 -> float32 is exact") {
  // NaNs whose payload is only in the dropped bits would round into inf without the NaN check.
  for (uint32_t bits : {0x7f800001u, 0x7fc00000u, 0xff800001u, 0x7fffffffu, 0xffffffffu}) {
    const bfloat16 v(std::bit_cast<float>(bits));
    CHECK(std::isnan(float(v)));
    CHECK(std::signbit(float(v)) == bool(bits >> 31));
  }
  CHECK(float(bfloat16(FLT_MAX)) == INFINITY);
  CHECK(float(bfloat16(-FLT_MAX)) == -INFINITY);
  CHECK(float(bfloat16(INFINITY)) == INFINITY);
  CHECK(std::signbit(float(bfloat16(-0.0f))));
  CHECK(float(bfloat16(1.0f)) == 1.0f);
  CHECK(float(bfloat16(3.140625f)) == 3.140625f);  // 8 significant bits: exact
  CHECK(float(bfloat16(1.00390625f)) == 1.0f);     // 1 + 2^-8: a tie, to the even 1.0
  CHECK(float(bfloat16(1.01171875f)) == 1.015625f);  // 1 + 3 * 2^-8: a tie, to the even 1 + 2^-6
  CHECK(round_to_bfloat16(std::ldexp(1.0f, -130)) == std::ldexp(1.0f, -130));  // subnormals kept
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bfloat16_bits_to_float(uint16_t(h));
    if (!std::isnan(f) && float_to_bfloat16_bits(f) != h) FAIL_CHECK("bf16 0x" << std::hex << h << " does not round-trip");
  }
}

TEST_CASE("bfloat16: tensors convert both ways, index, print and refuse arithmetic by name") {
  Tensor x = t32({1.0f, -2.5f, 3.14159265f, 1e-3f, 65536.0f + 300.0f, NAN}, {2, 3});
  Tensor h = kernels::to_dtype(x, kBFloat16);
  CHECK(h.dtype() == kBFloat16);
  CHECK(itemsize(h.dtype()) == 2);
  CHECK(dtype_name(h.dtype()) == "bfloat16");
  const auto xs = x.to_vector<float>(), back = kernels::to_dtype(h, kFloat32).to_vector<float>();
  for (size_t i = 0; i + 1 < xs.size(); ++i) CHECK(back[i] == round_to_bfloat16(xs[i]));
  CHECK(std::isnan(back.back()));
  CHECK(h.at({0, 2}) == doctest::Approx(3.140625));
  CHECK(kernels::to_dtype(h, kFloat64).at({1, 1}) == 65536.0 + 512.0);  // 65836: bf16 spacing is 512 at 2^16
  // A transposed view converts by element, not by memory order.
  Tensor ht = kernels::to_dtype(x.as_strided(Dims{3, 2}, Dims{1, 3}, 0), kBFloat16);
  CHECK(ht.at({2, 0}) == doctest::Approx(3.140625));
  const std::string s = kernels::to_dtype(t32({1.5f, -0.25f}, {2}), kBFloat16).str();
  CHECK(s.find("1.5000") != std::string::npos);
  CHECK(s.find("dtype=bfloat16") != std::string::npos);
  // bf16 is a storage type: computing ops name it and say what they expect.
  const std::string err = error_of([&] { (void)kernels::binary(kernels::Binary::Add, h, h, "add"); });
  CHECK(err.find("bfloat16") != std::string::npos);
  CHECK(!is_floating(kBFloat16));
  CHECK(is_floating_storage(kBFloat16));
}

TEST_CASE("bfloat16: safetensors writes BF16 and reads it back bit for bit, npy refuses with the reason") {
  const auto dir = std::filesystem::temp_directory_path() / ("attnlab_test_bf16_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "w.safetensors").string();
  Tensor h = kernels::to_dtype(rnd({4, 5}, 3), kBFloat16);
  save_safetensors(path, {{"w", h}, {"b", rnd({3}, 4)}});
  TensorMap back = load_safetensors(path);
  REQUIRE(back.at("w").dtype() == kBFloat16);
  CHECK(back.at("w").shape() == h.shape());
  CHECK(bitwise_equal(back.at("w"), h));
  CHECK(back.at("b").dtype() == kFloat32);
  // The header names the dtype as the safetensors format spells it.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(bytes.find("\"dtype\":\"BF16\"") != std::string::npos);
  const std::string err = error_of([&] { save_npy((dir / "w.npy").string(), h); });
  CHECK(err.find("bfloat16") != std::string::npos);
  CHECK(err.find("safetensors") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("bfloat16: matmul of bf16 operands matches its naive twin and the float32 product") {
  INFO(onednn_description());
  check_bf16_product(rnd({3, 4}, 1), rnd({4, 5}, 2));
  check_bf16_product(rnd({64, 96}, 3), rnd({96, 80}, 4));
  check_bf16_product(rnd({3, 7, 16}, 5), rnd({3, 16, 9}, 6));              // batched
  check_bf16_product(rnd({2, 1, 5, 16}, 7), rnd({3, 16, 6}, 8));           // broadcast batch
  check_bf16_product(rnd({2, 3, 5, 32}, 9), rnd({32, 24}, 10));            // shared right operand
  check_bf16_product(rnd({5, 32}, 11), rnd({4, 32, 3}, 12));               // shared left operand
  check_bf16_product(rnd({1, 1, 6, 8}, 13), rnd({1, 8, 2}, 14));           // one-element batch
  check_bf16_product(rnd({1, 17}, 15), rnd({17, 1}, 16));                  // a dot product
  // Transposed and strided operands (read in place or copied, the same values either way).
  Tensor a = rnd({40, 24}, 17), b = rnd({30, 40}, 18);
  check_bf16_product(a.as_strided(Dims{24, 40}, Dims{1, 24}, 0), b.as_strided(Dims{40, 30}, Dims{1, 40}, 0));
  Tensor big = rnd({4, 40, 24}, 19);
  check_bf16_product(big.as_strided(Dims{4, 24, 40}, Dims{960, 1, 24}, 0), rnd({4, 40, 8}, 20));
  check_bf16_product(big.as_strided(Dims{2, 40, 12}, Dims{1920, 24, 2}, 0), rnd({12, 8}, 21));  // every other column
  // The products the LM's backward runs: transposed bf16 activations against gradients.
  Tensor x16 = kernels::to_dtype(rnd({2, 8, 16}, 22), kBFloat16);
  Tensor g16 = kernels::to_dtype(rnd({2, 8, 12}, 23), kBFloat16);
  Tensor got = kernels::matmul(x16.as_strided(Dims{2, 16, 8}, Dims{128, 1, 16}, 0), g16);
  Tensor twin = kernels::matmul(kernels::to_dtype(x16, kFloat32).as_strided(Dims{2, 16, 8}, Dims{128, 1, 16}, 0),
                                kernels::to_dtype(g16, kFloat32));
  CHECK(vec_close(got.to_vector<double>(), twin.to_vector<double>(), 1e-5, 1e-5));
  // Empty and k = 0 products.
  CHECK(kernels::matmul(kernels::to_dtype(rnd({0, 3}, 24), kBFloat16), kernels::to_dtype(rnd({3, 2}, 25), kBFloat16)).shape() == Dims{0, 2});
  Tensor z = kernels::matmul(kernels::to_dtype(rnd({2, 0}, 26), kBFloat16), kernels::to_dtype(rnd({0, 3}, 27), kBFloat16));
  CHECK(z.to_vector<double>() == std::vector<double>(6, 0.0));
}

TEST_CASE("bfloat16: matmul errors name both operands' dtypes and shapes") {
  Tensor h = kernels::to_dtype(rnd({2, 3}, 1), kBFloat16);
  const std::string mixed = error_of([&] { (void)kernels::matmul(h, rnd({3, 2}, 2)); });
  CHECK(contains_all(mixed, {"bfloat16", "float32", "(2,3)", "(3,2)"}));
  const std::string inner = error_of([&] { (void)kernels::matmul(h, h); });
  CHECK(contains_all(inner, {"inner sizes", "(2,3)"}));
}

TEST_CASE("bfloat16: the CPU summary names the model and the native-bf16 decision agrees with its flags") {
  const std::string s = cpu_bf16_summary();
  INFO(s);
  CHECK(!s.empty());
  CHECK(cpu_has_native_bf16() == (s.find("avx512_bf16") != std::string::npos || s.find("amx_bf16") != std::string::npos));
  CHECK(onednn_description().find(onednn_built() ? "oneDNN" : "not built") != std::string::npos);
}
