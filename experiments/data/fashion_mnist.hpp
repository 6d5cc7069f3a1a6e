/// @file
/// Fashion-MNIST (Xiao et al. 2017) from the IDX `.gz` files of the Debian package
/// `dataset-fashion-mnist` (/usr/share/datasets/fashion-mnist), read with zlib, in two token
/// forms: 4x4-patch sequences (49 tokens of 16 values, for a small ViT) and pixel sequences
/// (784 tokens, the Long Range Arena "Image" setting).
/// @ingroup data
#pragma once
#include <string>

#include "tensor/tensor.hpp"

/// @addtogroup data
/// @{
namespace attnlab::data {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";  ///< where Debian's dataset-fashion-mnist installs it

/// Images and their labels.
struct ImageSet {
  Tensor images;  ///< int64 (N, 28, 28), pixel values 0..255
  Tensor labels;  ///< int64 (N), classes 0..9
};

/// split: "train" (60,000 images) or "test" (10,000). `limit` > 0 keeps the first `limit`.
/// A missing file throws FileError naming the path and the Debian package that provides it.
ImageSet load_fashion_mnist(const std::string& split, const std::string& dir = kFashionMnistDir, int64_t limit = 0);

/// (N, 28, 28) -> float32 (N, (28/patch)^2, patch*patch) in [0, 1]; patches in row-major order,
/// each patch's pixels row-major.
Tensor as_patches(const Tensor& images, int64_t patch = 4);
/// (N, 28, 28) -> int64 (N, 784), row-major pixel values 0..255.
Tensor as_pixel_tokens(const Tensor& images);

}  // namespace attnlab::data
/// @}
