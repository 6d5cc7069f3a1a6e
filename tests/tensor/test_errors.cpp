// Misuse gives a typed exception whose message names the op and the shapes, dims or values it
// saw (docs/conventions.md, "Errors"), never a crash. One case per family of mistakes.
#include "tensor_testing.hpp"

using namespace attnlab;
using namespace attnlab::testing;

TEST_CASE("errors: every error type is an attnlab::Error and a std::exception") {
  CHECK_THROWS_AS(reshape(zeros({2, 3}), {4}), ShapeError);
  CHECK_THROWS_AS(reshape(zeros({2, 3}), {4}), Error);
  CHECK_THROWS_AS(reshape(zeros({2, 3}), {4}), std::runtime_error);
  CHECK_THROWS_AS(zeros({2}).data<double>(), DTypeError);
  CHECK_THROWS_AS(zeros({2}).size(3), IndexError);
  CHECK_THROWS_AS(zeros({2}).item(), ValueError);
}

TEST_CASE("errors: bad reshape and view sizes") {
  Tensor x = zeros({2, 3});
  CHECK(error_of([&] { reshape(x, {4, 2}); }) == "reshape: cannot reshape (2,3) (6 elements) to (4,2) (8 elements)");
  CHECK_ERROR(ShapeError, (reshape(x, Dims{-1, 4})), "reshape", "(2,3)", "6 elements", "(-1,4)");
  CHECK_ERROR(ShapeError, (reshape(x, Dims{-1, -1})), "reshape", "only one size may be -1", "(-1,-1)");
  CHECK_ERROR(ShapeError, (reshape(x, Dims{-2, 3})), "reshape", "-2", "(-2,3)");
  CHECK_ERROR(ShapeError, (view(x, Dims{5})), "view", "(2,3)", "(5)");
}

TEST_CASE("errors: negative sizes and too many dims") {
  CHECK_ERROR(ShapeError, zeros({2, -1}), "negative size", "(2,-1)");
  CHECK_ERROR(ShapeError, ones({-3}), "negative size", "(-3)");
  CHECK_ERROR(ShapeError, (full(Dims{4, -2}, 1.0)), "negative size", "(4,-2)");
  Generator g(0);
  CHECK_ERROR(ShapeError, randn({-1}, g), "negative size", "(-1)");
  CHECK_ERROR(ShapeError, (Dims{1, 1, 1, 1, 1, 1, 1, 1, 1}), "at most 8 dimensions");
  CHECK_ERROR(ShapeError, unsqueeze(zeros({1, 1, 1, 1, 1, 1, 1, 1}), 0), "at most 8 dimensions");
  CHECK_ERROR(ValueError, eye(2, -3), "eye", "-3");
  CHECK_ERROR(ShapeError, (from_vector<float>({1, 2, 3}, {2, 2})), "from_vector", "3 values", "(2,2)", "4 elements");
}

TEST_CASE("errors: sizes whose product overflows int64 are a ShapeError naming the shape") {
  const int64_t big = int64_t{1} << 62;
  CHECK_ERROR(ShapeError, zeros({big, 4}), "(4611686018427387904,4)", "2^63-1");
  CHECK_ERROR(ShapeError, numel_of(Dims{4, big}), "(4,4611686018427387904)");
  CHECK_ERROR(ShapeError, contiguous_strides(Dims{2, big, 2}), "(2,4611686018427387904,2)");
  CHECK_ERROR(ShapeError, (reshape(zeros({0}), Dims{big, 4, 0})), "4611686018427387904");
  CHECK_ERROR(ShapeError, expand(ones({1, 1}), {big, 4}).numel(), "(4611686018427387904,4)");
  CHECK_ERROR(ShapeError, numel_of(Dims{3, -2}), "negative size", "(3,-2)");
  // A zero size makes 0 elements as long as the other sizes multiply without overflow.
  CHECK(zeros({0, big}).numel() == 0);
  CHECK(contiguous_strides(Dims{3, 0, 5}) == Dims{5, 5, 1});
}

TEST_CASE("errors: a tensor larger than physical memory is a MemoryError naming shape, dtype and bytes") {
  const int64_t big = int64_t{1} << 62;
  CHECK_ERROR(MemoryError, zeros({big}, kFloat32), "(4611686018427387904)", "float32", "more than 2^63-1 bytes");
  CHECK_ERROR(MemoryError, zeros({1000000000, 1000}, kFloat64), "(1000000000,1000)", "float64",
              "8000000000000 bytes", "physical memory");
  CHECK_THROWS_AS(zeros({1000000000, 1000}), Error);
  CHECK(physical_memory_bytes() > 0);
}

TEST_CASE("errors: out-of-range dims name the op, the dim and the valid range") {
  Tensor x = zeros({2, 3});
  CHECK(error_of([&] { sum(x, {2}); }) ==
        "sum: dim 2 is out of range for a tensor with 2 dimensions (expected -2 to 1)");
  CHECK_ERROR(IndexError, softmax(x, -3), "softmax", "dim -3", "2 dimensions", "-2 to 1");
  CHECK_ERROR(IndexError, transpose(x, 0, 2), "transpose", "dim 2");
  CHECK_ERROR(IndexError, (permute(x, Dims{0, 5})), "permute", "dim 5");
  CHECK_ERROR(IndexError, squeeze(x, 4), "squeeze", "dim 4");
  CHECK_ERROR(IndexError, unsqueeze(x, -4), "unsqueeze", "dim -4", "3 dimensions");
  CHECK_ERROR(IndexError, max(x, 2), "max", "dim 2");
  CHECK_ERROR(IndexError, argmin(x, -5), "min", "dim -5");
  CHECK_ERROR(IndexError, cumsum(x, 9), "cumsum", "dim 9");
  CHECK_ERROR(IndexError, flatten(x, 3), "flatten", "dim 3");
  CHECK_ERROR(IndexError, (split(x, 1, 2)), "split", "dim 2");
  CHECK_ERROR(IndexError, (chunk(x, 2, -3)), "chunk", "dim -3");
  CHECK_ERROR(IndexError, (stack({x, x}, 4)), "stack", "dim 4");
  CHECK_ERROR(IndexError, (topk(x, 1, 2)), "topk", "dim 2");
  CHECK_ERROR(IndexError, (sort(x, 2)), "sort", "dim 2");
  CHECK_ERROR(IndexError, (gather(x, 2, zeros({2, 3}, kInt64))), "gather", "dim 2");
  CHECK_ERROR(IndexError, (index_select(x, 2, zeros({1}, kInt64))), "index_select", "dim 2");
  CHECK_ERROR(IndexError, (mean(x, {3})), "mean", "dim 3");
  CHECK_ERROR(IndexError, (amax(x, {3})), "amax", "dim 3");
  CHECK_ERROR(IndexError, x.size(2), "size", "dim 2");
  CHECK_ERROR(IndexError, x.stride(-3), "stride", "dim -3");
}

TEST_CASE("errors: wrong ranks and shapes for structural ops") {
  Tensor x = zeros({2, 3});
  CHECK_ERROR(ShapeError, (permute(x, Dims{0})), "permute", "(0)", "2 dims");
  CHECK_ERROR(ShapeError, (permute(x, Dims{1, 1})), "permute", "repeats", "(1,1)");
  CHECK_ERROR(ShapeError, tril(zeros({3})), "tril", "2 dims", "(3)");
  CHECK_ERROR(ShapeError, (expand(x, Dims{4, 3})), "expand", "(2,3)", "(4,3)");
  CHECK_ERROR(ShapeError, (select(scalar_tensor(1), 0, 0)), "select", "0-d");
  CHECK_ERROR(ShapeError, (slice(scalar_tensor(1), 0, 0, 1)), "slice", "0-d");
  CHECK_ERROR(ShapeError, (embedding(zeros({2, 2, 2}), zeros({1}, kInt64))), "embedding", "(2,2,2)");
  CHECK_ERROR(ShapeError, (matmul(zeros({2, 3}), zeros({4, 3}))), "matmul", "(2,3)", "(4,3)", "3 and 4");
  CHECK_ERROR(ShapeError, (add(x, zeros({3, 2}))), "add", "(2,3)", "(3,2)");
}

TEST_CASE("errors: index values out of range") {
  Tensor x = zeros({2, 3});
  CHECK_ERROR(IndexError, (narrow(x, 1, 2, 2)), "narrow", "start 2", "length 2", "size 3", "(2,3)");
  CHECK_ERROR(IndexError, (narrow(x, 0, -3, 1)), "narrow", "(2,3)");
  CHECK_ERROR(IndexError, (select(x, 1, 3)), "select", "index 3", "size 3");
  CHECK_ERROR(IndexError, (select(x, 0, -3)), "select", "index -3", "size 2");
  CHECK_ERROR(IndexError, (x.at({0, 3})), "at", "index 3", "size 3");
  CHECK_ERROR(IndexError, (x.at({0})), "at", "1 indices", "(2,3)");
  CHECK_ERROR(IndexError, (index_select(x, 1, from_vector<int64_t>({0, 7}, {2}))), "index_select", "index 7",
              "size 3");
  CHECK_ERROR(IndexError, (gather(x, 0, from_vector<int64_t>({2}, {1, 1}))), "gather", "index 2", "size 2");
  CHECK_ERROR(IndexError, (embedding(zeros({4, 2}), from_vector<int64_t>({-5}, {1}))), "index -5", "size 4");
  CHECK_ERROR(ValueError, (slice(x, 1, 0, 3, 0)), "slice", "step", "0");
  CHECK_ERROR(ValueError, (slice(x, 1, 0, 3, -1)), "slice", "step", "-1");
  CHECK_ERROR(ValueError, (topk(x, 4, 1)), "topk", "k = 4", "size 3");
}

TEST_CASE("errors: item, data and conversions") {
  CHECK(error_of([] { zeros({2, 3}).item(); }) ==
        "item: only a one-element tensor converts to a number, got shape (2,3)");
  CHECK_ERROR(ValueError, zeros({0}).item(), "item", "(0)");
  CHECK(zeros({1, 1, 1}).item() == 0);
  CHECK_ERROR(DTypeError, zeros({2}).data<double>(), "data", "float32", "float64");
  CHECK_ERROR(DTypeError, zeros({2}, kInt64).data<float>(), "data", "int64", "float32");
  CHECK_ERROR(ValueError, Tensor().item(), "item", "undefined");
}

TEST_CASE("errors: dtypes an op cannot take") {
  Tensor f = zeros({2}), i = zeros({2}, kInt64), b = zeros({2}, kBool);
  CHECK_ERROR(DTypeError, exp(i), "exp", "int64");
  CHECK_ERROR(DTypeError, exp(b), "exp", "bool");
  CHECK_ERROR(DTypeError, sqrt(i), "sqrt", "int64");
  CHECK_ERROR(DTypeError, (softmax(i, 0)), "softmax", "int64");
  CHECK_ERROR(DTypeError, (mean(b)), "mean", "bool");
  CHECK_ERROR(DTypeError, (matmul(zeros({2, 2}, kInt64), zeros({2, 2}, kInt64))), "matmul", "int64");
  CHECK_ERROR(DTypeError, (where(f, f, f)), "where", "bool", "float32");
  CHECK_ERROR(DTypeError, (masked_fill(f, i, 0)), "masked_fill", "int64");
  CHECK_ERROR(DTypeError, (index_select(f, 0, f)), "index_select", "int64", "float32");
  CHECK_ERROR(DTypeError, (cumsum(b, 0)), "cumsum", "bool");
  CHECK_ERROR(DTypeError, (add(f, i)), "add", "float32", "int64");
  CHECK_ERROR(ValueError, (gelu(f, "exact")), "gelu", "\"exact\"");
  CHECK_ERROR(ValueError, (clamp(f, 1, -1)), "clamp", "min", "max");
}

TEST_CASE("errors: a failed op leaves its inputs unchanged and later ops still work") {
  Tensor x = from_vector<float>({1, 2, 3}, {3});
  CHECK_THROWS(add_(x, zeros({2})));
  CHECK_THROWS(copy_(x, zeros({4})));
  CHECK(x.to_vector<float>() == std::vector<float>{1, 2, 3});
  CHECK(sum(x).item() == 6);
}
