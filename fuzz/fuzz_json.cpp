// Fuzz target: a run's meta.json read back (nlohmann::json) when the run resumes
// (append_meta_session in experiments/runner/experiment.cpp). The safetensors header, the other
// JSON attnlab reads, is fuzzed with its file by fuzz_safetensors.
#include "experiments/runner/experiment.hpp"
#include "fuzz/fuzz_common.hpp"

using namespace attnlab;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::as_text(data, size));
  return fuzz::guarded("fuzz_json", [&] {
    (void)runner::append_meta_session(text, "meta.json", "2026-01-01T00:00:00Z", 2);
  });
}
