// The `collab_compress` experiment (experiments/catalog/collab_compress.cpp) on a tiny recall
// model, and the spectrum helpers it uses (experiments/analysis/spectrum.hpp).
#include <filesystem>
#include <map>
#include <sstream>

#include "experiments/analysis/spectrum.hpp"
#include "helpers.hpp"
#include "runner/catalog_run.hpp"

using namespace attnlab;
using namespace attnlab::analysis;
using namespace attnlab::testing;
namespace fs = std::filesystem;

namespace {

fs::path fresh(const std::string& name) { return fresh_run_dir("collab", name); }

int run(const fs::path& dir, const std::vector<std::string>& sets, std::string* console_out = nullptr) {
  return run_catalog("collab_compress", dir,
                     {"task.name=recall", "task.num_pairs=3", "task.num_keys=6", "task.num_values=6",
                      "task.train_size=200", "task.val_size=60", "task.test_size=60", "model.d_model=16",
                      "model.layers=2", "model.ffn_hidden=32", "model.attention=mha(heads=2)", "train.steps=20",
                      "train.eval_every=10", "collab.cp_iterations=50"},
                     sets, console_out);
}

}  // namespace

TEST_CASE("spectrum: singular values of known matrices, cumulative energy and energy rank") {
  // A permuted diagonal: singular values 5, 2, 1 in any row order.
  Tensor m = t64({0, 5, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0}, {3, 4});  // (3, 4)
  std::vector<double> s = singular_values(m);
  REQUIRE(s.size() == 3);
  CHECK(s[0] == doctest::Approx(5).epsilon(1e-12));
  CHECK(s[1] == doctest::Approx(2).epsilon(1e-12));
  CHECK(s[2] == doctest::Approx(1).epsilon(1e-12));
  CHECK(singular_values(transpose(m, 0, 1)) == s);  // wide and tall give the same values

  // A random rank-2 (6, 5) matrix: non-increasing, sum of squares = Frobenius norm^2, s_3.. ~ 0.
  Tensor a = matmul(leaf64({6, 2}, 1).detach(), leaf64({2, 5}, 2).detach());  // (6, 5)
  std::vector<double> r = singular_values(a);
  double sq = 0, fro = 0;
  for (size_t j = 0; j < r.size(); ++j) {
    sq += r[j] * r[j];
    if (j > 0) CHECK(r[j] <= r[j - 1]);
  }
  for (double v : a.to_vector<double>()) fro += v * v;
  CHECK(sq == doctest::Approx(fro).epsilon(1e-10));
  CHECK(r[2] < 1e-6 * r[0]);
  std::vector<double> c = cumulative_energy(r);
  CHECK(c.back() == 1.0);
  CHECK(energy_rank(c, 0.999999) == 2);
  CHECK(energy_rank(cumulative_energy({3, 0, 0}), 0.9) == 1);
  CHECK(cumulative_energy({0, 0}) == std::vector<double>{1, 1});

  CHECK(error_of([] { symmetric_eigenvalues({1, 2, 3, 4}, 2); }).find("not symmetric") != std::string::npos);
  CHECK(error_of([] { symmetric_eigenvalues({1, 2, 3}, 2); }).find("n*n = 4") != std::string::npos);
}

TEST_CASE("spectrum: singular values 1 ... 1e-12 resolved in float64, to ~1e-7 of the largest in float32") {
  std::vector<double> want;
  for (int e = 0; e <= 12; ++e) want.push_back(std::pow(10.0, -e));
  const Tensor m = with_singular_values(16, 13, want, 7);  // (16, 13), tall
  const std::vector<double> s = singular_values(m);
  REQUIRE(s.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(s[i] - want[i]) <= 1e-3 * want[i]);
  }
  // float32 entries carry ~6e-8 relative rounding: values down to 1e-5 still come out to 1%,
  // those below ~1e-7 are that rounding (never the exact 1e-12).
  const std::vector<double> s32 = singular_values(to(m, kFloat32));
  for (size_t i = 0; i <= 5; ++i) CHECK(std::abs(s32[i] - want[i]) <= 1e-2 * want[i]);
  CHECK(std::abs(s32.back() - want.back()) > 10 * want.back());
}

TEST_CASE("spectrum: concat_qk_products stacks Wq_i^T Wk_i per head") {
  Tensor wq = leaf64({6, 4}, 3).detach(), wk = leaf64({6, 4}, 4).detach();  // (h*dk, D), h = 2, dk = 3
  Tensor p = concat_qk_products(wq, wk, 2);                                 // (D, h*D)
  CHECK(p.shape() == Dims{4, 8});
  Tensor head1 = matmul(transpose(narrow(wq, 0, 3, 3), 0, 1), narrow(wk, 0, 3, 3));  // (D, D)
  CHECK(allclose(narrow(p, 1, 4, 4), head1, 1e-12, 1e-12));
  CHECK(error_of([&] { concat_qk_products(wq, wk, 4); }).find("h = 4") != std::string::npos);
}

TEST_CASE("collab_compress: a diverging fine-tuning fails the run, naming the loop, the step and the loss") {
  fs::path dir = fresh("diverge");
  std::string console;
  CHECK(run(dir, {"collab.shared_key_sizes=2", "collab.finetune_steps=4", "collab.finetune_lr=1e30"}, &console) == 1);
  CAPTURE(console);
  CHECK(console.find("collab_compress fine-tuning: the loss is") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "summary.json"));
}

TEST_CASE("collab_compress: exact conversion at Dk~ = h*dk keeps accuracy, spectra are cumulative energies") {
  fs::path dir = fresh("run");
  REQUIRE(run(dir, {"collab.shared_key_sizes=2,16", "collab.finetune_steps=3"}) == 0);
  auto m = summary_metrics(dir);
  CHECK(m["acc_dk16"].get<double>() == m["test_acc"].get<double>());  // h*dk = 16: the concatenate layout
  CHECK(m["cp_error_dk16"].get<double>() == 0.0);
  CHECK(m["cp_error_dk2"].get<double>() > 0.0);
  CHECK(m.contains("acc_dk2_ft"));
  // The fine-tuning control: the mha model fine-tuned the same way, once per run.
  REQUIRE(m.contains("acc_mha_ft"));
  CHECK(m["acc_mha_ft"].get<double>() >= 0.0);
  CHECK(m["acc_mha_ft"].get<double>() <= 1.0);
  for (int dk : {2, 16}) {
    CAPTURE(dk);
    CHECK(m[fmt::format("delta_dk{}_ft", dk)].get<double>() ==
          m[fmt::format("acc_dk{}_ft", dk)].get<double>() - m["acc_mha_ft"].get<double>());
  }
  CHECK(m["rank90_qk"].get<double>() >= 1.0);
  CHECK(m["rank90_qk"].get<double>() <= m["rank95_qk"].get<double>());
  CHECK(fs::exists(dir / "artifacts" / "spectrum.svg"));
  CHECK(fs::exists(dir / "artifacts" / "accuracy_vs_dk.svg"));

  // spectrum.csv: per (state, layer, matrix), non-decreasing cumulative energy ending at 1.
  std::map<std::string, std::vector<double>> curves;
  std::istringstream csv(slurp(dir / "artifacts" / "spectrum.csv"));
  std::string line;
  std::getline(csv, line);
  while (std::getline(csv, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    REQUIRE(f.size() == 5);
    curves[f[0] + f[1] + f[2]].push_back(std::stod(f[4]));
  }
  CHECK(curves.size() == 2 * 2 * 3);  // init/trained x 2 layers x q, k, qk
  for (const auto& [key, c] : curves) {
    CAPTURE(key);
    CHECK(c.size() == 16);  // min(h*dk, D) for q and k; D for the (D, h*D) products
    for (size_t r = 1; r < c.size(); ++r) CHECK(c[r] >= c[r - 1]);
    CHECK(c.back() == doctest::Approx(1.0));
  }
  fs::remove_all(dir);
}

TEST_CASE("collab_compress: without fine-tuning steps the mha control is the trained model") {
  fs::path dir = fresh("noft");
  REQUIRE(run(dir, {"collab.shared_key_sizes=16", "collab.finetune_steps=0"}) == 0);
  auto m = summary_metrics(dir);
  CHECK(m["acc_mha_ft"].get<double>() == m["test_acc"].get<double>());
  CHECK(m["acc_dk16_ft"].get<double>() == m["test_acc"].get<double>());  // exact conversion, not fine-tuned
  CHECK(m["delta_dk16_ft"].get<double>() == 0.0);
  fs::remove_all(dir);
}

TEST_CASE("collab_compress: a shared key size above h*dk or not a number fails naming the key") {
  std::string console;
  fs::path dir = fresh("bad");
  CHECK(run(dir, {"collab.shared_key_sizes=4,32", "train.steps=1"}, &console) == runner::kExitFailed);
  CHECK(console.find("collab.shared_key_sizes: 32 exceeds the model's h*dk = 16") != std::string::npos);
  fs::remove_all(dir);
  CHECK(run(dir, {"collab.shared_key_sizes=4,x", "train.steps=1"}, &console) == runner::kExitFailed);
  CHECK(console.find("'x'") != std::string::npos);
  fs::remove_all(dir);
}
