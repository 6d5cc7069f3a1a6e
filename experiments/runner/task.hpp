/// @file
/// The tasks an experiment trains on, built from the task keys of the config (docs/experiments.md).
///
///   listops        ListOps expressions -> their value 0..9 (experiments/data/listops.hpp), short
///                  lengths for laptop scale: task.length = max tokens (default 128)
///   fashion_mnist  Fashion-MNIST images -> class; task.input = patches (49 x 16 floats) | pixels
///                  (784 tokens 0..255); val = the images after the first train_size of the train set
///   fortunes       character (or byte) LM on the `fortunes` corpus: token streams, no splits of
///                  examples; windows of task.length + 1 tokens are drawn by the experiment
///   copy, reverse, sort   per-position targets over task.vocab symbols, length task.length
///   recall         associative recall: task.num_pairs key/value pairs and a query -> the value
///   mqar           multi-query associative recall (experiments/data/mqar.hpp): task.num_pairs
///                  pairs, task.num_queries queries (where the schema has it; 0 or absent = one
///                  per pair), filler to task.length (default 64); per-position targets
///   induction      task.length / 2 random symbols of task.vocab repeated once; next-token
///                  targets on the repeat (default length 64)
///
/// Every generated task draws its data from task.seed (not the run's seed), so runs with
/// different model seeds see the same examples; splits use distinct streams of it.
/// @ingroup runner
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "experiments/data/loader.hpp"
#include "experiments/runner/config.hpp"

/// @addtogroup runner
/// @{
namespace attnlab::runner {

/// The data of one task, built from the task.* keys: splits for classification and sequence tasks, token streams for language modelling, display text of ids.
struct TaskData {
  std::string name;                  ///< "listops", ...
  bool language_model = false;       ///< fortunes: train_tokens / val_tokens instead of splits
  bool per_position = false;         ///< targets (n, seq_len) instead of (n)
  data::TensorDataset train;  ///< classification / sequence tasks: the training split
  data::TensorDataset val;    ///< the validation split
  data::TensorDataset test;   ///< the test split
  Tensor train_tokens;  ///< int64 (T), language modelling: the training stream
  Tensor val_tokens;    ///< int64 (T), the validation stream
  std::vector<int64_t> train_docs;  ///< language modelling: where each training document starts
  std::vector<int64_t> val_docs;    ///< where each validation document starts
  int64_t vocab_size = 0;   ///< inputs are token ids in [0, vocab_size) (0 for feature inputs)
  int64_t input_dim = 0;    ///< inputs are float features (n, seq_len, input_dim) (0 for tokens)
  int64_t num_classes = 0;  ///< classes; per-position and LM tasks: the output vocabulary
  int64_t seq_len = 0;      ///< input length (LM: the context length)
  int64_t pad_id = -1;      ///< the input padding id (listops: 0), -1 when inputs are not padded
  std::vector<std::string> tokens;   ///< input id -> display text ("[MAX", "a", "\\n", "px17")
  std::vector<std::string> classes;  ///< output id -> display text
  std::vector<unsigned char> token_bytes;  ///< fortunes: id -> the byte it stands for (empty for other tasks)
  bool token_unk = false;                  ///< fortunes: id 0 is `<unk>` (char level), not a byte

  /// Display text of an input id / output id; `"<id>"` for ids without one.
  std::string token(int64_t id) const;
  std::string label(int64_t id) const;  ///< the display text of output id `id`
  /// (B, N) int64 inputs with padding: bool (B, N), true = real token; undefined when unpadded.
  Tensor padding_mask(const Tensor& inputs) const;
};

/// A task's name and description, for `attnlab list`.
struct TaskInfo {
  std::string name;  ///< task.name
  std::string description;  ///< one line
};
/// The registered tasks, in a fixed order.
const std::vector<TaskInfo>& tasks();

/// Adds the task.* keys to an experiment's schema, with `name` as the default task.
Schema& add_task_keys(Schema& schema, const std::string& name);

/// Builds the data of config's task.name. ConfigError naming task.name (and the known tasks) for
/// an unknown task or a task that does not fit the other keys; FileError when a data set's files
/// are missing.
TaskData make_task(const Config& config);

}  // namespace attnlab::runner
/// @}
