// A scratch directory for the sweep tests.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

namespace attnlab::testing {

// A fresh directory under the system temp dir, attnlab_NAME_PID, removed at scope exit.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("attnlab_" + name + "_" + std::to_string(getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

}  // namespace attnlab::testing
