// The task registry (task.hpp): each task turns the config's task.* keys into TaskData through
// the data sets of experiments/data/.
#include "experiments/runner/task.hpp"

#include <functional>

#include "experiments/data/fashion_mnist.hpp"
#include "experiments/data/listops.hpp"
#include "experiments/data/mqar.hpp"
#include "experiments/data/tasks.hpp"
#include "experiments/data/text.hpp"
#include "autograd/ops.hpp"
#include "tensor/creation.hpp"

namespace attnlab::runner {
namespace {

using data::TensorDataset;

// Distinct Philox seeds for the three splits of one task.seed.
uint64_t split_seed(const Config& c, uint64_t split) {
  return uint64_t(c.get_int("task.seed")) * 0x9E3779B97F4A7C15ull + split * 0xD1B54A32D192ED03ull + 1;
}

int64_t positive(const Config& c, const std::string& key, int64_t lo = 1) {
  int64_t v = c.get_int(key);
  if (v < lo)
    fail<ConfigError>("task '{}': {} must be >= {}, got {} (from {})", c.get_string("task.name"), key, lo, v,
                      c.origin(key));
  return v;
}

// task.length, or the task's default when it is 0.
int64_t length_or(const Config& c, int64_t def) { return c.get_int("task.length") == 0 ? def : positive(c, "task.length"); }

std::vector<std::string> symbol_names(int64_t n, const std::string& prefix) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i)
    out.push_back(n <= 26 && prefix.empty() ? std::string(1, char('a' + i)) : prefix + std::to_string(i));
  return out;
}

std::vector<std::string> digits() { return {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}; }

TaskData listops(const Config& c) {
  data::ListOpsConfig lc;
  lc.max_length = length_or(c, 128);
  lc.min_length = positive(c, "task.min_length");
  lc.max_depth = positive(c, "task.max_depth");
  lc.max_args = positive(c, "task.max_args", 2);
  if (lc.min_length > lc.max_length)
    fail<ConfigError>("task 'listops': task.min_length {} exceeds the length {}", lc.min_length, lc.max_length);
  TaskData t;
  t.train = data::generate_listops(positive(c, "task.train_size"), lc, split_seed(c, 0));
  t.val = data::generate_listops(positive(c, "task.val_size"), lc, split_seed(c, 1));
  t.test = data::generate_listops(positive(c, "task.test_size"), lc, split_seed(c, 2));
  t.vocab_size = data::kListOpsVocab;
  t.num_classes = 10;
  t.seq_len = lc.max_length;
  t.pad_id = data::kListOpsPad;
  t.tokens = {"<pad>"};
  for (auto& d : digits()) t.tokens.push_back(d);
  for (const char* op : {"[MIN", "[MAX", "[MED", "[SM", "]"}) t.tokens.push_back(op);
  t.classes = digits();
  return t;
}

TaskData fashion_mnist(const Config& c) {
  const std::string input = c.get_string("task.input");
  if (input != "patches" && input != "pixels")
    fail<ConfigError>("task 'fashion_mnist': task.input must be patches or pixels, got '{}' (from {})", input,
                      c.origin("task.input"));
  const int64_t ntrain = positive(c, "task.train_size"), nval = positive(c, "task.val_size");
  if (ntrain + nval > 60000)
    fail<ConfigError>("task 'fashion_mnist': task.train_size + task.val_size = {} exceeds the 60000 training images",
                      ntrain + nval);
  auto train = data::load_fashion_mnist("train", data::kFashionMnistDir, ntrain + nval);
  auto test = data::load_fashion_mnist("test", data::kFashionMnistDir, std::min<int64_t>(positive(c, "task.test_size"), 10000));
  auto inputs = [&](const Tensor& images) {
    return input == "patches" ? data::as_patches(images, 4) : data::as_pixel_tokens(images);
  };
  Tensor x = inputs(train.images);  // (ntrain + nval, N, 16) or (ntrain + nval, 784)
  TaskData t;
  t.train = {narrow(x, 0, 0, ntrain), narrow(train.labels, 0, 0, ntrain)};
  t.val = {narrow(x, 0, ntrain, nval), narrow(train.labels, 0, ntrain, nval)};
  t.test = {inputs(test.images), test.labels};
  if (input == "patches") {
    t.input_dim = 16;
    t.seq_len = 49;
  } else {
    t.vocab_size = 256;
    t.seq_len = 784;
    for (int i = 0; i < 256; ++i) t.tokens.push_back(std::to_string(i));
  }
  t.num_classes = 10;
  t.classes = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
  return t;
}

TaskData fortunes(const Config& c) {
  const std::string level = c.get_string("task.level");
  if (level != "char" && level != "byte")
    fail<ConfigError>("task 'fortunes': task.level must be char or byte, got '{}' (from {})", level,
                      c.origin("task.level"));
  data::TextCorpus corpus = data::load_fortunes(level);
  TaskData t;
  t.language_model = true;
  t.train_tokens = corpus.train;
  t.val_tokens = corpus.val;
  t.train_docs = corpus.train_docs;
  t.val_docs = corpus.val_docs;
  t.vocab_size = t.num_classes = corpus.vocab_size();
  t.seq_len = length_or(c, 128);
  t.token_bytes = corpus.byte_of;
  t.token_unk = corpus.has_unk;
  for (int64_t id = 0; id < corpus.vocab_size(); ++id) {
    unsigned char b = corpus.byte_of[size_t(id)];
    if (corpus.has_unk && id == 0) t.tokens.push_back("<unk>");
    else if (b == '\n') t.tokens.push_back("\\n");
    else if (b == '\t') t.tokens.push_back("\\t");
    else if (b == ' ') t.tokens.push_back("\u2423");  // OPEN BOX: a visible space on axis labels
    else if (b < 32 || b >= 127) t.tokens.push_back(fmt::format("\\x{:02x}", b));
    else t.tokens.push_back(std::string(1, char(b)));
  }
  t.classes = t.tokens;
  return t;
}

TaskData sequence(const Config& c, TensorDataset (*make)(int64_t, int64_t, int64_t, uint64_t)) {
  const int64_t length = length_or(c, 16), vocab = positive(c, "task.vocab");
  TaskData t;
  t.train = make(positive(c, "task.train_size"), length, vocab, split_seed(c, 0));
  t.val = make(positive(c, "task.val_size"), length, vocab, split_seed(c, 1));
  t.test = make(positive(c, "task.test_size"), length, vocab, split_seed(c, 2));
  t.per_position = true;
  t.vocab_size = t.num_classes = vocab;
  t.seq_len = length;
  t.tokens = t.classes = symbol_names(vocab, vocab <= 26 ? "" : "s");
  return t;
}

TaskData recall(const Config& c) {
  const int64_t pairs = positive(c, "task.num_pairs"), keys = positive(c, "task.num_keys"),
                values = positive(c, "task.num_values");
  if (pairs > keys)
    fail<ConfigError>("task 'recall': task.num_pairs {} exceeds task.num_keys {} (keys are distinct)", pairs, keys);
  TaskData t;
  t.train = data::make_associative_recall(positive(c, "task.train_size"), pairs, keys, values, split_seed(c, 0));
  t.val = data::make_associative_recall(positive(c, "task.val_size"), pairs, keys, values, split_seed(c, 1));
  t.test = data::make_associative_recall(positive(c, "task.test_size"), pairs, keys, values, split_seed(c, 2));
  t.vocab_size = t.num_classes = data::associative_recall_vocab(keys, values);
  t.seq_len = 2 * pairs + 1;
  t.tokens = symbol_names(keys, "k");
  for (auto& v : symbol_names(values, "v")) t.tokens.push_back(v);
  t.classes = t.tokens;
  return t;
}

TaskData mqar(const Config& c) {
  data::MqarOptions o;
  o.length = length_or(c, 64);
  o.num_pairs = positive(c, "task.num_pairs");
  o.num_keys = positive(c, "task.num_keys");
  o.num_values = positive(c, "task.num_values");
  // task.num_queries is in the schemas of the experiments that train on mqar (recall); 0 = P.
  const bool has_queries = c.schema().find("task.num_queries") && c.get_int("task.num_queries") != 0;
  o.num_queries = has_queries ? positive(c, "task.num_queries") : o.num_pairs;
  if (c.schema().find("task.pair_tokens")) o.pair_tokens = c.get_int("task.pair_tokens");
  if (o.pair_tokens != 1 && o.pair_tokens != 2)
    fail<ConfigError>("task 'mqar': task.pair_tokens must be 1 or 2, got {} (from {})", o.pair_tokens,
                      c.origin("task.pair_tokens"));
  if (o.num_pairs > o.num_keys)
    fail<ConfigError>("task 'mqar': task.num_pairs {} exceeds task.num_keys {} (keys are distinct)", o.num_pairs,
                      o.num_keys);
  if (o.num_queries > o.num_pairs)
    fail<ConfigError>("task 'mqar': task.num_queries {} exceeds task.num_pairs {} (queries are distinct keys)",
                      o.num_queries, o.num_pairs);
  if (o.pair_tokens * o.num_pairs + o.num_queries > o.length)
    fail<ConfigError>("task 'mqar': task.length {} is shorter than task.pair_tokens * task.num_pairs + "
                      "task.num_queries = {}",
                      o.length, o.pair_tokens * o.num_pairs + o.num_queries);
  TaskData t;
  t.train = data::make_mqar(positive(c, "task.train_size"), o, split_seed(c, 0));
  t.val = data::make_mqar(positive(c, "task.val_size"), o, split_seed(c, 1));
  t.test = data::make_mqar(positive(c, "task.test_size"), o, split_seed(c, 2));
  t.per_position = true;
  t.vocab_size = data::mqar_vocab(o);
  t.num_classes = 1 + o.num_keys + o.num_values;  // targets are value ids; pair ids (pair_tokens = 1) never are
  t.seq_len = o.length;
  t.tokens = {"_"};
  for (auto& k : symbol_names(o.num_keys, "k")) t.tokens.push_back(k);
  for (auto& v : symbol_names(o.num_values, "v")) t.tokens.push_back(v);
  if (o.pair_tokens == 1)
    for (int64_t k = 1; k <= o.num_keys; ++k)
      for (int64_t v = 0; v < o.num_values; ++v) t.tokens.push_back(fmt::format("k{}v{}", k - 1, v));
  t.classes.assign(t.tokens.begin(), t.tokens.begin() + t.num_classes);
  return t;
}

TaskData induction(const Config& c) {
  const int64_t length = length_or(c, 64), vocab = positive(c, "task.vocab", 2);
  if (length < 4 || length % 2 != 0)
    fail<ConfigError>("task 'induction': task.length must be even and >= 4, got {} (from {})", length,
                      c.origin("task.length"));
  TaskData t;
  t.train = data::make_induction(positive(c, "task.train_size"), length, vocab, split_seed(c, 0));
  t.val = data::make_induction(positive(c, "task.val_size"), length, vocab, split_seed(c, 1));
  t.test = data::make_induction(positive(c, "task.test_size"), length, vocab, split_seed(c, 2));
  t.per_position = true;
  t.vocab_size = t.num_classes = vocab;
  t.seq_len = length;
  t.tokens = t.classes = symbol_names(vocab, vocab <= 26 ? "" : "s");
  return t;
}

struct TaskEntry {
  TaskInfo info;
  std::function<TaskData(const Config&)> make;
};

const std::vector<TaskEntry>& entries() {
  static const std::vector<TaskEntry> e = {
      {{"listops", "ListOps expressions -> value 0..9 (task.length max tokens, default 128)"}, listops},
      {{"fashion_mnist", "Fashion-MNIST -> 10 classes (task.input = patches | pixels)"}, fashion_mnist},
      {{"fortunes", "character LM on the fortunes corpus (task.length context, default 128)"}, fortunes},
      {{"copy", "copy task.length symbols (per-position targets)"},
       [](const Config& c) { return sequence(c, data::make_copy_task); }},
      {{"reverse", "reverse task.length symbols (per-position targets)"},
       [](const Config& c) { return sequence(c, data::make_reverse_task); }},
      {{"sort", "sort task.length symbols (per-position targets)"},
       [](const Config& c) { return sequence(c, data::make_sort_task); }},
      {{"recall", "associative recall: key/value pairs and a query -> its value"}, recall},
      {{"mqar", "multi-query associative recall: key/value pairs, then queries -> their values (per-position, "
                "task.length default 64)"},
       mqar},
      {{"induction", "induction copying: random tokens repeated once -> next tokens of the repeat (per-position, "
                     "causal, task.length default 64)"},
       induction},
  };
  return e;
}

}  // namespace

std::string TaskData::token(int64_t id) const {
  return id >= 0 && id < int64_t(tokens.size()) ? tokens[size_t(id)] : fmt::format("<{}>", id);
}
std::string TaskData::label(int64_t id) const {
  return id >= 0 && id < int64_t(classes.size()) ? classes[size_t(id)] : fmt::format("<{}>", id);
}

Tensor TaskData::padding_mask(const Tensor& inputs) const {
  if (pad_id < 0) return {};
  return ne(inputs, double(pad_id));  // (B, N) bool, true = real token
}

const std::vector<TaskInfo>& tasks() {
  static const std::vector<TaskInfo> out = [] {
    std::vector<TaskInfo> v;
    for (const auto& e : entries()) v.push_back(e.info);
    return v;
  }();
  return out;
}

Schema& add_task_keys(Schema& s, const std::string& name) {
  return s.add("task.name", name, "listops | fashion_mnist | fortunes | copy | reverse | sort | recall | mqar | induction")
      .add("task.seed", int64_t(0), "seed of generated data (independent of the run's seed)")
      .add("task.train_size", int64_t(2000), "training examples (fortunes: unused)")
      .add("task.val_size", int64_t(500), "validation examples (fortunes: unused)")
      .add("task.test_size", int64_t(500), "test examples (fortunes: unused)")
      .add("task.length", int64_t(0), "sequence length, 0 = the task's default (listops max tokens 128, "
                                      "copy/reverse/sort 16, fortunes context 128, mqar/induction 64)")
      .add("task.min_length", int64_t(16), "listops: minimum tokens")
      .add("task.max_depth", int64_t(6), "listops: tree levels counting the leaves")
      .add("task.max_args", int64_t(5), "listops: maximum arguments per operator")
      .add("task.vocab", int64_t(10), "copy/reverse/sort/induction: number of symbols")
      .add("task.num_pairs", int64_t(8), "recall, mqar: key/value pairs per example")
      .add("task.num_keys", int64_t(16), "recall, mqar: key symbols")
      .add("task.num_values", int64_t(16), "recall, mqar: value symbols")
      .add("task.input", "patches", "fashion_mnist: patches (49 x 4x4 floats) | pixels (784 tokens)")
      .add("task.level", "char", "fortunes: char | byte")
      // The loosest lower ends: each task refuses what it cannot use with its own message.
      .bound("task.train_size", 0, 100'000'000)
      .bound("task.val_size", 0, 100'000'000)
      .bound("task.test_size", 0, 100'000'000)
      .bound("task.length", 0, 1 << 20)
      .bound("task.min_length", 0, 1 << 20)
      .bound("task.max_depth", 0, 64)
      .bound("task.max_args", 0, 1 << 10)
      .bound("task.vocab", 0, 1 << 20)
      .bound("task.num_pairs", 0, 1 << 20)
      .bound("task.num_keys", 0, 1 << 20)
      .bound("task.num_values", 0, 1 << 20);
}

TaskData make_task(const Config& c) {
  const std::string& name = c.get_string("task.name");
  for (const auto& e : entries())
    if (e.info.name == name) {
      TaskData t = e.make(c);
      t.name = name;
      return t;
    }
  std::string known;
  for (const auto& e : entries()) known += (known.empty() ? "" : ", ") + e.info.name;
  fail<ConfigError>("task.name: unknown task '{}' (from {}; known: {})", name, c.origin("task.name"), known);
}

}  // namespace attnlab::runner
