// Fuzz target: NumPy .npy files (tensor/io_npy.cpp): magic, version, header length, the header
// dict (descr, fortran_order, shape) and the data. Identity checked on every input that loads: a
// file written from the loaded tensor reads back the same.
#include "fuzz/fuzz_common.hpp"
#include "tensor/io.hpp"

using namespace attnlab;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::guarded("fuzz_npy", [&] {
    const Tensor t = load_npy(fuzz::write_temp("input.npy", fuzz::as_text(data, size)));
    const std::string again = fuzz::write_temp("again.npy", "");
    Tensor back;
    fuzz::must_succeed("fuzz_npy", "write + read of the loaded tensor", [&] {
      save_npy(again, t);
      back = load_npy(again);
    });
    fuzz::require(fuzz::same_tensor(back, t), "fuzz_npy", "write + read changed the tensor");
  });
}
