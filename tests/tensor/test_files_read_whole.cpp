// The rule for files read whole (docs/io.md, "Files read whole"; tensor/io.hpp read_text and the
// tensor readers): a regular file only, refused before it is read when it is a FIFO, a link to
// /dev/zero or a directory (so nothing blocks or reads forever), and no larger than its bound,
// checked with stat before reading (a sparse 8 GiB file is refused at once). Each error names the
// file and what it is, or its size and the bound.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "helpers.hpp"
#include "tensor/io.hpp"

using namespace attnlab;
using namespace attnlab::testing;
namespace fs = std::filesystem;

namespace {

fs::path scratch() {
  const fs::path d = fs::temp_directory_path() / fmt::format("attnlab_test_read_whole_{}", long(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("files read whole: a FIFO, a link to /dev/zero and a directory are refused at once, naming the file") {
  const fs::path d = scratch();
  const fs::path fifo = d / "summary.json", zero = d / "config.toml", dir = d / "metrics.jsonl";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);  // no writer: opening it for reading would wait forever
  fs::create_symlink("/dev/zero", zero);
  fs::create_directories(dir);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e_fifo = error_of([&] { read_text(fifo.string()); });
  const std::string e_zero = error_of([&] { read_text(zero.string(), 1 << 20); });
  const std::string e_dir = error_of([&] { read_text(dir.string()); });
  const std::string e_tensor = error_of([&] { load_safetensors(fifo.string()); });
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  CHECK_MESSAGE(has(e_fifo, fifo.string() + ": is a FIFO (named pipe); only a regular file is read"), e_fifo);
  CHECK_MESSAGE(has(e_zero, zero.string() + ": is a character device"), e_zero);
  CHECK_MESSAGE(has(e_dir, dir.string() + ": is a directory"), e_dir);
  CHECK_MESSAGE(has(e_tensor, fifo.string() + ": is a FIFO"), e_tensor);
  CHECK_THROWS_AS(read_text(fifo.string()), FileError);
  fs::remove_all(d);
}

TEST_CASE("files read whole: the size bound is checked before reading, naming the size and the bound") {
  const fs::path d = scratch();
  const fs::path sparse = d / "config.toml";
  { std::ofstream(sparse) << "seed = 0\n"; }
  fs::resize_file(sparse, uintmax_t(8) << 30);  // 8 GiB of holes: reading it would take tens of seconds
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = error_of([&] { read_text(sparse.string(), int64_t(4) << 20); });
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  CHECK_MESSAGE(has(e, sparse.string() + ": is 8589934592 bytes, more than the 4 MiB bound"), e);

  const fs::path small = d / "small.txt";
  { std::ofstream(small) << "0123456789"; }
  CHECK(read_text(small.string(), 10) == "0123456789");  // the bound itself is allowed
  CHECK(has(error_of([&] { read_text(small.string(), 9); }), "is 10 bytes, more than the 9 bytes bound"));
  const fs::path link = d / "link.txt";
  fs::create_symlink(small, link);  // a link to a regular file is followed
  CHECK(read_text(link.string()) == "0123456789");
  fs::remove_all(d);
}
