// Fuzz target: the IDX reader of Fashion-MNIST (experiments/data/fashion_mnist.cpp): magic,
// dims, sizes and labels of an image file and a label file. The input is split as
//   byte 0         the `limit` argument: byte % 4 (0 = all examples)
//   bytes 1-2      n, the length of the image file (little-endian; capped at what follows)
//   next n bytes   train-images-idx3-ubyte.gz
//   the rest       train-labels-idx1-ubyte.gz
// The files are written uncompressed: zlib's gzread reads a file without a gzip header as is, so
// the fuzzer spends its time in the IDX parser rather than in inflate. Checked on every input
// that loads: N images of 28x28 pixels in 0..255 and N labels in 0..9.
#include <algorithm>

#include "experiments/data/fashion_mnist.hpp"
#include "fuzz/fuzz_common.hpp"

using namespace attnlab;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::guarded("fuzz_idx", [&] {
    if (size < 3) return;
    const int64_t limit = data[0] % 4;
    const size_t n = std::min<size_t>(size_t(data[1]) | size_t(data[2]) << 8, size - 3);
    const std::string_view rest = fuzz::as_text(data + 3, size - 3);
    const std::string images = fuzz::write_temp("train-images-idx3-ubyte.gz", rest.substr(0, n));
    fuzz::write_temp("train-labels-idx1-ubyte.gz", rest.substr(n));
    const std::string dir = images.substr(0, images.rfind('/'));
    const data::ImageSet set = data::load_fashion_mnist("train", dir, limit);
    const int64_t count = set.labels.numel();
    fuzz::require(limit == 0 || count <= limit, "fuzz_idx", "more examples than the limit");
    fuzz::require(set.images.shape() == Dims{count, 28, 28}, "fuzz_idx", "images are not (N, 28, 28)");
    const auto px = set.images.to_vector<int64_t>();
    const auto lab = set.labels.to_vector<int64_t>();
    fuzz::require(std::all_of(px.begin(), px.end(), [](int64_t p) { return p >= 0 && p <= 255; }), "fuzz_idx",
                  "a pixel outside 0..255");
    fuzz::require(std::all_of(lab.begin(), lab.end(), [](int64_t l) { return l >= 0 && l <= 9; }), "fuzz_idx",
                  "a label outside 0..9");
  });
}
