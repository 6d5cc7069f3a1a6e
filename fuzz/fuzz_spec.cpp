// Fuzz target: attention spec strings (nn/attention/spec.cpp) and the registry
// (nn/attention/registry.cpp): parse_spec, its round trip through to_string, and make_attention
// at a small d_model, which checks every option against the variant's schema and builds the
// module (unless a size option asks for a large one, see kMaxBuiltSize). Identity checked on every
// spec that parses: to_string gives text that parses back to the same spec.
#include <cstdint>
#include <optional>

#include "fuzz/fuzz_common.hpp"
#include "nn/attention/registry.hpp"
#include "nn/attention/spec.hpp"
#include "tensor/option_string.hpp"

using namespace attnlab;

namespace {

constexpr int64_t kDModel = 16;
// Sizes past this build large but valid modules (mha(key_size=20000000) is 2.5 GB of weights):
// the user asked for them, so they are no finding, and they would only trip libFuzzer's memory
// limit. Values past 2^31 - 1 are still built: the option bounds must refuse them.
constexpr int64_t kMaxBuiltSize = 4096;

bool builds_large(const nn::Spec& spec) {
  for (const auto& [name, value] : spec.options)
    if (const std::optional<int64_t> v = parse_integer(value); v && *v > kMaxBuiltSize && *v <= INT32_MAX) return true;
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::guarded("fuzz_spec", [&] {
    const std::string text(fuzz::as_text(data, size));
    const nn::Spec spec = nn::parse_spec(text);
    nn::Spec back;
    fuzz::must_succeed("fuzz_spec", "parse_spec(to_string(spec))", [&] { back = nn::parse_spec(nn::to_string(spec)); });
    fuzz::require(back.name == spec.name && back.options == spec.options, "fuzz_spec",
                  "to_string does not parse back to the same spec");
    if (!builds_large(spec)) (void)nn::make_attention(text, kDModel);
  });
}
