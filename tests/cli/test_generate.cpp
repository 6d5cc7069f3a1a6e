// `attnlab generate` on a checkpoint written by nn::save_causal_lm, and the checkpoint itself.
#include <filesystem>
#include <limits>
#include <sstream>

#include "experiments/cli/commands.hpp"
#include "helpers.hpp"
#include "nn/lm_checkpoint.hpp"

using namespace attnlab;
using testing::error_of;

namespace {

struct Run {
  int status;
  std::string out, err;
};

Run generate(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  int status = cli::run_generate(args, out, err);
  return {status, out.str(), err.str()};
}

// A one-layer LM of width 16 over 4 token ids.
nn::LMConfig tiny_lm(const std::string& attention, int64_t max_len) {
  nn::LMConfig c;
  c.block.d_model = 16;
  c.block.attention = attention;
  c.layers = 1;
  c.vocab_size = 4;
  c.max_len = max_len;
  return c;
}

// A small untrained LM over the vocabulary "\nabc" (ids 0..3), saved with its tokenizer.
std::string checkpoint(const std::string& dir) {
  nn::LMConfig c = tiny_lm("mha(heads=2)", 32);
  manual_seed(1);
  nn::CausalLM lm(c);
  const std::string path = dir + "/lm.safetensors";
  nn::save_causal_lm(path, lm, {{"tokenizer.bytes", "0a616263"}, {"tokenizer.unk", "false"}});
  return path;
}

std::string temp_dir() {
  auto d = std::filesystem::temp_directory_path() / "attnlab_test_generate";
  std::filesystem::create_directories(d);
  return d.string();
}

}  // namespace

TEST_CASE("save_causal_lm and load_causal_lm round-trip the model") {
  const std::string path = checkpoint(temp_dir());
  nn::LoadedLM lm = nn::load_causal_lm(path);
  CHECK(lm.model->config.block.attention.rfind("mha(heads=2", 0) == 0);
  CHECK(lm.model->config.max_len == 32);
  CHECK(lm.metadata.at("tokenizer.bytes") == "0a616263");
  manual_seed(1);
  nn::LMConfig c = lm.model->config;
  nn::CausalLM again(c);  // the same seed gives the same weights as the saved model
  Tensor tokens = from_vector(std::vector<int64_t>{0, 1, 2, 3}, {1, 4});
  CHECK(testing::allclose(lm.model->forward(tokens), again.forward(tokens)));
  CHECK_THROWS_AS(nn::save_causal_lm(temp_dir() + "/x.safetensors", again, {{"lm.layers", "3"}}), ValueError);
}

TEST_CASE("LM checkpoints record positions; a file without lm.positions loads as learned") {
  const std::string dir = temp_dir();
  nn::LMConfig c = tiny_lm("local(heads=2, window=4, sink_tokens=1)", 8);
  c.positions = "none";
  manual_seed(2);
  nn::CausalLM lm(c);
  nn::save_causal_lm(dir + "/positions_none.safetensors", lm);
  nn::LoadedLM loaded = nn::load_causal_lm(dir + "/positions_none.safetensors");
  CHECK(loaded.model->config.positions == "none");
  CHECK(loaded.metadata.at("lm.positions") == "none");
  CHECK(!loaded.model->pos_emb);
  Tensor tokens = from_vector(std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1}, {1, 10});  // longer than max_len
  CHECK(testing::allclose(loaded.model->forward(tokens), lm.forward(tokens), 0, 0));

  // A checkpoint without the key: learned positions, its pos_emb loaded
  Metadata meta;
  TensorMap weights = load_safetensors(checkpoint(dir), &meta);
  REQUIRE(meta.erase("lm.positions") == 1);
  save_safetensors(dir + "/old.safetensors", weights, meta);
  nn::LoadedLM old = nn::load_causal_lm(dir + "/old.safetensors");
  CHECK(old.model->config.positions == "learned");
  CHECK(testing::allclose(old.model->pos_emb->weight, weights.at("pos_emb.weight"), 0, 0));

  meta["lm.positions"] = "rotary";
  save_safetensors(dir + "/bad.safetensors", weights, meta);
  const std::string err = error_of([&] { nn::load_causal_lm(dir + "/bad.safetensors"); });
  CHECK(err.find("bad.safetensors: metadata lm.positions must be learned or none, got 'rotary'") != std::string::npos);
  // a none file whose weights hold a pos_emb is refused by the strict load
  meta["lm.positions"] = "none";
  save_safetensors(dir + "/mixed.safetensors", weights, meta);
  CHECK(error_of([&] { nn::load_causal_lm(dir + "/mixed.safetensors"); }).find("pos_emb") != std::string::npos);
}

TEST_CASE("attnlab generate: text out, seeded, cached equals uncached") {
  const std::string path = checkpoint(temp_dir());
  Run a = generate({"--checkpoint", path, "--prompt", "ab", "--tokens", "20", "--seed", "3"});
  REQUIRE(a.status == 0);
  CHECK(a.out.size() == 2 + 20 + 1);  // prompt, new tokens, newline
  CHECK(a.out.rfind("ab", 0) == 0);
  CHECK(a.out.find_first_not_of("\nabc") == std::string::npos);
  CHECK(a.err.find("tokens/s") != std::string::npos);
  Run b = generate({"--checkpoint", path, "--prompt", "ab", "--tokens", "20", "--seed", "3", "--no-cache"});
  CHECK(b.out == a.out);
  Run c = generate({"--checkpoint", path, "--prompt", "ab", "--tokens", "20", "--seed", "4"});
  CHECK(c.out != a.out);
  Run ids = generate({"--checkpoint", path, "--prompt-ids", "1,2", "--tokens", "3", "--temperature", "0"});
  REQUIRE(ids.status == 0);
  CHECK(ids.out.rfind("ab", 0) == 0);  // with a tokenizer the output is still text
}

TEST_CASE("attnlab generate: errors name what is wrong") {
  const std::string dir = temp_dir(), path = checkpoint(dir);
  Run missing = generate({"--checkpoint", dir + "/none.safetensors"});
  CHECK(missing.status == 1);
  CHECK(missing.err.find("none.safetensors") != std::string::npos);
  Run bad_byte = generate({"--checkpoint", path, "--prompt", "xyz"});
  CHECK(bad_byte.status == 1);
  CHECK(bad_byte.err.find("0x78") != std::string::npos);
  Run too_long = generate({"--checkpoint", path, "--prompt", "ab", "--tokens", "31"});
  CHECK(too_long.status == 2);
  CHECK(too_long.err.find("--tokens: must be in [0, 30] (the context of 32 tokens minus the prompt's 2), got 31") !=
        std::string::npos);
  Run temp = generate({"--checkpoint", path, "--temperature", "hot"});
  CHECK(temp.status == 2);
  CHECK(generate({"--checkpoint", path, "--bogus"}).status == 2);
  CHECK(generate({"--help"}).status == 0);
  // a safetensors file that is not a checkpoint
  save_safetensors(dir + "/plain.safetensors", {{"w", zeros({2})}});
  Run plain = generate({"--checkpoint", dir + "/plain.safetensors"});
  CHECK(plain.status == 1);
  CHECK(plain.err.find("not a CausalLM checkpoint") != std::string::npos);
  // a tokenizer that is not hex: named, not "stoi"
  {
    manual_seed(1);
    nn::CausalLM lm(tiny_lm("mha(heads=2)", 32));
    nn::save_causal_lm(dir + "/badhex.safetensors", lm, {{"tokenizer.bytes", "0a61zz63"}, {"tokenizer.unk", "false"}});
  }
  Run bad_hex = generate({"--checkpoint", dir + "/badhex.safetensors"});
  CHECK(bad_hex.status == 1);
  CHECK(bad_hex.err.find("tokenizer.bytes must be hex pairs, got 'zz' at offset 4") != std::string::npos);
}

TEST_CASE("attnlab generate: a non-finite weight or norm_eps in the checkpoint is an error naming it") {
  const std::string dir = temp_dir();
  Metadata meta;
  TensorMap weights = load_safetensors(checkpoint(dir), &meta);
  TensorMap bad = weights;
  Tensor w = full(weights.at("lm_head.weight").shape(), 0.5);
  w.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  w.data<float>()[7] = std::numeric_limits<float>::infinity();
  bad["lm_head.weight"] = w;
  save_safetensors(dir + "/nan.safetensors", bad, meta);
  CHECK_THROWS_WITH_AS(nn::load_causal_lm(dir + "/nan.safetensors"),
                       doctest::Contains("nan.safetensors: tensor 'lm_head.weight' holds 2 non-finite value(s) (the "
                                         "first, nan, at flat index 5)"),
                       FileError);
  Run nan = generate({"--checkpoint", dir + "/nan.safetensors"});
  CHECK(nan.status == 1);
  CHECK(nan.err.find("'lm_head.weight'") != std::string::npos);

  for (const char* eps : {"1e-5x", "nan", "inf", ""}) {
    CAPTURE(eps);
    Metadata m = meta;
    m["lm.norm_eps"] = eps;
    save_safetensors(dir + "/eps.safetensors", weights, m);
    const std::string want = fmt::format("metadata lm.norm_eps must be a finite number, got '{}'", eps);
    CHECK_THROWS_WITH_AS(nn::load_causal_lm(dir + "/eps.safetensors"), doctest::Contains(want.c_str()), FileError);
  }
  Metadata m = meta;
  m["lm.layers"] = "99999999999999999999";
  save_safetensors(dir + "/layers.safetensors", weights, m);
  CHECK_THROWS_WITH_AS(nn::load_causal_lm(dir + "/layers.safetensors"),
                       doctest::Contains("metadata lm.layers must be an integer, got '99999999999999999999'"), FileError);
}

TEST_CASE("attnlab generate: the default cut to the context says so, <unk> bytes are named, cached means a cache") {
  const std::string dir = temp_dir(), path = checkpoint(dir);
  // No --tokens: the default 200 does not fit after the prompt in a context of 32; 30 tokens, and a note.
  Run cut = generate({"--checkpoint", path, "--prompt", "ab"});
  REQUIRE(cut.status == 0);
  CHECK(cut.out.size() == 2 + 30 + 1);
  CHECK(cut.err.find("note: sampling 30 tokens, the room the context of 32 leaves after the prompt's 2 (the default "
                     "is 200)") != std::string::npos);
  CHECK(cut.err.find(", cached)") != std::string::npos);  // mha keeps keys and values
  Run given = generate({"--checkpoint", path, "--prompt", "ab", "--tokens", "5"});
  CHECK(given.err.find("note:") == std::string::npos);
  CHECK(generate({"--checkpoint", path, "--prompt", "ab", "--tokens", "5", "--no-cache"}).err.find(", uncached)") !=
        std::string::npos);

  // A vocabulary with <unk> (id 0): a prompt byte outside it reads as <unk>, and the note names it.
  {
    manual_seed(1);
    nn::CausalLM lm(tiny_lm("mha(heads=2)", 32));
    nn::save_causal_lm(dir + "/unk.safetensors", lm, {{"tokenizer.bytes", "00616263"}, {"tokenizer.unk", "true"}});
  }
  Run unk = generate({"--checkpoint", dir + "/unk.safetensors", "--prompt", "axbx", "--tokens", "3"});
  REQUIRE(unk.status == 0);
  CHECK(unk.out.rfind("a?b?", 0) == 0);  // <unk> prints as '?'
  CHECK(unk.err.find("note: the prompt's bytes 0x78 are not in the vocabulary; they read as <unk> (id 0)") !=
        std::string::npos);

  // A variant without a decoding cache of its own recomputes its causal forward at each step: not "cached".
  {
    manual_seed(1);
    nn::CausalLM lm(tiny_lm("longformer(heads=2)", 32));
    nn::save_causal_lm(dir + "/nocache.safetensors", lm, {{"tokenizer.bytes", "0a616263"}, {"tokenizer.unk", "false"}});
  }
  Run recomputed = generate({"--checkpoint", dir + "/nocache.safetensors", "--prompt", "ab", "--tokens", "4"});
  REQUIRE_MESSAGE(recomputed.status == 0, recomputed.err);
  CHECK(recomputed.err.find("recomputed per token: longformer has no decoding cache") != std::string::npos);
  CHECK(recomputed.err.find(", cached)") == std::string::npos);
}
