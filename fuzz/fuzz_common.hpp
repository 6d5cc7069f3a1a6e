// What every fuzz target shares (docs/fuzzing.md): the rule that decides what counts as a
// finding, and a per-process temporary file for readers that take a path.
//
// A target runs one parser on the fuzzer's bytes inside `guarded`. The library's typed errors
// (attnlab::Error and its subclasses) are the expected answer to bad input and pass silently.
// Any other exception (std::out_of_range from a std::stoi, nlohmann::json::type_error, a
// std::bad_alloc from an unchecked size, ...) is an unnamed error, and a finding: it is printed
// with its type and message and the process aborts, so that libFuzzer saves the input as a crash
// file and the replay test (fuzz/replay_main.cpp) fails on it. Crashes, sanitizer reports and
// hangs surface on their own.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <typeinfo>

#include "tensor/error.hpp"
#include "tensor/tensor.hpp"

namespace attnlab::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `body`; returns 0 for success or a typed attnlab::Error, aborts on anything else.
template <class F>
int guarded(const char* target, F&& body) {
  try {
    body();
  } catch (const Error& e) {
    // The library's answer to bad input; ATTNLAB_FUZZ_VERBOSE=1 prints it (to see why a seed is
    // rejected).
    static const bool verbose = std::getenv("ATTNLAB_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "%s: %s\n", target, e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: unnamed error %s: %s\n", target, typeid(e).name(), e.what());
    std::abort();
  }
  return 0;
}

// `bytes` written to a file named `name` in this process's own temporary directory (one per
// process, so parallel fuzzers and tests do not share it); returns the path.
inline std::string write_temp(const std::string& name, std::string_view bytes) {
  // Removed when the process exits normally.
  struct TempDir {
    std::filesystem::path path;
    TempDir() : path(std::filesystem::temp_directory_path() / ("attnlab_fuzz_" + std::to_string(::getpid()))) {
      std::filesystem::create_directories(path);
    }
    ~TempDir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const TempDir dir;
  const std::string path = (dir.path / name).string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  return path;
}

// Same dtype, shape and bytes (NaN payloads included): what a reader must give back after a
// write. The readers return contiguous tensors, so both must be.
inline bool same_tensor(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape() || !a.is_contiguous() || !b.is_contiguous()) return false;
  const size_t n = size_t(a.numel()) * size_t(itemsize(a.dtype()));
  return n == 0 || std::memcmp(a.raw_data(), b.raw_data(), n) == 0;
}

// Runs `body`, which must not throw: a typed error there is a broken identity too (a file the
// library wrote from what it read, and cannot read back, say).
template <class F>
void must_succeed(const char* target, const char* what, F&& body) {
  try {
    body();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s failed: %s\n", target, what, e.what());
    std::abort();
  }
}

// Aborts with `what` when an identity the library promises does not hold (a silent wrong result).
inline void require(bool ok, const char* target, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "%s: broken identity: %s\n", target, what.c_str());
  std::abort();
}

}  // namespace attnlab::fuzz
