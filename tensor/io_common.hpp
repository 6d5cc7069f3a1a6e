/// @file
/// What the .npy and safetensors readers/writers share (private to tensor/): reading a file at
/// offsets with every short read reported, writing through a temporary file that is renamed
/// into place (so a crash never leaves a half-written file), checked size arithmetic, and the
/// conversion of the element types files carry into attnlab's four dtypes.
/// @ingroup tensor
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

#include "tensor/tensor.hpp"

/// @addtogroup tensor
/// @{
namespace attnlab::io_detail {

/// Every failure is a FileError whose message starts with the path.
template <class... Args>
[[noreturn]] void file_fail(const std::string& path, fmt::format_string<Args...> f, Args&&... args) {
  throw FileError(path + ": " + fmt::format(f, std::forward<Args>(args)...));
}

/// Element types found in files. Each reads into one attnlab dtype: floats of 16 bits or fewer
/// widen to float32, integers to int64, and bool stays bool (any nonzero byte reads as true).
enum class FileType { F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, Bool };

struct FileTypeInfo {
  int64_t size;       ///< bytes per element
  DType target;       ///< the dtype it reads into
  const char* name;   ///< NumPy-style name for messages: "float16", "uint8", ...
};
FileTypeInfo file_type_info(FileType t);

/// numel and byte size of `shape` with overflow checks; `what` names the array in the error.
struct Extent {
  int64_t numel;
  int64_t bytes;
};
Extent checked_extent(const std::string& path, const std::vector<int64_t>& shape, int64_t itemsize,
                      const std::string& what);

/// Opens `path` for reading under the rule of docs/io.md ("Files read whole"): it must be a regular
/// file (a link is followed; a FIFO, device, socket or directory is refused without blocking: the
/// open is non-blocking and the type is read from the open descriptor) of at most `max_bytes`
/// bytes. Returns the descriptor (blocking again, close-on-exec) and sets `*size`.
int open_regular_file(const std::string& path, int64_t max_bytes, int64_t* size);

class InFile {
 public:
  explicit InFile(const std::string& path);
  ~InFile();
  InFile(const InFile&) = delete;
  InFile& operator=(const InFile&) = delete;
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  /// Reads exactly n bytes at `offset`; `what` names them in the truncation error.
  void read_at(int64_t offset, void* buf, int64_t n, const std::string& what);
  /// A contiguous tensor of `shape` from the elements at `offset`, converted to the target dtype.
  /// `byteswap` reads big-endian data. The caller has checked the bytes lie inside the file.
  Tensor read_tensor(int64_t offset, FileType type, bool byteswap, const Dims& shape, const std::string& what);

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  int64_t size_ = 0;
};

/// Writes to `path + ".tmp.<pid>"`; commit() flushes, syncs and renames it to `path`. Destroying
/// an uncommitted writer (an exception on the way) removes the temporary file.
class AtomicWriter {
 public:
  explicit AtomicWriter(const std::string& path);
  ~AtomicWriter();
  AtomicWriter(const AtomicWriter&) = delete;
  AtomicWriter& operator=(const AtomicWriter&) = delete;
  void write(const void* data, int64_t n);
  void commit();

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  bool committed_ = false;
};

/// IEEE half bit patterns to float (exact: every such value is a float). bfloat16's is
/// bfloat16_bits_to_float (tensor/bfloat16.hpp).
float half_to_float(uint16_t h);

}  // namespace attnlab::io_detail
/// @}
