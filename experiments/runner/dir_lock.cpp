#include "experiments/runner/dir_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace attnlab::runner {

namespace {

// The pid written by the current holder, or "unknown" if the file is empty or unreadable.
std::string holder_pid(int fd) {
  char buf[32] = {};
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  std::string s = n > 0 ? std::string(buf, size_t(n)) : std::string();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "unknown" : s;
}

}  // namespace

DirLock::DirLock(const std::filesystem::path& dir, bool wait, const std::string& name) {
  const std::string path = (dir / name).string();
  // O_CLOEXEC: the runs a sweep starts must not inherit (and so keep) the sweep's lock.
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail<FileError>("cannot open the lock file {}: {}", path, std::strerror(errno));
  int rc;
  while ((rc = flock(fd_, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {}
  if (rc != 0 && errno == EWOULDBLOCK) {
    if (!wait) {
      const std::string pid = holder_pid(fd_);
      close(fd_);
      fail<LockError>("{} is in use by process {} (lock file {}); wait for it to finish, or pass --wait",
                      dir.string(), pid, path);
    }
    while ((rc = flock(fd_, LOCK_EX)) != 0 && errno == EINTR) {}
  }
  if (rc != 0) {
    const int err = errno;
    close(fd_);
    fail<FileError>("cannot lock {}: {}", path, std::strerror(err));
  }
  const std::string pid = std::to_string(long(getpid())) + "\n";
  if (ftruncate(fd_, 0) != 0 || pwrite(fd_, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    const int err = errno;
    close(fd_);
    fail<FileError>("cannot write the lock file {}: {}", path, std::strerror(err));
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace attnlab::runner
