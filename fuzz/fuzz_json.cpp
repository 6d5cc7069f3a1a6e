// Fuzz target: the JSON readers. tensor/json_lite.cpp parses safetensors headers; a run's
// meta.json is read back (nlohmann::json) when the run resumes (append_meta_session in
// experiments/runner/experiment.cpp). Identity checked on every string json_lite reads: quote()
// writes it as a literal that parses back to the same bytes.
#include "experiments/runner/experiment.hpp"
#include "fuzz/fuzz_common.hpp"
#include "tensor/json_lite.hpp"

using namespace attnlab;

namespace {

void check_strings(const json_lite::Value& v) {
  using Kind = json_lite::Value::Kind;
  auto round_trip = [](const std::string& s) {
    json_lite::Value back;
    fuzz::must_succeed("fuzz_json", "parse(quote(s))", [&] { back = json_lite::parse(json_lite::quote(s)); });
    fuzz::require(back.kind == Kind::String && back.string == s, "fuzz_json", "quote does not parse back");
  };
  if (v.kind == Kind::String) round_trip(v.string);
  for (const auto& item : v.array) check_strings(item);
  for (const auto& [key, item] : v.object) {
    round_trip(key);
    check_strings(item);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::as_text(data, size));
  fuzz::guarded("fuzz_json", [&] { check_strings(json_lite::parse(text)); });
  return fuzz::guarded("fuzz_json", [&] {
    (void)runner::append_meta_session(text, "meta.json", "2026-01-01T00:00:00Z", 2);
  });
}
