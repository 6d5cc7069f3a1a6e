// fuzz_replay NAME CORPUS_DIR [REGRESSIONS_DIR]: runs every file of the directories through fuzz
// target NAME's entry point (fuzz/fuzz_NAME.cpp, built with the normal compiler, without
// libFuzzer), so CI replays the seed corpus and every input that once crashed. The corpus
// directory must hold at least one file; the regressions directory may be absent. A finding
// aborts (fuzz/fuzz_common.hpp) after printing the file name, which fails the test.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#define ATTNLAB_FUZZ_TARGETS(X) X(safetensors) X(npy) X(idx) X(config) X(sweep) X(spec) X(json) X(viz_request) X(run_key) X(run_dir)

#define ATTNLAB_DECLARE(name) extern "C" int fuzz_##name##_input(const uint8_t* data, size_t size);
ATTNLAB_FUZZ_TARGETS(ATTNLAB_DECLARE)
#undef ATTNLAB_DECLARE

namespace fs = std::filesystem;

namespace {

using Entry = int (*)(const uint8_t*, size_t);

Entry find_target(const std::string& name) {
#define ATTNLAB_MATCH(target) \
  if (name == #target) return fuzz_##target##_input;
  ATTNLAB_FUZZ_TARGETS(ATTNLAB_MATCH)
#undef ATTNLAB_MATCH
  return nullptr;
}

// The regular files of `dir` whose names do not start with '.', sorted.
std::vector<fs::path> inputs(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fuzz_replay NAME CORPUS_DIR [REGRESSIONS_DIR]\n");
    return 2;
  }
  const Entry entry = find_target(argv[1]);
  if (!entry) {
    std::fprintf(stderr, "fuzz_replay: unknown target '%s'\n", argv[1]);
    return 2;
  }
  if (inputs(argv[2]).empty()) {
    std::fprintf(stderr, "fuzz_replay: no seed inputs in %s\n", argv[2]);
    return 1;
  }
  int count = 0;
  for (int a = 2; a < argc; ++a) {
    for (const fs::path& file : inputs(argv[a])) {
      std::ifstream in(file, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::fprintf(stderr, "%s\n", file.c_str());  // names the input if it aborts
      entry(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++count;
    }
  }
  std::printf("fuzz_replay %s: %d inputs, no findings\n", argv[1], count);
  return 0;
}
