// The lm experiment's train.precision: "bf16" runs the products under autocast where the build
// and the CPU allow (here forced, so that every machine with oneDNN exercises it), logs the
// decision and records it in meta.json; the loss stays close to float32's; a bad value is a
// usage error naming the key.
#include <cmath>
#include <cstdlib>

#include "catalog_run.hpp"
#include "helpers.hpp"

using namespace attnlab;
using namespace attnlab::testing;

TEST_CASE("lm train.precision = bf16: logged, recorded in meta.json, val_bpc close to float32's") {
  const char* saved = std::getenv("ATTNLAB_AUTOCAST");
  const std::string keep = saved ? saved : "";
  setenv("ATTNLAB_AUTOCAST", "force", 1);
  const auto f32 = fresh_run_dir("lm_precision", "f32"), b16 = fresh_run_dir("lm_precision", "bf16");
  std::string console;
  REQUIRE_MESSAGE(tiny_lm(f32, {}, &console) == 0, console);
  REQUIRE_MESSAGE(tiny_lm(b16, {"train.precision=bf16"}, &console) == 0, console);
  if (saved) setenv("ATTNLAB_AUTOCAST", keep.c_str(), 1);
  else unsetenv("ATTNLAB_AUTOCAST");

  const auto meta32 = nlohmann::json::parse(slurp(f32 / "meta.json"));
  const auto meta16 = nlohmann::json::parse(slurp(b16 / "meta.json"));
  CHECK(meta32["precision"]["used"] == "float32");
  CHECK(meta16["precision"]["requested"] == "bf16");
  CHECK(meta16["precision"]["used"] == (onednn_built() ? "bf16" : "float32"));
  CHECK(meta16["bf16"]["cpu"] == cpu_bf16_summary());
  CHECK(meta16["bf16"]["onednn"] == onednn_description());
  const std::string log = slurp(b16 / "log.txt");
  CHECK(log.find("precision: " + meta16["precision"]["reason"].get<std::string>()) != std::string::npos);
  if (onednn_built()) CHECK(log.find("bf16 products ran on oneDNN's") != std::string::npos);
  const double v32 = summary_metrics(f32)["val_bpc"].get<double>(), v16 = summary_metrics(b16)["val_bpc"].get<double>();
  CHECK(std::abs(v16 - v32) < 0.02 * v32);
  if (!onednn_built()) CHECK(v16 == v32);  // float32 throughout
  std::filesystem::remove_all(f32);
  std::filesystem::remove_all(b16);
}

TEST_CASE("lm train.precision: a value other than float32 or bf16 is a usage error naming the key") {
  const auto dir = fresh_run_dir("lm_precision", "bad");
  std::string console;
  CHECK(tiny_lm(dir, {"train.precision=fp16"}, &console) == runner::kExitUsage);
  CHECK(console.find("train.precision must be float32 or bf16, got 'fp16' (from --set)") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir));
}
