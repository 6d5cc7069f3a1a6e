// Fuzz target: safetensors files (tensor/io_safetensors.cpp): the 8-byte header length, the JSON
// header (dtypes, shapes, offsets, __metadata__) and the data. Identities checked on every input
// that loads: safetensors_shapes agrees with load_safetensors, and a file written from the
// loaded tensors reads back the same.
#include "fuzz/fuzz_common.hpp"
#include "tensor/io.hpp"

using namespace attnlab;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::guarded("fuzz_safetensors", [&] {
    const std::string path = fuzz::write_temp("input.safetensors", fuzz::as_text(data, size));
    std::map<std::string, Dims> shapes;
    Metadata shape_meta;
    bool shapes_ok = true;
    try {
      shapes = safetensors_shapes(path, &shape_meta);
    } catch (const Error&) {
      shapes_ok = false;
    }
    Metadata meta;
    const TensorMap tensors = load_safetensors(path, &meta);
    fuzz::require(shapes_ok, "fuzz_safetensors", "load_safetensors reads a file safetensors_shapes rejects");
    fuzz::require(shape_meta == meta, "fuzz_safetensors", "the two readers give different metadata");
    fuzz::require(shapes.size() == tensors.size(), "fuzz_safetensors", "the two readers list different tensors");
    for (const auto& [name, t] : tensors) {
      auto it = shapes.find(name);
      fuzz::require(it != shapes.end() && it->second == t.shape(), "fuzz_safetensors",
                    "safetensors_shapes and load_safetensors disagree on '" + name + "'");
    }
    const std::string again = fuzz::write_temp("again.safetensors", "");
    Metadata meta2;
    TensorMap back;
    fuzz::must_succeed("fuzz_safetensors", "write + read of the loaded tensors", [&] {
      save_safetensors(again, tensors, meta);
      back = load_safetensors(again, &meta2);
    });
    fuzz::require(meta2 == meta && back.size() == tensors.size(), "fuzz_safetensors", "write + read changed the file");
    for (const auto& [name, t] : tensors)
      fuzz::require(back.count(name) && fuzz::same_tensor(back.at(name), t), "fuzz_safetensors",
                    "write + read changed tensor '" + name + "'");
  });
}
