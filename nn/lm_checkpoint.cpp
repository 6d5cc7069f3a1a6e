#include "nn/lm_checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "autograd/ops.hpp"
#include "tensor/option_string.hpp"

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

LoadedLM load_causal_lm(const std::string& path) {
  Metadata m;
  TensorMap weights = load_safetensors(path, &m);
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
