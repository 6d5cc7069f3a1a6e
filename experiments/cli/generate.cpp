// `attnlab generate`: samples text from a CausalLM checkpoint (nn/lm_checkpoint.hpp) or from a
// run of the runner's `lm` experiment (its directory or checkpoint.safetensors:
// models::load_lm_run), with the decoding cache unless --no-cache. A checkpoint written by
// experiments/char_lm carries its tokenizer in the metadata ("tokenizer.bytes": the vocabulary's
// bytes in hex, id order; "tokenizer.unk": whether id 0 is <unk>), and load_lm_run supplies the
// same from the run's task, so the prompt and the output are text; without a tokenizer,
// --prompt-ids and the output are token ids.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "experiments/models/models.hpp"
#include "experiments/cli/commands.hpp"
#include "nn/generation.hpp"
#include "nn/lm_checkpoint.hpp"

namespace attnlab::cli {

namespace {

struct Tokenizer {
  std::vector<unsigned char> bytes;  // id -> byte
  bool unk = false;                  // id 0 is <unk>
  // A prompt byte outside the vocabulary is an error, unless the vocabulary has <unk>: then it
  // reads as <unk>, as the same byte did in training (the corpus's rare bytes), and `unknown`
  // collects it for the note on stderr.
  Tensor encode(const std::string& text, std::vector<unsigned char>& unknown) const {
    std::vector<int64_t> ids;
    for (unsigned char ch : text) {
      int64_t id = -1;
      for (size_t i = unk ? 1 : 0; i < bytes.size(); ++i)
        if (bytes[i] == ch) id = static_cast<int64_t>(i);
      if (id < 0) {
        if (!unk)
          fail<ValueError>("the prompt has byte 0x{:02x}, which is not in the checkpoint's vocabulary (and the "
                           "vocabulary has no <unk>)", ch);
        id = 0;
        if (std::find(unknown.begin(), unknown.end(), ch) == unknown.end()) unknown.push_back(ch);
      }
      ids.push_back(id);
    }
    return from_vector(ids, {1, static_cast<int64_t>(ids.size())});
  }
  std::string decode(const std::vector<int64_t>& ids) const {
    std::string s;
    for (int64_t id : ids) s += (unk && id == 0) ? '?' : static_cast<char>(bytes.at(static_cast<size_t>(id)));
    return s;
  }
};

constexpr int64_t kDefaultTokens = 200;  // --tokens when not given (cut to the room left)

// How the tokens were decoded, for the tokens/s line: "cached" when every attention layer keeps a
// decoding cache of its own (keys and values, a window or a recurrent state), "recomputed per
// token (VARIANT has no decoding cache)" when a layer recomputes its causal forward at each
// step, "uncached" with --no-cache.
std::string decoding_mode(const nn::CausalLM& model, bool use_cache) {
  if (!use_cache) return "uncached";
  nn::LMCache cache = model.make_cache(1);
  for (size_t i = 0; i < cache.layers.size(); ++i)
    if (nn::recomputes_per_step(*cache.layers[i]))
      return fmt::format("recomputed per token: {} has no decoding cache", cache.layers[i]->owner
                                                                              ? cache.layers[i]->owner->variant_name()
                                                                              : std::string("a layer"));
  return "cached";
}

std::optional<Tokenizer> read_tokenizer(const Metadata& m, const std::string& path, int64_t vocab) {
  auto it = m.find("tokenizer.bytes");
  if (it == m.end()) return std::nullopt;
  Tokenizer t;
  const std::string& hex = it->second;
  if (hex.size() % 2) fail<FileError>("{}: tokenizer.bytes must be hex pairs", path);
  for (size_t i = 0; i < hex.size(); i += 2) {
    unsigned value = 0;
    auto [end, ec] = std::from_chars(hex.data() + i, hex.data() + i + 2, value, 16);
    if (ec != std::errc() || end != hex.data() + i + 2)
      fail<FileError>("{}: tokenizer.bytes must be hex pairs, got '{}' at offset {}", path, hex.substr(i, 2), i);
    t.bytes.push_back(static_cast<unsigned char>(value));
  }
  auto u = m.find("tokenizer.unk");
  t.unk = u != m.end() && u->second == "true";
  if (static_cast<int64_t>(t.bytes.size()) != vocab)
    fail<FileError>("{}: tokenizer.bytes has {} entries but the model's vocabulary is {}", path, t.bytes.size(), vocab);
  return t;
}

// A run directory of the runner, or a file inside one (next to its meta.json and config.toml),
// is a run; any other file a CausalLM checkpoint.
nn::LoadedLM load_model(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = fs::is_directory(p) ? p : p.parent_path();
  if (fs::exists(dir / "meta.json") && fs::exists(dir / "config.toml")) return models::load_lm_run(p);
  if (fs::is_directory(p))
    fail<FileError>("{}: a directory, but not a run directory (no meta.json and config.toml)", path);
  return nn::load_causal_lm(path);
}

struct GenerateArgs {
  std::string checkpoint, prompt = "\n";
  std::vector<int64_t> prompt_ids;
  int64_t tokens = 0;
  CLI::Option* tokens_option = nullptr;  // given: --tokens counts, else the default
  double temperature = 0.8;
  int64_t top_k = 0;
  uint64_t seed = 0;
  bool no_cache = false;
};

void declare_options(CLI::App& cmd, GenerateArgs& a) {
  cmd.add_option("--checkpoint", a.checkpoint, "a CausalLM checkpoint (nn/lm_checkpoint.hpp), or a run directory of `attnlab run lm` or its checkpoint.safetensors")->required();
  auto* prompt = cmd.add_option("--prompt", a.prompt, "text to continue (default: a newline); needs the checkpoint's tokenizer");
  cmd.add_option("--prompt-ids", a.prompt_ids, "comma-separated token ids instead, e.g. 1,2,3")
      ->delimiter(',')
      ->excludes(prompt);
  a.tokens_option = cmd.add_option("--tokens", a.tokens, "tokens to sample (default 200, at most max_len minus the prompt)");
  cmd.add_option("--temperature", a.temperature, "softmax temperature (default 0.8; 0 = greedy)");
  cmd.add_option("--top-k", a.top_k, "sample among the K most likely tokens (default 0 = all)");
  cmd.add_option("--seed", a.seed, "the sampling seed (default 0): same seed, same text")->check(int_range(0, INT64_MAX));
  cmd.add_flag("--no-cache", a.no_cache, "recompute the whole sequence for every token (slower; same tokens)");
}

int generate(const GenerateArgs& a, std::ostream& out, std::ostream& err) {
  const std::string& path = a.checkpoint;
  nn::LoadedLM lm = load_model(path);
  const int64_t max_len = lm.model->config.max_len, vocab = lm.model->config.vocab_size;
  std::optional<Tokenizer> tok = read_tokenizer(lm.metadata, path, vocab);
  Tensor prompt;
  if (!a.prompt_ids.empty()) {
    for (int64_t id : a.prompt_ids) check_range("--prompt-ids", id, 0, vocab - 1);
    prompt = from_vector(a.prompt_ids, {1, static_cast<int64_t>(a.prompt_ids.size())});
  } else {
    if (!tok) fail<UsageError>("{} has no tokenizer in its metadata: give the prompt as --prompt-ids", path);
    if (a.prompt.empty()) fail<UsageError>("--prompt must not be empty");
    std::vector<unsigned char> unknown;
    prompt = tok->encode(a.prompt, unknown);
    if (!unknown.empty()) {
      std::string list;
      for (unsigned char ch : unknown) list += fmt::format("{}0x{:02x}", list.empty() ? "" : ", ", ch);
      err << fmt::format("attnlab generate: note: the prompt's bytes {} are not in the vocabulary; they read as "
                         "<unk> (id 0)\n", list);
    }
  }
  const int64_t room = max_len - prompt.size(1);
  if (room <= 0) fail<UsageError>("the prompt has {} tokens; the model's max_len is {}", prompt.size(1), max_len);
  nn::GenerateOptions o;
  const bool given = a.tokens_option->count() > 0;
  if (given && (a.tokens < 0 || a.tokens > room))
    fail<UsageError>("--tokens: must be in [0, {}] (the context of {} tokens minus the prompt's {}), got {}", room,
                     max_len, prompt.size(1), a.tokens);
  o.max_new_tokens = given ? a.tokens : std::min<int64_t>(kDefaultTokens, room);
  if (!given && room < kDefaultTokens)
    err << fmt::format("attnlab generate: note: sampling {} tokens, the room the context of {} leaves after the "
                       "prompt's {} (the default is {})\n",
                       room, max_len, prompt.size(1), kDefaultTokens);
  if (!(a.temperature >= 0)) fail<UsageError>("--temperature: must be >= 0, got {}", a.temperature);
  o.temperature = a.temperature;
  check_range("--top-k", a.top_k, 0, vocab);
  o.top_k = a.top_k;
  o.seed = a.seed;
  o.use_cache = !a.no_cache;
  const auto t0 = std::chrono::steady_clock::now();
  Tensor tokens = nn::generate(*lm.model, prompt, o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<int64_t> ids = tokens.to_vector<int64_t>();
  if (tok) {
    out << tok->decode(ids) << "\n";
  } else {
    for (size_t i = 0; i < ids.size(); ++i) out << (i ? "," : "") << ids[i];
    out << "\n";
  }
  err << fmt::format("attnlab generate: {} tokens in {:.3f} s ({:.0f} tokens/s, {})\n", o.max_new_tokens, secs,
                     double(o.max_new_tokens) / std::max(secs, 1e-9), decoding_mode(*lm.model, o.use_cache));
  return 0;
}

CommandBody define_generate(CLI::App& cmd) {
  auto a = std::make_shared<GenerateArgs>();
  declare_options(cmd, *a);
  cmd.footer(
      "Samples tokens from a CausalLM checkpoint, e.g. one written by\n"
      "`build/experiments/char_lm 3500 0 3e-3 lm.safetensors`, or from a run of `attnlab run lm`\n"
      "(its run directory or its checkpoint.safetensors), with the decoding cache unless\n"
      "--no-cache. Prints the text (or ids without a tokenizer), then a line with tokens/s on stderr.");
  return [a](std::ostream& out, std::ostream& err) { return generate(*a, out, err); };
}

}  // namespace

const Command kGenerateCommand = {"generate", "sample text from a CausalLM checkpoint or an lm run", define_generate};

}  // namespace attnlab::cli
