// Head analysis (experiments/analysis/): statistics on hand-built attention maps with known
// answers (positional, structural on a ListOps expression, rare-token, class masses, the memory
// bound), attention capture through the block observers, head importance against a finite
// difference of the loss in head_mask, LRP conservation on bias-free models, gate values and
// the tables and heatmaps.
#include <unistd.h>

#include <filesystem>

#include "experiments/analysis/heads.hpp"
#include "experiments/analysis/statistics.hpp"
#include "experiments/data/listops.hpp"
#include "experiments/plot/png.hpp"
#include "helpers.hpp"
#include "nn/attention/mha.hpp"
#include "tensor/kernels.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::analysis;
namespace fs = std::filesystem;

namespace {

// A probe with no model, for add_maps on hand-built maps.
Probe bare_probe(bool causal, int64_t pad_id = -1) {
  Probe p;
  p.causal = causal;
  p.pad_id = pad_id;
  return p;
}

// (1, heads, N, N) from rows given per head as functions n -> distribution over keys.
Tensor maps_of(int64_t N, const std::vector<std::function<std::vector<double>(int64_t)>>& heads) {
  std::vector<double> v;
  for (auto& f : heads)
    for (int64_t n = 0; n < N; ++n) {
      auto row = f(n);
      v.insert(v.end(), row.begin(), row.end());
    }
  return from_vector(v, {1, int64_t(heads.size()), N, N});
}

std::vector<double> one_hot(int64_t N, int64_t m) {
  std::vector<double> r(N, 0.0);
  r[m] = 1;
  return r;
}

Tensor tokens_of(const std::vector<int64_t>& t) { return from_vector(t, {1, int64_t(t.size())}); }

nn::EncoderConfig small_encoder(const std::string& spec, const std::string& activation = "gelu") {
  nn::EncoderConfig c;
  c.block.d_model = 8;
  c.block.attention = spec;
  c.block.ffn_hidden = 16;
  c.block.activation = activation;
  c.layers = 2;
  c.vocab_size = data::kListOpsVocab;
  c.max_len = 16;
  c.num_classes = 10;
  return c;
}

data::Batch listops_batch(int64_t n) {
  data::ListOpsConfig lc;
  lc.max_depth = 3, lc.max_args = 3, lc.min_length = 5, lc.max_length = 12;
  data::TensorDataset ds = data::generate_listops(n, lc, 7);
  return {ds.inputs, ds.targets};
}

void zero_biases(nn::Module& m) {
  for (auto& [name, p] : m.named_parameters())
    if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) kernels::copy_(p, zeros(p.shape(), p.dtype()));
}

}  // namespace

TEST_CASE("analysis: a head attending to n-1 is positional(-1), a uniform head is not") {
  const int64_t N = 6;
  AttentionRecorder rec(bare_probe(/*causal=*/true), {});
  Tensor p = maps_of(N, {[&](int64_t n) { return one_hot(N, std::max<int64_t>(n - 1, 0)); },
                         [&](int64_t n) {
                           std::vector<double> r(N, 0.0);
                           for (int64_t m = 0; m <= n; ++m) r[m] = 1.0 / double(n + 1);
                           return r;
                         }});
  rec.add_maps(0, p, {});
  rec.end_batch({}, 1);
  auto roles = head_roles(rec.stats());
  REQUIRE(roles.size() == 1);
  CHECK(roles[0][0].positional);
  CHECK(roles[0][0].offset == -1);
  CHECK(roles[0][0].offset_share == doctest::Approx(1.0));
  CHECK(roles[0][0].label() == "positional(-1)");
  CHECK_FALSE(roles[0][1].positional);
  // Queries 1..5 (query 0 sees one key only): the uniform head's maximum is 1/(n+1).
  const double uniform = (1.0 / 2 + 1.0 / 3 + 1.0 / 4 + 1.0 / 5 + 1.0 / 6) / 5;
  CHECK(confidence(rec.stats())[0][0] == doctest::Approx(1.0));
  CHECK(confidence(rec.stats())[0][1] == doctest::Approx(uniform));
}

TEST_CASE("analysis: ListOps enclosing operators, and a structural head scores 100% over the baseline") {
  const std::vector<int64_t> toks = data::parse_listops("[MAX 2 9 [MIN 4 7 ] 0 ]");
  const std::vector<int64_t> enc = listops_enclosing_operator(toks);
  CHECK(enc == std::vector<int64_t>{-1, 0, 0, 0, 3, 3, 3, 0, 0});
  std::vector<int64_t> with_cls = {-1};
  with_cls.insert(with_cls.end(), toks.begin(), toks.end());
  CHECK(listops_enclosing_operator(with_cls) == std::vector<int64_t>{-1, -1, 1, 1, 1, 4, 4, 4, 1, 1});
  CHECK_THROWS_AS(listops_enclosing_operator({data::kListOpsEnd}), ValueError);

  const int64_t N = int64_t(toks.size());
  StatsConfig cfg;
  cfg.listops_structure = true;
  AttentionRecorder rec(bare_probe(false), cfg);
  Tensor p = maps_of(N, {[&](int64_t n) { return one_hot(N, enc[n] >= 0 ? enc[n] : n); },
                         [&](int64_t n) { return one_hot(N, std::max<int64_t>(n - 1, 0)); }});
  rec.add_maps(0, p, tokens_of(toks));
  rec.end_batch({}, 1);
  const AttentionStats& s = rec.stats();
  CHECK(s.structural_queries == 8);
  // Offsets to the enclosing operator: -1 -2 -3 -1 -2 -3 -7 -8: the best fixed offset hits 2 of 8.
  CHECK(structural_baseline(s) == doctest::Approx(0.25));
  auto roles = head_roles(s);
  CHECK(roles[0][0].structural == doctest::Approx(1.0));
  CHECK(roles[0][0].is_structural);
  CHECK(roles[0][1].structural == doctest::Approx(0.25));  // n-1 is the operator for '2' and '4' only
  CHECK_FALSE(roles[0][1].is_structural);
  const std::string table = role_table(s);
  CHECK(table.find("structural |") != std::string::npos);
  CHECK(table.find("baseline 0.250") != std::string::npos);
}

TEST_CASE("analysis: a head on the rarest visible token is rare-token, class masses add up") {
  // Token 7 is rare in the corpus; it appears at position 3.
  const std::vector<int64_t> toks = {5, 5, 5, 7, 5, 5};
  const int64_t N = 6;
  StatsConfig cfg;
  cfg.rare_tokens = true;
  cfg.token_frequency = std::vector<double>(8, 100.0);
  cfg.token_frequency[7] = 1;
  cfg.token_class = {0, 0, 0, 0, 0, 0, 0, 1};
  cfg.class_names = {"common", "rare"};
  AttentionRecorder rec(bare_probe(true), cfg);
  Tensor p = maps_of(N, {[&](int64_t n) { return one_hot(N, n >= 3 ? 3 : 0); },
                         [&](int64_t n) {
                           std::vector<double> r(N, 0.0);
                           for (int64_t m = 0; m <= n; ++m) r[m] = 1.0 / double(n + 1);
                           return r;
                         }});
  rec.add_maps(0, p, tokens_of(toks));
  rec.end_batch({}, 1);
  const AttentionStats& s = rec.stats();
  CHECK(s.rare_queries == 3);  // queries 3, 4, 5 see two distinct ids
  CHECK(rare_uniform_baseline(s) == doctest::Approx((1.0 / 4 + 1.0 / 5 + 1.0 / 6) / 3));
  auto roles = head_roles(s);
  CHECK(roles[0][0].rare_mass == doctest::Approx(1.0));
  CHECK(roles[0][0].is_rare);
  CHECK_FALSE(roles[0][1].is_rare);
  const HeadStats& h0 = s.layers[0].heads[0];
  CHECK(h0.class_mass[1] == doctest::Approx(3.0));                       // queries 3..5 on token 7
  CHECK(h0.class_mass[0] + h0.class_mass[1] == doctest::Approx(double(h0.queries)));  // rows sum to 1
}

TEST_CASE("analysis: associative recall: a head from the query to the answer is retrieval, others are not") {
  // Keys are ids 0..3, values 4..7: k2 v5 k0 v6 k3 v4, query k0; the answer v6 sits at position 3.
  const std::vector<int64_t> toks = {2, 5, 0, 6, 3, 4, 0};
  const int64_t N = 7, query = 6;
  CHECK(recall_answer_position(toks.data(), query, 4) == 3);
  const std::vector<int64_t> absent = {2, 5, 1, 6, 3, 4, 0};  // k0 is not among the pairs
  CHECK(recall_answer_position(absent.data(), query, 4) == -1);
  StatsConfig cfg;
  cfg.recall_keys = 4;
  AttentionRecorder rec(bare_probe(false), cfg);
  auto uniform = [&](int64_t) { return std::vector<double>(size_t(N), 1.0 / double(N)); };
  // Head 0: the query row puts 0.8 on the answer. Head 1: on the matching key (position 2), not
  // the answer. Head 2: uniform. Head 3: 0.5 on the answer, just at the threshold.
  auto query_row = [&](int64_t at, double w) {
    return [=](int64_t n) {
      if (n != query) return uniform(n);
      std::vector<double> r(size_t(N), (1 - w) / double(N - 1));
      r[size_t(at)] = w;
      return r;
    };
  };
  Tensor p = maps_of(N, {query_row(3, 0.8), query_row(2, 0.9), uniform, query_row(3, 0.5)});
  rec.add_maps(0, p, tokens_of(toks));
  rec.end_batch({}, 1);
  const AttentionStats& s = rec.stats();
  CHECK(s.retrieval_queries == 1);
  CHECK(retrieval_uniform_baseline(s) == doctest::Approx(1.0 / 7));
  auto roles = head_roles(s);
  CHECK(roles[0][0].retrieval == doctest::Approx(0.8));
  CHECK(roles[0][0].is_retrieval);
  CHECK(roles[0][0].label() == "retrieval");
  CHECK(roles[0][1].retrieval == doctest::Approx(0.1 / 6));
  CHECK_FALSE(roles[0][1].is_retrieval);
  CHECK_FALSE(roles[0][2].is_retrieval);
  CHECK(roles[0][3].is_retrieval);  // >= 0.5 and >= 1/7 + 0.10
  RoleThresholds strict;
  strict.retrieval_mass = 0.6;
  CHECK_FALSE(head_roles(s, strict)[0][3].is_retrieval);
  CHECK(role_table(s).find("| 0.800 |") != std::string::npos);

  // An example whose query key is not among the pairs is not counted.
  AttentionRecorder none(bare_probe(false), cfg);
  none.add_maps(0, p, tokens_of(absent));
  none.end_batch({}, 1);
  CHECK(none.stats().retrieval_queries == 0);
  CHECK(std::isnan(head_roles(none.stats())[0][0].retrieval));
}

TEST_CASE("analysis: running statistics do not grow with the data set, only K maps are kept") {
  const int64_t N = 10;
  StatsConfig cfg;
  cfg.keep_examples = 3;
  AttentionRecorder rec(bare_probe(false), cfg);
  Generator g(1);
  std::vector<size_t> bytes;
  for (int batch = 0; batch < 40; ++batch) {
    Tensor p = softmax(randn({2, 4, N, N}, g, kFloat64), -1);  // (2, 4, N, N)
    rec.add_maps(0, p, {});
    rec.end_batch({}, 2);
    bytes.push_back(rec.stats().running_bytes());
  }
  CHECK(rec.stats().examples == 80);
  CHECK(rec.stats().layers[0].kept.size() == 3);
  CHECK(rec.stats().layers[0].kept[0].shape() == Dims{4, N, N});
  // Offsets can only take 2N - 1 values: after they have all appeared, the size is fixed.
  CHECK(bytes[39] == bytes[20]);
  CHECK(bytes[39] < 4 * (sizeof(HeadStats) + (2 * N - 1) * 48) + 4096);
}

TEST_CASE("analysis: capture and recorder on a real classifier, variants without probabilities are named") {
  manual_seed(0);
  nn::EncoderClassifier model(small_encoder("mha(heads=2)"));
  Probe probe = classifier_probe(model, data::kListOpsPad);
  data::Batch b = listops_batch(3);
  auto [logits, maps] = capture_attention(probe, b);
  REQUIRE(maps.size() == 2);
  const int64_t N = b.inputs.size(1) + 1;  // CLS
  CHECK(maps[0].shape() == Dims{3, 2, N, N});
  CHECK(allclose(sum(maps[1], {-1}), ones({3, 2, N})));
  // The observer is removed again: a plain forward equals the captured logits.
  CHECK(!probe.blocks[0]->attention_observer);
  {
    NoGradGuard ng;
    model.eval();
    CHECK(allclose(probe.forward(b), logits, 1e-5, 1e-6));
  }
  StatsConfig cfg;
  cfg.listops_structure = true;
  AttentionRecorder rec(probe, cfg);
  rec.add(b);
  rec.add(b);
  CHECK(rec.stats().examples == 6);
  CHECK(rec.stats().layers[1].heads[0].queries > 0);
  for (auto& row : confidence(rec.stats()))
    for (double c : row) CHECK((c > 0 && c <= 1.0 + 1e-9));

  manual_seed(0);
  nn::EncoderClassifier fnet(small_encoder("fnet"));
  Probe fp = classifier_probe(fnet);  // fnet takes no padding mask
  std::string e = error_of([&] { capture_attention(fp, b); });
  INFO(e);
  CHECK(e.find("layer 0 (fnet") != std::string::npos);
  CHECK(e.find("no attention probabilities") != std::string::npos);
  AttentionRecorder frec(fp, {});
  CHECK_THROWS_AS(frec.add(b), ValueError);
}

TEST_CASE("analysis: head importance equals |dL/dxi| by central differences") {
  manual_seed(1);
  nn::EncoderClassifier model(small_encoder("mha(heads=2)"));
  model.to(kFloat64);
  Probe probe = classifier_probe(model, data::kListOpsPad);
  data::Batch b = listops_batch(4);
  HeadImportance imp(probe);
  imp.add(b);
  CHECK(model.parameters()[0].requires_grad());  // restored
  const double eps = 1e-5;
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t i = 0; i < 2; ++i) {
      Tensor mask = head_mask_of(*probe.blocks[l], l);
      auto loss_at = [&](double v) {
        std::vector<double> m = {1, 1};
        m[i] = v;
        kernels::copy_(mask, from_vector(m));
        NoGradGuard ng;
        model.eval();
        return probe.loss(probe.forward(b), b).item();
      };
      const double fd = (loss_at(1 + eps) - loss_at(1 - eps)) / (2 * eps);
      loss_at(1);
      CHECK(imp.raw()[l][i] == doctest::Approx(std::abs(fd)).epsilon(1e-6));
    }
  HeadMatrix norm = imp.normalized();
  for (auto& row : norm) CHECK(row[0] * row[0] + row[1] * row[1] == doctest::Approx(1.0));
}

TEST_CASE("analysis: LRP relevance is conservative on bias-free models (classifier and LM)") {
  for (const std::string act : {"gelu", "relu"}) {
    manual_seed(2);
    nn::EncoderClassifier model(small_encoder("mha(heads=2)", act));
    model.to(kFloat64);
    zero_biases(model);
    Probe probe = classifier_probe(model, data::kListOpsPad);
    HeadRelevance rel(probe);
    rel.add(listops_batch(3));
    const RelevanceCheck& c = rel.check();
    INFO(act);
    CHECK(c.explained != 0);
    CHECK(c.input_relevance == doctest::Approx(c.explained).epsilon(1e-9));
    for (size_t l = 0; l < 2; ++l) CHECK(rel.raw()[l][0] + rel.raw()[l][1] == doctest::Approx(c.branch[l]).epsilon(1e-9));
    HeadMatrix n = rel.normalized();
    CHECK(std::abs(n[0][0]) + std::abs(n[0][1]) == doctest::Approx(1.0));
  }
  // Without the rules (a plain gradient x input) the same model does not conserve: the test
  // above can fail.
  manual_seed(2);
  nn::EncoderClassifier model(small_encoder("mha(heads=2)"));
  model.to(kFloat64);
  zero_biases(model);
  Probe probe = classifier_probe(model, data::kListOpsPad);
  data::Batch b = listops_batch(3);
  Tensor w = model.tok_emb->weight, pe = model.pos_emb->weight, cls = model.cls_token;
  for (Tensor t : {w, pe, cls}) t.set_grad(Tensor());
  Tensor y = probe.explained(probe.forward(b));
  y.backward();
  const double plain = sum(w.detach() * w.grad()).item() + sum(pe.detach() * pe.grad()).item() +
                       sum(cls.detach() * cls.grad()).item();
  CHECK(std::abs(plain - y.item()) > 1e-3 * std::abs(y.item()));

  manual_seed(3);
  nn::LMConfig lc;
  lc.block.d_model = 8, lc.block.attention = "mha(heads=2)", lc.block.ffn_hidden = 16;
  lc.layers = 2, lc.vocab_size = 11, lc.max_len = 12;
  nn::CausalLM lm(lc);
  lm.to(kFloat64);
  zero_biases(lm);
  Probe lp = lm_probe(lm);
  Generator g(4);
  Tensor toks = randint(0, 11, {2, 9}, g);
  HeadRelevance lrel(lp);
  lrel.add({toks, toks});
  CHECK(lrel.check().input_relevance == doctest::Approx(lrel.check().explained).epsilon(1e-9));
  for (size_t l = 0; l < 2; ++l)
    CHECK(lrel.raw()[l][0] + lrel.raw()[l][1] == doctest::Approx(lrel.check().branch[l]).epsilon(1e-9));
}

TEST_CASE("analysis: gate values are the eval-mode gates, heatmaps and tables are written") {
  manual_seed(5);
  nn::EncoderClassifier model(small_encoder("mha(heads=4, gate=hard_concrete, gate_init=0.5)"));
  model.train();
  auto gv = gate_values(model);
  REQUIRE(gv.size() == 2);
  CHECK(gv[0].first == "blocks.0.attn");
  // Eval mode: g = clamp(sigmoid(log_alpha) (zeta - gamma) + gamma, 0, 1), no noise.
  const double expected = std::clamp(1.0 / (1.0 + std::exp(-0.5)) * 1.2 - 0.1, 0.0, 1.0);
  for (double g : gv[0].second) CHECK(g == doctest::Approx(expected).epsilon(1e-6));
  CHECK(model.is_training());
  auto& gate = *static_cast<nn::MultiHeadAttention&>(*static_cast<nn::TransformerBlock&>(*(*model.blocks)[0]).attn).gate;
  CHECK(gate.is_training());
  auto metrics = gate_metrics(model);
  CHECK(metrics.size() == 8);
  CHECK(metrics[5].first == "gate.blocks.1.attn.1");
  for (auto& [name, v] : metrics) CHECK((v >= 0 && v <= 1));

  const std::string dir = (fs::temp_directory_path() / fmt::format("attnlab_test_analysis_{}", static_cast<long>(getpid()))).string();
  fs::create_directories(dir);
  save_head_heatmap(dir + "/conf.png", "confidence", {{0.1, 0.2, 0.3}, {0.4, 0.5}});
  plot::Image img = plot::read_png(dir + "/conf.png");
  CHECK(img.width > 3 * 8);
  auto paths = save_attention_maps(dir + "/maps", softmax(zeros({1, 2, 3, 3}), -1), {"a", "b", "c"}, {"a", "b", "c"});
  CHECK(paths.size() == 2);
  CHECK(fs::exists(paths[1]));
  fs::remove_all(dir);
}

TEST_CASE("analysis: ConservativeMode keeps values and changes only what autograd sees") {
  Tensor x = leaf64({3, 5}, 11);
  Tensor p_plain = softmax(x, -1), g_plain = gelu(x);
  nn::LayerNorm ln(5);
  ln.to(kFloat64);
  Tensor y_plain = ln(x);
  {
    ConservativeModeGuard conservative;
    Tensor p = softmax(x, -1);
    CHECK(allclose(p, p_plain, 0, 0));
    CHECK_FALSE(p.requires_grad());  // AH-rule: a constant
    Tensor g = gelu(x);
    CHECK(allclose(g, g_plain, 1e-12, 1e-15));
    // x * r(x) with r constant: the gradient of sum(gelu) is r(x) = gelu(x) / x.
    sum(g).backward();
    CHECK(allclose(x.grad(), g_plain.detach() / x.detach(), 1e-12, 1e-15));
    x.set_grad(Tensor());
    Tensor y = ln(x);
    CHECK(allclose(y, y_plain, 1e-12, 1e-15));
    // LN-rule: y is linear in x, so sum(x * dy/dx . w) = sum(y * w) with zero bias.
    Tensor w = leaf64({3, 5}, 12).detach();
    sum(y * w).backward();
    CHECK(sum(x.detach() * x.grad()).item() == doctest::Approx(sum(y.detach() * w).item()).epsilon(1e-12));
  }
  CHECK_FALSE(ConservativeMode::is_enabled());
  CHECK(softmax(x, -1).requires_grad());
}
