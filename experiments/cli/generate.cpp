// `attnlab generate`: samples text from a CausalLM checkpoint (nn/lm_checkpoint.hpp), with the
// decoding cache unless --no-cache. A checkpoint written by experiments/char_lm carries its
// tokenizer in the metadata ("tokenizer.bytes": the vocabulary's bytes in hex, id order;
// "tokenizer.unk": whether id 0 is <unk>), so the prompt and the output are text; without a
// tokenizer, --prompt-ids and the output are token ids.
#include <charconv>
#include <chrono>
#include <fmt/format.h>

#include "experiments/cli/commands.hpp"
#include "nn/generation.hpp"
#include "nn/lm_checkpoint.hpp"

namespace attnlab::cli {

void generate_usage(std::ostream& out) {
  out << "usage: attnlab generate --checkpoint FILE [--prompt TEXT | --prompt-ids 1,2,3] [--tokens N]\n"
         "                        [--temperature T] [--top-k K] [--seed S] [--no-cache]\n"
         "\n"
         "Samples N tokens (default 200, at most max_len minus the prompt) from a CausalLM checkpoint,\n"
         "e.g. one written by `build/experiments/char_lm 3500 0 3e-3 lm.safetensors`.\n"
         "  --prompt TEXT      text to continue (default: a newline); needs the checkpoint's tokenizer\n"
         "  --prompt-ids LIST  comma-separated token ids instead\n"
         "  --temperature T    softmax temperature (default 0.8; 0 = greedy)\n"
         "  --top-k K          sample among the K most likely tokens (default 0 = all)\n"
         "  --seed S           the sampling seed (default 0): same seed, same text\n"
         "  --no-cache         recompute the whole sequence for every token (slower; same tokens)\n"
         "Prints the text (or ids), then a line with tokens/s on stderr.\n";
}

namespace {

struct Tokenizer {
  std::vector<unsigned char> bytes;  // id -> byte
  bool unk = false;                  // id 0 is <unk>
  Tensor encode(const std::string& text) const {
    std::vector<int64_t> ids;
    for (unsigned char ch : text) {
      int64_t id = -1;
      for (size_t i = unk ? 1 : 0; i < bytes.size(); ++i)
        if (bytes[i] == ch) id = static_cast<int64_t>(i);
      if (id < 0) {
        if (!unk) fail<ValueError>("the prompt has byte 0x{:02x}, which is not in the checkpoint's vocabulary", ch);
        id = 0;
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

int generate(const ArgList& a, std::ostream& out, std::ostream& err) {
  const std::string path = a.require("--checkpoint");
  nn::LoadedLM lm = nn::load_causal_lm(path);
  const int64_t max_len = lm.model->config.max_len, vocab = lm.model->config.vocab_size;
  std::optional<Tokenizer> tok = read_tokenizer(lm.metadata, path, vocab);
  Tensor prompt;
  if (auto ids = a.get("--prompt-ids")) {
    if (a.get("--prompt")) fail<UsageError>("give --prompt or --prompt-ids, not both");
    std::vector<int64_t> v;
    size_t start = 0;
    while (start <= ids->size()) {
      const size_t end = std::min(ids->find(',', start), ids->size());
      v.push_back(parse_int_option("--prompt-ids", ids->substr(start, end - start), 0, vocab - 1));
      start = end + 1;
    }
    prompt = from_vector(v, {1, static_cast<int64_t>(v.size())});
  } else {
    if (!tok) fail<UsageError>("{} has no tokenizer in its metadata: give the prompt as --prompt-ids", path);
    const std::string text = a.get("--prompt").value_or("\n");
    if (text.empty()) fail<UsageError>("--prompt must not be empty");
    prompt = tok->encode(text);
  }
  const int64_t room = max_len - prompt.size(1);
  if (room <= 0) fail<UsageError>("the prompt has {} tokens; the model's max_len is {}", prompt.size(1), max_len);
  nn::GenerateOptions o;
  o.max_new_tokens = a.get("--tokens") ? parse_int_option("--tokens", *a.get("--tokens"), 0, room) : std::min<int64_t>(200, room);
  if (auto t = a.get("--temperature")) {
    try {
      size_t used = 0;
      o.temperature = std::stod(*t, &used);
      if (used != t->size()) throw std::invalid_argument(*t);
    } catch (const std::logic_error&) {
      fail<UsageError>("--temperature must be a number, got '{}'", *t);
    }
    if (!(o.temperature >= 0)) fail<UsageError>("--temperature must be >= 0, got {}", *t);
  } else {
    o.temperature = 0.8;
  }
  if (auto k = a.get("--top-k")) o.top_k = parse_int_option("--top-k", *k, 0, vocab);
  if (auto s = a.get("--seed")) o.seed = static_cast<uint64_t>(parse_int_option("--seed", *s, 0, INT64_MAX));
  o.use_cache = !a.flag("--no-cache");
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
                     double(o.max_new_tokens) / std::max(secs, 1e-9), o.use_cache ? "cached" : "uncached");
  return 0;
}

}  // namespace

int run_generate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    ArgList a(args, {"--checkpoint", "--prompt", "--prompt-ids", "--tokens", "--temperature", "--top-k", "--seed"},
              {"--no-cache", "--help"});
    if (a.flag("--help")) {
      generate_usage(out);
      return 0;
    }
    if (!a.positional().empty()) fail<UsageError>("unexpected argument '{}'", a.positional()[0]);
    return generate(a, out, err);
  } catch (const UsageError& e) {
    err << "attnlab generate: " << e.what() << " (try attnlab generate --help)\n";
    return 2;
  } catch (const std::exception& e) {
    err << "attnlab generate: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace attnlab::cli
