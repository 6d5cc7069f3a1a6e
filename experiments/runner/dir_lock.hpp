/// @file
/// An exclusive lock on a run or sweep directory, so that two processes never run the same runs
/// (docs/sweeps.md, "Locks"). The lock is flock(2) on DIR/.lock, which holds the owner's pid;
/// the kernel drops it when the owner exits, however it exits, so a stale file never blocks.
/// @ingroup runner
#pragma once
#include <filesystem>
#include <string>

#include "tensor/error.hpp"

/// @addtogroup runner
/// @{
namespace attnlab::runner {

/// Another process holds the directory; the message names the directory and the holder's pid.
struct LockError : Error { using Error::Error; };

/// An exclusive lock on a directory held for the object's life (flock on a file in it), so one process at a time writes a run or sweep directory.
class DirLock {
 public:
  /// Locks `dir` (which must exist) through the file dir/`name`. If another process holds it:
  /// waits for it when `wait`, otherwise throws LockError at once.
  DirLock(const std::filesystem::path& dir, bool wait, const std::string& name = kFileName);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  static constexpr const char* kFileName = ".lock";  ///< the default lock file

 private:
  int fd_ = -1;
};

}  // namespace attnlab::runner
/// @}
