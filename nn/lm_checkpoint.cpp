#include "nn/lm_checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "autograd/ops.hpp"
#include "tensor/allocator.hpp"
#include "tensor/option_string.hpp"
#include "tensor/random.hpp"

namespace attnlab::nn {

void save_causal_lm(const std::string& path, const CausalLM& model, const Metadata& extra) {
  const LMConfig& c = model.config;
  Metadata m = {
      {"format", "attnlab.causal_lm"},
      {"lm.d_model", std::to_string(c.block.d_model)},
      {"lm.attention", c.block.attention},
      {"lm.ffn_hidden", std::to_string(c.block.ffn_hidden)},
      {"lm.activation", c.block.activation},
      {"lm.norm_first", c.block.norm_first ? "true" : "false"},
      {"lm.norm_eps", fmt::format("{}", c.block.norm_eps)},
      {"lm.layers", std::to_string(c.layers)},
      {"lm.vocab_size", std::to_string(c.vocab_size)},
      {"lm.max_len", std::to_string(c.max_len)},
      {"lm.tie_weights", c.tie_weights ? "true" : "false"},
      {"lm.positions", c.positions},
  };
  // The pinned spec of the first block's attention: the same layer whatever the defaults become.
  if (model.blocks->size())
    m["lm.attention"] = static_cast<const TransformerBlock&>(*(*model.blocks)[0]).attn->spec();
  for (const auto& [k, v] : extra) {
    if (k.rfind("lm.", 0) == 0 || k == "format")
      fail<ValueError>("save_causal_lm: metadata key {} is reserved", k);
    m[k] = v;
  }
  save_safetensors(path, model.state_dict(), m);
}

namespace {

const std::string& need(const Metadata& m, const std::string& path, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end()) fail<FileError>("{}: not a CausalLM checkpoint: metadata key {} is missing", path, key);
  return it->second;
}

int64_t need_int(const Metadata& m, const std::string& path, const std::string& key) {
  const std::string& s = need(m, path, key);
  const std::optional<int64_t> v = parse_integer(s);
  if (!v) fail<FileError>("{}: metadata {} must be an integer, got '{}'", path, key, s);
  return *v;
}

double need_finite(const Metadata& m, const std::string& path, const std::string& key) {
  const std::string& s = need(m, path, key);
  const std::optional<double> v = parse_number(s);
  if (!v || !std::isfinite(*v)) fail<FileError>("{}: metadata {} must be a finite number, got '{}'", path, key, s);
  return *v;
}

bool need_bool(const Metadata& m, const std::string& path, const std::string& key) {
  const std::string& s = need(m, path, key);
  if (s != "true" && s != "false") fail<FileError>("{}: metadata {} must be true or false, got '{}'", path, key, s);
  return s == "true";
}

}  // namespace

void check_finite_weights(const TensorMap& weights, const std::string& path, const std::string& prefix) {
  for (const auto& [name, t] : weights) {
    if (!t.is_floating_point()) continue;
    const std::vector<double> v = to(contiguous(t), kFloat64).to_vector<double>();
    const auto bad = [](double x) { return !std::isfinite(x); };
    const auto first = std::find_if(v.begin(), v.end(), bad);
    if (first == v.end()) continue;
    fail<FileError>("{}: tensor '{}{}' holds {} non-finite value(s) (the first, {}, at flat index {}); the model "
                    "would compute NaN logits",
                    path, prefix, name, std::count_if(first, v.end(), bad), *first, first - v.begin());
  }
}

void check_block_count(const std::map<std::string, Dims>& shapes, int64_t layers, const std::string& path,
                       const LMConfigOrigin& o) {
  std::set<int64_t> indices;
  const std::string blocks = o.prefix + "blocks.";
  for (const auto& [name, shape] : shapes) {
    if (name.rfind(blocks, 0) != 0) continue;
    const size_t dot = name.find('.', blocks.size());
    const std::optional<int64_t> i =
        dot == std::string::npos ? std::nullopt : parse_integer(name.substr(blocks.size(), dot - blocks.size()));
    if (!i || *i < 0) fail<FileError>("{}: tensor '{}' is not {}<index>.<name>", path, name, blocks);
    indices.insert(*i);
  }
  const int64_t n = int64_t(indices.size());
  if (n != layers) fail<FileError>("{}: holds {} blocks, but {} gives {} = {}", path, n, o.source, o.layers, layers);
  if (n && *indices.rbegin() != n - 1)
    fail<FileError>("{}: holds blocks {}, not 0 .. {}", path, fmt::join(indices, ", "), n - 1);
}

void check_causal_lm_header(const std::map<std::string, Dims>& shapes, const LMConfig& c, const std::string& path,
                            const LMConfigOrigin& o) {
  const int64_t V = c.vocab_size, D = c.block.d_model, L = c.layers;
  const std::string& pre = o.prefix;
  auto positive = [&](const std::string& key, int64_t v, int64_t least) {
    if (v < least) fail<FileError>("{}: {} gives {} = {}; it must be >= {}", path, o.source, key, v, least);
  };
  positive(o.d_model, D, 1);
  positive(o.vocab_size, V, 1);
  positive(o.layers, L, 0);
  positive(o.max_len, c.max_len, 1);
  positive(o.ffn_hidden, c.block.ffn_hidden, 0);
  auto expect = [&](const std::string& name, const Dims& shape, const std::string& from) {
    auto it = shapes.find(pre + name);
    if (it == shapes.end()) fail<FileError>("{}: no tensor '{}{}' ({} gives {})", path, pre, name, o.source, from);
    if (it->second != shape)
      fail<FileError>("{}: '{}{}' has shape {}, but {} gives {} ({})", path, pre, name, to_string(it->second), o.source,
                      to_string(shape), from);
  };
  expect("tok_emb.weight", {V, D}, fmt::format("{} {} x {} {}", o.vocab_size, V, o.d_model, D));
  if (c.positions == "learned") {
    expect("pos_emb.weight", {c.max_len, D}, fmt::format("{} {} rows", o.max_len, c.max_len));
  } else {
    // No tensor holds max_len: it sizes the decoding caches, at least 2 D floats per position and block.
    const double need = 2.0 * double(D) * 4.0 * double(c.max_len) * double(std::max<int64_t>(L, 1));
    if (need > double(physical_memory_bytes()))
      fail<FileError>("{}: {} gives {} = {} with positions none: the decoding caches of {} block(s) would need at least "
                      "{:.1f} GiB, above this machine's {:.1f} GiB",
                      path, o.source, o.max_len, c.max_len, L, need / double(1 << 30),
                      double(physical_memory_bytes()) / double(1 << 30));
  }
  check_block_count(shapes, L, path, o);
  if (L > 0) {
    const int64_t hidden = c.block.ffn_hidden > 0 ? c.block.ffn_hidden : 4 * D;
    expect("blocks.0.ffn.fc1.weight", {hidden, D},
           c.block.ffn_hidden > 0 ? fmt::format("{} {} x {} {}", o.ffn_hidden, hidden, o.d_model, D)
                                  : fmt::format("{} 0, i.e. 4 x {} {}", o.ffn_hidden, o.d_model, D));
  }
  // Every name and shape, against a model of (at most) one block: its sizes now agree with the
  // file's, so it is no larger than the file's first block and the tensors around the blocks.
  LMConfig one = c;
  one.layers = std::min<int64_t>(L, 1);
  Generator& gen = default_generator();  // the prototype's init draws leave the caller's stream as it was
  const uint64_t seed = gen.seed(), offset = gen.offset();
  const TensorMap prototype = CausalLM(one).state_dict();
  gen.set_state(seed, offset);
  std::map<std::string, Dims> want;
  for (const auto& [name, t] : prototype)
    if (name.rfind("blocks.0.", 0) != 0)
      want[pre + name] = t.shape();
    else
      for (int64_t i = 0; i < L; ++i) want[fmt::format("{}blocks.{}.{}", pre, i, name.substr(9))] = t.shape();
  std::vector<std::string> problems;
  for (const auto& [name, shape] : want) {
    auto it = shapes.find(name);
    if (it == shapes.end())
      problems.push_back(fmt::format("'{}' missing", name));
    else if (it->second != shape)
      problems.push_back(fmt::format("'{}' is {}, the model needs {}", name, to_string(it->second), to_string(shape)));
  }
  int64_t own = 0;
  for (const auto& [name, shape] : shapes) {
    if (name.rfind(pre, 0) != 0) continue;
    ++own;
    if (!want.count(name)) problems.push_back(fmt::format("'{}' is not in the model", name));
  }
  if (problems.empty()) return;
  if (problems.size() > 4) problems.resize(4), problems.push_back("...");
  fail<FileError>("{}: holds {} model tensors, the model {} gives has {}: {}", path, own, o.source, want.size(),
                  fmt::format("{}", fmt::join(problems, "; ")));
}

LoadedLM load_causal_lm(const std::string& path) {
  Metadata m;
  const std::map<std::string, Dims> shapes = safetensors_shapes(path, &m);  // the header only
  if (need(m, path, "format") != "attnlab.causal_lm")
    fail<FileError>("{}: not a CausalLM checkpoint (format '{}')", path, m["format"]);
  LMConfig c;
  c.block.d_model = need_int(m, path, "lm.d_model");
  c.block.attention = need(m, path, "lm.attention");
  c.block.ffn_hidden = need_int(m, path, "lm.ffn_hidden");
  c.block.activation = need(m, path, "lm.activation");
  c.block.norm_first = need_bool(m, path, "lm.norm_first");
  c.block.norm_eps = need_finite(m, path, "lm.norm_eps");
  c.layers = need_int(m, path, "lm.layers");
  c.vocab_size = need_int(m, path, "lm.vocab_size");
  c.max_len = need_int(m, path, "lm.max_len");
  c.tie_weights = need_bool(m, path, "lm.tie_weights");
  // lm.positions is optional: a file without it has learned positions (pos_emb).
  if (auto it = m.find("lm.positions"); it != m.end()) {
    if (it->second != "learned" && it->second != "none")
      fail<FileError>("{}: metadata lm.positions must be learned or none, got '{}'", path, it->second);
    c.positions = it->second;
  }
  check_causal_lm_header(shapes, c, path);
  TensorMap weights = load_safetensors(path);
  check_finite_weights(weights, path);
  auto model = std::make_shared<CausalLM>(c);
  if (!weights.empty()) model->to(weights.begin()->second.dtype());
  try {
    model->load_state_dict(weights);
  } catch (const Error& e) {
    fail<FileError>("{}: {}", path, e.what());
  }
  return {model, m};
}

}  // namespace attnlab::nn
