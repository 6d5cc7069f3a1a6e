// Transformer assemblies: a 10-step AdamW run pinned to PyTorch's losses, shapes and masks of
// each assembly, and gradients reaching every parameter.
#include "helpers.hpp"
#include "nn/loss.hpp"
#include "nn/transformer.hpp"
#include "optim/adam.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

nn::EncoderConfig golden_config(const Metadata& meta) {
  nn::EncoderConfig c;
  c.block.d_model = std::stoll(meta.at("D"));
  c.block.attention = "mha(heads=" + meta.at("H") + ")";
  c.block.ffn_hidden = std::stoll(meta.at("ffn"));
  c.layers = std::stoll(meta.at("layers"));
  c.vocab_size = std::stoll(meta.at("V"));
  c.max_len = std::stoll(meta.at("N"));
  c.num_classes = std::stoll(meta.at("classes"));
  c.pooling = "cls";
  return c;
}

// Runs the golden file's 10 AdamW steps in `dtype`; returns the losses.
std::vector<double> golden_losses(DType dtype, std::vector<double>* expected) {
  Metadata meta;
  TensorMap file = load_safetensors(std::string(ATTNLAB_REFERENCE_DIR) + "/transformer_golden.safetensors", &meta);
  nn::EncoderClassifier model(golden_config(meta));
  TensorMap init;
  for (auto& [name, t] : file)
    if (name.rfind("init.", 0) == 0) init[name.substr(5)] = t;
  model.load_state_dict(init);  // strict: every name must match PyTorch's
  model.to(dtype);
  optim::AdamW opt(model.parameters(), {.lr = std::stod(meta.at("lr")), .weight_decay = std::stod(meta.at("weight_decay"))});
  Tensor tokens = file.at("tokens"), padding = file.at("padding"), labels = file.at("labels");
  std::vector<double> losses;
  for (int step = 0; step < std::stoi(meta.at("steps")); ++step) {
    opt.zero_grad();
    Tensor loss = nn::cross_entropy(model.forward(tokens, padding), labels);
    loss.backward();
    opt.step();
    losses.push_back(loss.item());
  }
  *expected = file.at(dtype == kFloat64 ? "losses.float64" : "losses.float32").to_vector<double>();
  return losses;
}

// A causal LM of width 16 with learned positions.
nn::LMConfig lm_config(const std::string& attention, int64_t layers, int64_t vocab, int64_t max_len) {
  nn::LMConfig c;
  c.block.d_model = 16;
  c.block.attention = attention;
  c.layers = layers;
  c.vocab_size = vocab;
  c.max_len = max_len;
  return c;
}

}  // namespace

TEST_CASE("10 AdamW steps of a 2-layer pre-norm transformer classifier match PyTorch (float64, 1e-6)") {
  std::vector<double> expected;
  auto got = golden_losses(kFloat64, &expected);
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-6));
}

TEST_CASE("10 AdamW steps of a 2-layer pre-norm transformer classifier match PyTorch (float32, 1e-4)") {
  std::vector<double> expected;
  auto got = golden_losses(kFloat32, &expected);
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-4));
}

TEST_CASE("EncoderClassifier: feature inputs, mean pooling, padding, post-norm") {
  manual_seed(1);
  nn::EncoderConfig c;
  c.block.d_model = 16;
  c.block.attention = "mha(heads=2)";
  c.block.norm_first = false;
  c.input_dim = 5;
  c.max_len = 7;
  c.num_classes = 3;
  c.pooling = "mean";
  nn::EncoderClassifier model(c);
  Generator g(2);
  Tensor x = randn({2, 7, 5}, g);
  Tensor pad = ones({2, 7}, kBool);
  Tensor logits = model.forward(x, pad);
  CHECK(logits.shape() == Dims{2, 3});
  // Padded positions do not change the result for the real ones.
  Tensor pad2 = from_vector<bool>({1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1}, {2, 7});
  Tensor x2 = clone(x);
  {
    NoGradGuard ng;
    Tensor tail = narrow(select(x2, 0, 0), 0, 4, 3);
    fill_(tail, 100.0);
  }
  CHECK(allclose(select(model.forward(x, pad2), 0, 0), select(model.forward(x2, pad2), 0, 0), 1e-5, 1e-6));
  CHECK(error_of([&] { model.forward(randn({2, 8, 5}, g)); }).find("exceeds max_len 7") != std::string::npos);
}

TEST_CASE("CausalLM: the output at position n does not depend on tokens after n, every parameter gets a gradient") {
  manual_seed(3);
  nn::CausalLM lm(lm_config("mha(heads=4)", 2, 13, 8));
  Tensor a = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {1, 6});
  Tensor b = from_vector<int64_t>({1, 2, 3, 9, 9, 9}, {1, 6});
  Tensor la = lm.forward(a), lb = lm.forward(b);
  CHECK(la.shape() == Dims{1, 6, 13});
  CHECK(allclose(narrow(la, 1, 0, 3), narrow(lb, 1, 0, 3), 1e-5, 1e-6));
  CHECK_FALSE(allclose(narrow(la, 1, 3, 1), narrow(lb, 1, 3, 1), 1e-5, 1e-6));
  nn::cross_entropy(reshape(la, {6, 13}), reshape(b, {6})).backward();
  for (auto& [name, p] : lm.named_parameters()) {
    CAPTURE(name);
    CHECK(p.grad().defined());
  }
}

TEST_CASE("CausalLM positions: learned has pos_emb (max_len, D), none has none, takes any length and trains") {
  nn::LMConfig c = lm_config("mha(heads=2)", 1, 7, 8);
  manual_seed(4);
  nn::CausalLM learned(c);
  c.positions = "none";
  manual_seed(4);
  nn::CausalLM none(c);
  auto names = [](const nn::Module& m) {
    std::vector<std::string> out;
    for (auto& [name, p] : m.named_parameters()) out.push_back(name);
    return out;
  };
  const auto with = names(learned), without = names(none);
  CHECK(std::find(with.begin(), with.end(), "pos_emb.weight") != with.end());
  CHECK(learned.pos_emb->weight.shape() == Dims{8, 16});
  CHECK(std::find(without.begin(), without.end(), "pos_emb.weight") == without.end());
  CHECK(!none.pos_emb);
  CHECK(with.size() == without.size() + 1);
  CHECK(learned.num_parameters() == none.num_parameters() + 8 * 16);
  // max_len bounds the learned table only
  Generator gen(5);
  Tensor long_tokens = randint(0, 7, {2, 20}, gen);
  CHECK(none.forward(long_tokens).shape() == Dims{2, 20, 7});
  CHECK(error_of([&] { learned.forward(long_tokens); }).find("sequence length 20 exceeds max_len 8") !=
        std::string::npos);
  // without positions it still trains: counting sequences (start + n) mod 7 from random starts,
  // 60 AdamW steps take the next-token loss from about log 7 to below half of it
  optim::AdamW opt(none.parameters(), {.lr = 1e-2});
  auto loss_at = [&](Generator& g) {
    std::vector<int64_t> v(8 * 13), start = randint(0, 7, {8}, g).to_vector<int64_t>();
    for (int64_t b = 0; b < 8; ++b)
      for (int64_t n = 0; n < 13; ++n) v[b * 13 + n] = (start[b] + n) % 7;
    Tensor x = from_vector(v, {8, 13});                                       // (8, 13)
    Tensor logits = none.forward(narrow(x, 1, 0, 12));                        // (8, 12, 7)
    return nn::cross_entropy(reshape(logits, {-1, 7}), reshape(contiguous(narrow(x, 1, 1, 12)), {-1}));
  };
  Generator data(6);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    Tensor loss = loss_at(data);
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item();
    last = loss.item();
  }
  CAPTURE(first);
  CAPTURE(last);
  CHECK(first > 1.7);          // about log 7 = 1.95 at the start
  CHECK(last < 0.5 * first);
}

TEST_CASE("CausalLM positions: a value other than learned or none is a ValueError naming it") {
  nn::LMConfig c = lm_config("mha(heads=2)", 1, 7, 8);
  c.positions = "sinusoidal";
  CHECK(error_of([&] { nn::CausalLM lm(c); }).find("CausalLM: positions must be learned or none, got 'sinusoidal'") !=
        std::string::npos);
}

TEST_CASE("EncoderDecoder: shapes, causal decoder, cross-attention reaches the source, gradcheck of a block") {
  manual_seed(4);
  nn::Seq2SeqConfig c;
  c.block.d_model = 8;
  c.block.attention = "mha(heads=2)";
  c.encoder_layers = 1;
  c.decoder_layers = 1;
  c.src_vocab = 7;
  c.tgt_vocab = 5;
  c.max_len = 6;
  nn::EncoderDecoder model(c);
  Tensor src = from_vector<int64_t>({1, 2, 3, 4}, {1, 4}), src2 = from_vector<int64_t>({4, 3, 2, 1}, {1, 4});
  Tensor tgt = from_vector<int64_t>({0, 1, 2}, {1, 3});
  Tensor y = model.forward(src, tgt);
  CHECK(y.shape() == Dims{1, 3, 5});
  CHECK_FALSE(allclose(y, model.forward(src2, tgt), 1e-5, 1e-6));

  nn::BlockConfig bc;
  bc.d_model = 8;
  bc.attention = "mha(heads=2)";
  bc.cross_attention = "mha(heads=2)";
  bc.ffn_hidden = 12;
  nn::TransformerBlock block(bc);
  block.to(kFloat64);
  Generator g(5);
  Tensor x = randn({2, 3, 8}, g, kFloat64).requires_grad_();
  Tensor mem = randn({2, 4, 8}, g, kFloat64).requires_grad_();
  std::vector<Tensor> in = {x, mem};
  for (auto& p : block.parameters()) in.push_back(p);
  auto r = gradcheck([&](const std::vector<Tensor>& v) { return block.forward(v[0], {}, true, v[1]); }, in);
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("l0_penalty sums the gates of every layer") {
  manual_seed(6);
  nn::LMConfig c;
  c.block.d_model = 8;
  c.block.attention = "mha(heads=2, gate=hard_concrete)";
  c.layers = 3;
  c.vocab_size = 5;
  c.max_len = 4;
  nn::CausalLM lm(c);
  double one = 1.0 / (1.0 + std::exp(-(2.0 - 0.33 * std::log(0.1 / 1.1))));
  CHECK(nn::l0_penalty(lm).item() == doctest::Approx(6 * one).epsilon(1e-6));
}

// ---- packed sequences (segment_ids) ----

TEST_CASE("CausalLM with segment ids equals its documents run one by one, learned positions restart per segment") {
  const std::vector<std::vector<int64_t>> docs = {{4, 7, 1}, {12}};
  const Tensor ids = segments_of(docs);  // (2, 12)
  for (const std::string positions : {"learned", "none"}) {
    CAPTURE(positions);
    nn::LMConfig c = lm_config(positions == "learned" ? "mha(heads=2)" : "mha(heads=2, rope=true)", 2, 11, 12);
    c.positions = positions;
    nn::CausalLM lm(c);
    lm.to(kFloat64);
    lm.eval();
    Generator g(70);
    Tensor tokens = randint(0, 11, {2, 12}, g);  // (B, N)
    Tensor packed = lm.forward(tokens, ids);     // (B, N, V)
    for (int64_t b = 0; b < 2; ++b) {
      int64_t start = 0;
      for (int64_t len : docs[b]) {
        Tensor alone = lm.forward(narrow(narrow(tokens, 0, b, 1), 1, start, len));  // (1, len, V)
        CHECK(allclose(narrow(narrow(packed, 0, b, 1), 1, start, len), alone, 1e-9, 1e-10));
        start += len;
      }
    }
    // row 1 is one document: the same as no segment ids; row 0 is not (its later documents see
    // neither the earlier ones nor, with learned positions, positions past their own start)
    Tensor plain = lm.forward(tokens);
    CHECK(allclose(narrow(packed, 0, 1, 1), narrow(plain, 0, 1, 1), 1e-12, 1e-12));
    CHECK_FALSE(allclose(narrow(narrow(packed, 0, 0, 1), 1, 4, 8), narrow(narrow(plain, 0, 0, 1), 1, 4, 8), 1e-6, 1e-6));
  }
}

TEST_CASE("packed CausalLM trains: gradients reach pos_emb only at the positions the segments use") {
  nn::CausalLM lm(lm_config("mha(heads=2)", 1, 9, 10));
  Generator g(71);
  Tensor tokens = randint(0, 9, {2, 8}, g);
  Tensor loss = nn::cross_entropy(reshape(lm.forward(tokens, segments_of({{3, 5}, {2, 2, 4}})), {-1, 9}),
                                  reshape(randint(0, 9, {2, 8}, g), {-1}));
  loss.backward();
  Tensor gp = lm.pos_emb->weight.grad();  // (max_len, D): rows 0..4 used (the longest segment has 5 tokens)
  for (int64_t row = 0; row < 10; ++row) {
    double norm = 0;
    for (int64_t d = 0; d < 16; ++d) norm += std::abs(gp.at({row, d}));
    CAPTURE(row);
    if (row < 5) CHECK(norm > 0);
    else CHECK(norm == 0);
  }
}

TEST_CASE("TransformerBlock and EncoderClassifier with segment ids") {
  nn::BlockConfig bc;
  bc.d_model = 8;
  bc.attention = "mha(heads=2)";
  nn::TransformerBlock block(bc);
  block.eval();
  Generator g(72);
  Tensor x = randn({2, 6, 8}, g);
  const Tensor ids = segments_of({{2, 4}, {1, 5}});
  CHECK(allclose(block.forward(x, {}, true, {}, {}, ids), block.forward(x, nn::segment_mask(ids), true)));
  // CLS pooling: the CLS token joins the first segment, so the tokens of later segments cannot change the logits
  nn::EncoderConfig ec;
  ec.block = bc;
  ec.vocab_size = 10, ec.max_len = 6, ec.num_classes = 3;
  nn::EncoderClassifier enc(ec);
  enc.eval();
  Tensor a = from_vector<int64_t>({1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}, {2, 6});
  Tensor b = from_vector<int64_t>({1, 2, 9, 9, 9, 9, 1, 8, 8, 8, 8, 8}, {2, 6});
  CHECK(allclose(enc.forward(a, {}, ids), enc.forward(b, {}, ids)));
  CHECK_FALSE(allclose(enc.forward(a), enc.forward(b)));
}

TEST_CASE("assemblies reject segment ids of the wrong shape or dtype, naming the tensor") {
  nn::CausalLM lm(lm_config("mha(heads=2)", 1, 9, 10));
  Tensor tokens = zeros({2, 5}, kInt64);
  auto err = [](auto&& f) { return error_of(f); };
  CHECK(err([&] { lm.forward(tokens, zeros({2, 5}, kFloat32)); }) ==
        "CausalLM: segment_ids must be int64 (B=2, N=5), got dtype float32");
  CHECK(err([&] { lm.forward(tokens, zeros({2, 4}, kInt64)); }) ==
        "CausalLM: segment_ids must be (B=2, N=5), got shape (2,4)");
  CHECK_THROWS_AS(lm.forward(tokens, zeros({2, 4}, kInt64)), ShapeError);
  nn::EncoderConfig ec;
  ec.block.d_model = 8;
  ec.block.attention = "mha(heads=2)";
  ec.vocab_size = 10, ec.max_len = 6;
  nn::EncoderClassifier enc(ec);
  CHECK_THROWS_AS(enc.forward(tokens, {}, zeros({2, 5}, kBool)), DTypeError);
  // a variant that cannot take them says so
  nn::CausalLM fnet(lm_config("linformer(heads=2, max_len=10)", 1, 9, 10));
  CHECK(err([&] { fnet.forward(tokens, zeros({2, 5}, kInt64)); }).find("linformer: segment_ids") == 0);
}
