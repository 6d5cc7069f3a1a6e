/// @file
/// Data-parallel training over MPI (docs/distributed.md): the process group, the all-reduce of
/// gradients and the broadcast of state from rank 0.
///
/// MPI is optional. A build where CMake found MPI compiles this module with ATTNLAB_WITH_MPI and
/// links MPI::MPI_CXX; init() then starts MPI when an MPI launcher started the process (mpirun,
/// mpiexec, srun: the environment says so). Without MPI in the build, or without a launcher, the
/// process is rank 0 of a world of size 1 and every collective below is a no-op (the broadcasts
/// keep rank 0's values, which are the process's own).
///
/// Every collective must be called by every rank, in the same order, with the same tensor shapes
/// (the Trainer does so: experiments/runner/trainer.hpp).
/// @ingroup dist
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/io.hpp"
#include "tensor/tensor.hpp"

/// @addtogroup dist
/// @{
namespace attnlab::dist {

/// Whether this build has MPI.
bool built_with_mpi();
/// Whether the environment shows an MPI launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK set).
bool launched_by_mpi();

/// Starts MPI when built with it and launched by a launcher (otherwise does nothing). Sets the
/// thread count to cores / ranks on this node when ATTNLAB_NUM_THREADS is unset, so K ranks on
/// one machine do not oversubscribe it. A second call does nothing.
void init();
/// Ends MPI if init started it. After it the process is rank 0 of 1 again.
void finalize();
/// init() and finalize() for a scope (the `attnlab run` command).
struct Session {
  Session() { init(); }
  ~Session() { finalize(); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

int rank();        ///< 0 ... world_size() - 1
int world_size();  ///< 1 without MPI
inline bool is_root() { return rank() == 0; }  ///< rank 0: the process that writes files

/// What the collectives moved since the last reset: payload bytes per rank, MPI calls, seconds
/// inside MPI (waiting for the slowest rank included).
struct CommStats {
  int64_t bytes = 0;  ///< payload bytes this rank sent
  int64_t calls = 0;  ///< MPI calls
  double seconds = 0;  ///< seconds inside MPI
};
CommStats comm_stats();  ///< the counters since the last reset
void reset_comm_stats();  ///< zeroes the counters

/// Gradient buckets: the float32 elements of consecutive tensors are packed into buffers of at
/// most this many bytes, one MPI_Allreduce each (docs/distributed.md, "Buckets").
inline constexpr int64_t kBucketBytes = int64_t(4) << 20;

/// Replaces each tensor by its element-wise sum over the ranks, in place. Every tensor is
/// contiguous float32 (ValueError naming the index otherwise). A large tensor spans buckets.
void all_reduce_sum(const std::vector<Tensor>& tensors, int64_t bucket_bytes = kBucketBytes);
/// The same for a few doubles (losses, flags): one MPI_Allreduce.
void all_reduce_sum(std::vector<double>& values);

/// Rank 0's value, on every rank.
int64_t broadcast(int64_t value);
void broadcast(std::string& bytes);  ///< rank 0's bytes, on every rank
/// Rank 0's tensors (names, dtypes, shapes and data) replace every other rank's map.
void broadcast(TensorMap& tensors);

/// Ends every rank of the job with `status` (MPI_Abort); std::exit(status) without MPI.
[[noreturn]] void abort(int status);

}  // namespace attnlab::dist
/// @}
