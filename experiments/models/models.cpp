// Model builders of the catalog (models.hpp).
#include "experiments/models/models.hpp"

#include <charconv>
#include <fstream>
#include <sstream>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "autograd/grad_mode.hpp"
#include "experiments/runner/experiment.hpp"
#include "nn/attention/registry.hpp"
#include "nn/loss.hpp"
#include "experiments/runner/file_bounds.hpp"
#include "tensor/io.hpp"

namespace attnlab::models {

using runner::Config;
using runner::ConfigError;
using runner::TaskData;

runner::Schema& add_model_keys(runner::Schema& s, const ModelDefaults& d) {
  return s.add("model.attention", d.attention, "attention spec (docs/attention.md)")
      .add("model.d_model", d.d_model, "model width")
      .add("model.layers", d.layers, "transformer blocks")
      .add("model.ffn_hidden", d.ffn_hidden, "feed-forward hidden size, 0 = 4 d_model")
      .add("model.dropout", d.dropout, "dropout on the residual branches")
      .add("model.pooling", d.pooling, "classifiers: cls | mean")
      .add("model.heads", d.heads, "> 0 overrides the attention spec's heads option (0 = as in the spec)")
      .add("model.key_size", d.key_size, "> 0 overrides the attention spec's key_size option (0 = as in the spec)")
      .bound("model.d_model", 1, 1 << 16)
      .bound("model.layers", 1, 1 << 12)
      .bound("model.ffn_hidden", 0, 1 << 20)
      .bound("model.heads", 0, 1 << 12)
      .bound("model.key_size", 0, 1 << 16);
}

// Numeric keys for two spec options, so that a sweep can put the head count or the key size on
// a report's x axis (a spec string is not a number). The override replaces the option where the
// spec writes it, or appends it.
std::string attention_spec(const Config& c) {
  const std::string& text = c.get_string("model.attention");
  nn::Spec spec = nn::parse_spec(text);
  bool changed = false;
  for (const char* option : {"heads", "key_size"}) {
    const std::string key = std::string("model.") + option;
    const int64_t value = c.get_int(key);
    if (value < 0) fail<ConfigError>("{} must be >= 0 (0 = as in the spec), got {} (from {})", key, value, c.origin(key));
    if (value == 0) continue;
    const nn::Variant* variant = nullptr;
    for (const auto& v : nn::variants())
      if (v.schema.name == spec.name) variant = &v;
    if (!variant) continue;  // make_attention names the unknown variant
    bool has = false;
    for (const auto& o : variant->schema.options) has = has || o.name == option;
    if (!has)
      fail<ConfigError>("{} = {} (from {}): attention '{}' has no option '{}'", key, value, c.origin(key), spec.name,
                        option);
    bool replaced = false;
    for (auto& [name, v] : spec.options)
      if (name == option) v = std::to_string(value), replaced = true;
    if (!replaced) spec.options.emplace_back(option, std::to_string(value));
    changed = true;
  }
  return changed ? nn::to_string(spec) : text;
}

nn::BlockConfig block_config(const Config& c) {
  nn::BlockConfig b;
  b.d_model = c.get_int("model.d_model");
  b.attention = attention_spec(c);
  b.ffn_hidden = c.get_int("model.ffn_hidden");
  b.dropout = c.get_float("model.dropout");
  if (b.d_model < 1 || c.get_int("model.layers") < 1 || b.ffn_hidden < 0 || b.dropout < 0 || b.dropout >= 1)
    fail<ConfigError>("model: need d_model >= 1, layers >= 1, ffn_hidden >= 0, dropout in [0, 1); got {}, {}, {}, {}",
                      b.d_model, c.get_int("model.layers"), b.ffn_hidden, b.dropout);
  return b;
}

namespace {

std::string pooling(const Config& c) {
  const std::string p = c.get_string("model.pooling");
  if (p != "cls" && p != "mean")
    fail<ConfigError>("model.pooling must be cls or mean, got '{}' (from {})", p, c.origin("model.pooling"));
  return p;
}

// model.positions where the schema has it, else learned.
std::string positions(const Config& c) {
  if (!c.schema().find("model.positions")) return "learned";
  const std::string p = c.get_string("model.positions");
  if (p != "learned" && p != "none")
    fail<ConfigError>("model.positions must be learned or none, got '{}' (from {})", p, c.origin("model.positions"));
  return p;
}

}  // namespace

void check_model(const Config& c) {
  pooling(c);
  positions(c);
  const std::string& text = c.get_string("model.attention");
  try {
    const nn::BlockConfig b = block_config(c);  // ConfigError for a key out of range
    const std::string effective =
        b.attention == text ? "" : fmt::format(" (as \"{}\" with model.heads / model.key_size)", b.attention);
    try {
      nn::TransformerBlock probe(b);
    } catch (const Error& e) {
      fail<ConfigError>("model.attention = \"{}\" (from {}){} with model.d_model = {} does not build: {}", text,
                        c.origin("model.attention"), effective, b.d_model, e.what());
    }
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {  // the spec does not parse
    fail<ConfigError>("model.attention = \"{}\" (from {}) does not parse: {}", text, c.origin("model.attention"),
                      e.what());
  }
}

std::shared_ptr<nn::EncoderClassifier> build_classifier(const Config& c, const TaskData& t) {
  if (t.language_model || t.per_position)
    fail<ConfigError>("model: task '{}' has {} targets; an encoder classifier needs one label per example "
                      "(listops, fashion_mnist, recall)",
                      t.name, t.language_model ? "next-token" : "per-position");
  nn::EncoderConfig e;
  e.block = block_config(c);
  e.layers = c.get_int("model.layers");
  e.vocab_size = t.input_dim > 0 ? 0 : t.vocab_size;
  e.input_dim = t.input_dim;
  e.max_len = t.seq_len;
  e.num_classes = t.num_classes;
  e.pooling = pooling(c);
  return std::make_shared<nn::EncoderClassifier>(e);
}

std::shared_ptr<nn::EncoderClassifier> copy_classifier(const nn::EncoderClassifier& model) {
  auto out = std::make_shared<nn::EncoderClassifier>(model.config);
  out->load_state_dict(model.state_dict());
  out->eval();
  return out;
}

namespace {

// The CausalLM of a config and task, unbuilt.
nn::LMConfig lm_config(const Config& c, const TaskData& t) {
  if (!t.language_model) fail<ConfigError>("model: task '{}' is not a language-modelling task (fortunes)", t.name);
  nn::LMConfig l;
  l.block = block_config(c);
  l.layers = c.get_int("model.layers");
  l.vocab_size = t.vocab_size;
  l.max_len = t.seq_len;
  l.positions = positions(c);
  return l;
}

}  // namespace

std::shared_ptr<nn::CausalLM> build_lm(const Config& c, const TaskData& t) {
  return std::make_shared<nn::CausalLM>(lm_config(c, t));
}

std::shared_ptr<nn::Module> build_model(const Config& c, const TaskData& t) {
  if (t.language_model) return build_lm(c, t);
  return build_classifier(c, t);
}

Scores evaluate_classifier(nn::EncoderClassifier& model, const TaskData& task, const data::TensorDataset& split,
                           int64_t batch) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const int64_t n = split.size();
  int64_t correct = 0;
  double loss_sum = 0;
  for (int64_t i = 0; i < n; i += batch) {
    runner::stop_point();  // a stop signal is honoured between batches (RunStopped)
    const int64_t b = std::min(batch, n - i);
    Tensor x = narrow(split.inputs, 0, i, b), y = narrow(split.targets, 0, i, b);
    Tensor logits = model.forward(x, task.padding_mask(x));              // (b, C)
    loss_sum += nn::cross_entropy(logits, y).item() * double(b);
    correct += sum(eq(argmax(logits, -1), y)).item<int64_t>();          // (b) -> count
  }
  model.train(was_training);
  return {n ? double(correct) / double(n) : 0, n ? loss_sum / double(n) : 0};
}

namespace {

// A run directory's config: the experiment named in meta.json, config.toml resolved against its schema.
Config run_config(const std::filesystem::path& dir, std::string* experiment = nullptr) {
  if (!std::filesystem::exists(dir / "meta.json"))
    fail<FileError>("{}: cannot read (not a run directory?)", (dir / "meta.json").string());
  auto meta = nlohmann::json::parse(read_text((dir / "meta.json").string(), runner::kRecordFileBound), nullptr, false);
  if (meta.is_discarded() || !meta.contains("experiment") || !meta["experiment"].is_string())
    fail<FileError>("{}: no \"experiment\" string", (dir / "meta.json").string());
  const auto& e = runner::find_experiment(meta["experiment"].get<std::string>());
  if (experiment) *experiment = e.name;
  Config config(e.schema);
  config.merge_file((dir / "config.toml").string());
  return config;
}

// The model's entries of a runner checkpoint (saved under "model."), the prefix removed.
template <class T>
std::map<std::string, T> model_entries(const std::map<std::string, T>& state) {
  std::map<std::string, T> out;
  for (const auto& [k, v] : state)
    if (k.rfind("model.", 0) == 0) out[k.substr(6)] = v;
  return out;
}

using Shapes = std::map<std::string, Dims>;

// Where a run's model sizes come from, for the messages of nn::check_causal_lm_header.
nn::LMConfigOrigin run_origin() {
  return {.source = "the run's config.toml",
          .d_model = "model.d_model",
          .layers = "model.layers",
          .vocab_size = "vocabulary",
          .max_len = "task.length",
          .ffn_hidden = "model.ffn_hidden",
          .prefix = "model."};
}

// Every name and shape `mine` lists equal to the checkpoint's, or a FileError listing the first differences.
void check_same_shapes(const Shapes& mine, const Shapes& w, const std::string& file) {
  std::vector<std::string> problems;
  for (const auto& [name, shape] : mine) {
    auto it = w.find(name);
    if (it == w.end())
      problems.push_back(fmt::format("'model.{}' missing", name));
    else if (it->second != shape)
      problems.push_back(fmt::format("'model.{}' is {}, the config builds {}", name, to_string(it->second), to_string(shape)));
  }
  for (const auto& [name, shape] : w)
    if (!mine.count(name)) problems.push_back(fmt::format("'model.{}' is not in the model the config builds", name));
  if (problems.empty()) return;
  if (problems.size() > 4) problems.resize(4), problems.push_back("...");
  fail<FileError>("{}: the checkpoint does not fit the model of the run's config.toml: {}", file,
                  fmt::format("{}", fmt::join(problems, "; ")));
}

// A classifier's checkpoint header against its config, before anything of the model's size is
// built: the blocks against model.layers, block 0's ffn.fc1 against model.d_model and
// model.ffn_hidden, pos_emb against the task's length, then every name and shape against the
// classifier of one block the config builds (no larger than the file's own tensors once those
// sizes agree), with blocks 1 .. layers-1 named and shaped like block 0.
void check_classifier_header(const Config& config, const TaskData& task, const Shapes& shapes, const std::string& file) {
  const int64_t layers = config.get_int("model.layers");
  nn::check_block_count(shapes, layers, file, run_origin());
  const nn::BlockConfig b = block_config(config);
  const int64_t hidden = b.ffn_hidden > 0 ? b.ffn_hidden : 4 * b.d_model;
  auto expect = [&](const std::string& name, const Dims& want, const std::string& gives) {
    auto it = shapes.find("model." + name);
    if (it != shapes.end() && it->second != want)
      fail<FileError>("{}: tensor 'model.{}' is {}, but the run's config.toml gives {} (expected {})", file, name,
                      to_string(it->second), gives, to_string(want));
  };
  expect("blocks.0.ffn.fc1.weight", {hidden, b.d_model},
         fmt::format("model.d_model = {}, model.ffn_hidden = {}", b.d_model, b.ffn_hidden));
  const int64_t positions = task.seq_len + (pooling(config) == "cls");
  expect("pos_emb.weight", {positions, b.d_model},
         fmt::format("model.d_model = {} and the task's length {}", b.d_model, task.seq_len));
  Config one = config;
  one.set_value("model.layers", int64_t(1), "check_classifier_header");
  Shapes mine;
  for (const auto& [name, t] : build_classifier(one, task)->state_dict()) {
    if (!name.starts_with("blocks.0.")) {
      mine[name] = t.shape();
      continue;
    }
    for (int64_t i = 0; i < layers; ++i) mine[fmt::format("blocks.{}.{}", i, name.substr(9))] = t.shape();
  }
  check_same_shapes(mine, model_entries(shapes), file);
}

// The run's checkpoint header against its config, before the model is built: a CausalLM's every
// tensor (nn::check_causal_lm_header), a classifier's (check_classifier_header).
void check_checkpoint_header(const Config& config, const TaskData& task, const Shapes& shapes, const std::string& file) {
  if (task.language_model)
    nn::check_causal_lm_header(shapes, lm_config(config, task), file, run_origin());
  else
    check_classifier_header(config, task, shapes, file);
}

}  // namespace

LoadedRun load_run(const std::filesystem::path& dir) {
  std::string experiment;
  Config config = run_config(dir, &experiment);
  TaskData task = runner::make_task(config);
  const std::string file = (dir / "checkpoint.safetensors").string();
  Metadata md;
  const Shapes shapes = safetensors_shapes(file, &md);  // the header only
  check_checkpoint_header(config, task, shapes, file);
  manual_seed(uint64_t(config.get_int("seed")));
  auto model = build_model(config, task);
  const TensorMap all = load_safetensors(file);
  const int64_t step = runner::checkpoint_step(file, md, all);  // an edited step is refused as resume refuses it
  const TensorMap weights = model_entries(all);
  nn::check_finite_weights(weights, file, "model.");  // as generate does: the tensor named, not a heatmap's NaN
  model->load_state_dict(weights);
  model->eval();
  return {std::move(experiment), std::move(config), std::move(task), model, step};
}

nn::LoadedLM load_lm_run(const std::filesystem::path& path) {
  const bool is_dir = std::filesystem::is_directory(path);
  const std::filesystem::path dir = is_dir ? path : path.parent_path();
  const std::string file = (is_dir ? path / "checkpoint.safetensors" : path).string();
  Config config = run_config(dir);
  TaskData task = runner::make_task(config);
  if (!task.language_model)
    fail<FileError>("{}: a run of task '{}', which is not language modelling: generate samples from the runs of "
                    "an LM experiment (attnlab run lm)",
                    dir.string(), task.name);
  if (!std::filesystem::exists(file))
    fail<FileError>("{}: no checkpoint (the run saved none yet)", file);
  Metadata md;
  check_checkpoint_header(config, task, safetensors_shapes(file, &md), file);  // the header only
  manual_seed(uint64_t(config.get_int("seed")));
  std::shared_ptr<nn::CausalLM> model = build_lm(config, task);
  const TensorMap weights = model_entries(load_safetensors(file));
  nn::check_finite_weights(weights, file, "model.");
  model->load_state_dict(weights);
  model->eval();
  std::string hex;
  for (unsigned char b : task.token_bytes) hex += fmt::format("{:02x}", b);
  Metadata out{{"tokenizer.bytes", hex}, {"tokenizer.unk", task.token_unk ? "true" : "false"}};
  if (md.count("step")) out["step"] = md["step"];
  return {model, out};
}

}  // namespace attnlab::models
