/// @file
/// Mini-batches from in-memory tensors: TensorDataset (inputs and targets indexed by their first
/// dim) and DataLoader, which cuts an epoch into batches with index_select on dim 0.
///
/// Shuffling is reproducible and resumable. The permutation of epoch e is a Fisher-Yates
/// shuffle whose swaps draw from the Philox stream (seed, e) (experiments/data/philox_stream.hpp):
/// for i = n-1 down to 1, j is uniform in [0, i] and perm[i], perm[j] are swapped, starting from
/// the identity. It depends only on (seed, e), not on what was drawn before, so LoaderState
/// {epoch, position} is all a checkpoint needs to continue mid-epoch with exactly the batches an
/// uninterrupted run would have seen.
/// @ingroup data
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/tensor.hpp"

/// @addtogroup data
/// @{
namespace attnlab::data {

/// Example i is inputs[i] with targets[i]; both first dims must match (size() checks it).
struct TensorDataset {
  Tensor inputs;   ///< (n, ...)
  Tensor targets;  ///< (n, ...)
  /// The number of examples. ShapeError when a tensor is undefined or 0-d or the first dims differ.
  int64_t size() const;
};

/// One batch of inputs and targets.
struct Batch {
  Tensor inputs;   ///< (B, ...) with B = batch_size, or fewer in a last partial batch
  Tensor targets;  ///< (B, ...)
};

/// Where a loader stands: `position` batches of epoch `epoch` have been handed out. After the last
/// batch of an epoch the state is {epoch + 1, 0}.
struct LoaderState {
  int64_t epoch = 0;  ///< the current epoch
  int64_t position = 0;  ///< the next batch's index within the epoch
  bool operator==(const LoaderState&) const = default;  ///< same epoch and position
};

/// Batches of a dataset, shuffled per epoch from its own generator, with a position that checkpoints save and restore.
class DataLoader {
 public:
  /// batch_size >= 1. With drop_last, a last batch smaller than batch_size is skipped. Without
  /// shuffle every epoch visits the examples in order 0..n-1. The loader keeps handles to the
  /// dataset's tensors (no copy).
  DataLoader(const TensorDataset& dataset, int64_t batch_size, bool shuffle, uint64_t seed, bool drop_last = false);

  /// Batches per epoch.
  int64_t size() const { return num_batches_; }
  int64_t num_examples() const { return n_; }  ///< examples in the dataset
  int64_t batch_size() const { return batch_size_; }  ///< examples per batch

  /// The next batch, moving on to the next epoch after the last one (an endless stream for
  /// step-based training). ValueError when an epoch has no batches.
  Batch next();

  LoaderState state() const { return state_; }  ///< the position, for checkpoints
  /// Resumes at `s`; position == size() is taken as {epoch + 1, 0}. ValueError outside
  /// epoch >= 0, 0 <= position <= size().
  void set_state(const LoaderState& s);

  /// The order in which epoch `epoch` visits the examples (int64 indices, each exactly once).
  std::vector<int64_t> permutation(int64_t epoch) const;

  /// Range-for runs over the rest of the current epoch: the batches from state().position to the
  /// end. The state advances as each batch is produced, so inside the loop body state() already
  /// points past the batch being processed: a checkpoint saved there resumes with the next one.
  class iterator {
   public:
    const Batch& operator*() const { return batch_; }  ///< the current batch
    const Batch* operator->() const { return &batch_; }  ///< the current batch
    iterator& operator++();  ///< produces the next batch (advancing the loader's state)
    bool operator==(const iterator& o) const { return done_ == o.done_; }  ///< both at the end or both not

   private:
    friend class DataLoader;
    iterator(DataLoader* loader, bool done);
    DataLoader* loader_;
    int64_t epoch_ = 0;
    bool done_;
    Batch batch_;
  };
  iterator begin() { return iterator(this, false); }  ///< the rest of the current epoch (see iterator)
  iterator end() { return iterator(this, true); }  ///< the end of the epoch

 private:
  const std::vector<int64_t>& order();  ///< the current epoch's permutation, cached

  TensorDataset dataset_;
  int64_t n_, batch_size_, num_batches_;
  bool shuffle_, drop_last_;
  uint64_t seed_;
  LoaderState state_;
  std::vector<int64_t> order_;
  int64_t order_epoch_ = -1;
};

}  // namespace attnlab::data
/// @}
