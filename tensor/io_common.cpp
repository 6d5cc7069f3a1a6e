// File plumbing shared by io_npy.cpp and io_safetensors.cpp: checked reads, atomic writes
// (temporary file + fsync + rename, the usual POSIX recipe), and element type conversion.
#include "tensor/io_common.hpp"
#include "tensor/io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace attnlab::io_detail {

static_assert(std::endian::native == std::endian::little,
              "attnlab's file formats are little-endian and are read by plain copies");

FileTypeInfo file_type_info(FileType t) {
  switch (t) {
    case FileType::F16: return {2, kFloat32, "float16"};
    case FileType::BF16: return {2, kBFloat16, "bfloat16"};
    case FileType::F32: return {4, kFloat32, "float32"};
    case FileType::F64: return {8, kFloat64, "float64"};
    case FileType::I8: return {1, kInt64, "int8"};
    case FileType::I16: return {2, kInt64, "int16"};
    case FileType::I32: return {4, kInt64, "int32"};
    case FileType::I64: return {8, kInt64, "int64"};
    case FileType::U8: return {1, kInt64, "uint8"};
    case FileType::U16: return {2, kInt64, "uint16"};
    case FileType::U32: return {4, kInt64, "uint32"};
    case FileType::Bool: return {1, kBool, "bool"};
  }
  return {1, kBool, "?"};
}

Extent checked_extent(const std::string& path, const std::vector<int64_t>& shape, int64_t itemsize,
                      const std::string& what) {
  if (shape.size() > static_cast<size_t>(Dims::kMax))
    file_fail(path, "{} has {} dimensions; attnlab supports at most {}", what, shape.size(), Dims::kMax);
  int64_t numel = 1;
  for (int64_t s : shape) {
    if (s < 0) file_fail(path, "{} has a negative size {} in its shape", what, s);
    if (__builtin_mul_overflow(numel, s, &numel)) file_fail(path, "{} has a shape whose size overflows", what);
  }
  int64_t bytes;
  if (__builtin_mul_overflow(numel, itemsize, &bytes)) file_fail(path, "{} has a shape whose size overflows", what);
  return {numel, bytes};
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, nan
  return std::bit_cast<float>(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

namespace {

template <class S>
S load_elem(const unsigned char* p, bool byteswap) {
  S v;
  if (byteswap) {
    unsigned char tmp[sizeof(S)];
    for (size_t k = 0; k < sizeof(S); ++k) tmp[k] = p[sizeof(S) - 1 - k];
    std::memcpy(&v, tmp, sizeof(S));
  } else {
    std::memcpy(&v, p, sizeof(S));
  }
  return v;
}

// dst[i] = convert(src element i) for n elements of `type`.
void convert(const unsigned char* src, FileType type, bool byteswap, int64_t n, void* dst) {
  auto run = [&](auto source_tag, auto&& to_target) {
    using S = decltype(source_tag);
    for (int64_t i = 0; i < n; ++i) to_target(i, load_elem<S>(src + i * sizeof(S), byteswap));
  };
  auto* f32 = static_cast<float*>(dst);
  auto* f64 = static_cast<double*>(dst);
  auto* i64 = static_cast<int64_t*>(dst);
  auto* b = static_cast<bool*>(dst);
  auto* bf16 = static_cast<bfloat16*>(dst);
  switch (type) {
    case FileType::F16: return run(uint16_t{}, [&](int64_t i, uint16_t v) { f32[i] = half_to_float(v); });
    case FileType::BF16: return run(uint16_t{}, [&](int64_t i, uint16_t v) { bf16[i] = bfloat16::from_bits(v); });
    case FileType::F32: return run(float{}, [&](int64_t i, float v) { f32[i] = v; });
    case FileType::F64: return run(double{}, [&](int64_t i, double v) { f64[i] = v; });
    case FileType::I8: return run(int8_t{}, [&](int64_t i, int8_t v) { i64[i] = v; });
    case FileType::I16: return run(int16_t{}, [&](int64_t i, int16_t v) { i64[i] = v; });
    case FileType::I32: return run(int32_t{}, [&](int64_t i, int32_t v) { i64[i] = v; });
    case FileType::I64: return run(int64_t{}, [&](int64_t i, int64_t v) { i64[i] = v; });
    case FileType::U8: return run(uint8_t{}, [&](int64_t i, uint8_t v) { i64[i] = v; });
    case FileType::U16: return run(uint16_t{}, [&](int64_t i, uint16_t v) { i64[i] = v; });
    case FileType::U32: return run(uint32_t{}, [&](int64_t i, uint32_t v) { i64[i] = v; });
    // A bool byte other than 0/1 would be undefined behaviour once read as bool.
    case FileType::Bool: return run(uint8_t{}, [&](int64_t i, uint8_t v) { b[i] = v != 0; });
  }
}

}  // namespace

namespace {

const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

std::string byte_count(int64_t n) {
  if (n >= (int64_t(1) << 30) && n % (int64_t(1) << 30) == 0) return fmt::format("{} GiB", n >> 30);
  if (n >= (int64_t(1) << 20) && n % (int64_t(1) << 20) == 0) return fmt::format("{} MiB", n >> 20);
  return fmt::format("{} bytes", n);
}

}  // namespace

int open_regular_file(const std::string& path, int64_t max_bytes, int64_t* size) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) file_fail(path, "cannot open for reading: {}", std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    file_fail(path, "cannot stat: {}", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    file_fail(path, "is {}; only a regular file is read (a link to /dev/zero or a FIFO would be read forever)",
              file_kind(st.st_mode));
  }
  if (int64_t(st.st_size) > max_bytes) {
    ::close(fd);
    file_fail(path, "is {} bytes, more than the {} bound of this kind of file (docs/io.md, \"Files read whole\")",
              int64_t(st.st_size), byte_count(max_bytes));
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  *size = st.st_size;
  return fd;
}

InFile::InFile(const std::string& path) : path_(path) {
  // A tensor file's size is checked against every offset it declares, so no bound beyond the file's own.
  const int fd = open_regular_file(path, std::numeric_limits<int64_t>::max(), &size_);
  f_ = fdopen(fd, "rb");
  if (!f_) {
    const int err = errno;
    ::close(fd);
    file_fail(path, "cannot open for reading: {}", std::strerror(err));
  }
}

InFile::~InFile() {
  if (f_) std::fclose(f_);
}

void InFile::read_at(int64_t offset, void* buf, int64_t n, const std::string& what) {
  if (n == 0) return;
  if (offset < 0 || offset > size_ || n > size_ - offset)
    file_fail(path_, "truncated: {} needs bytes [{}, {}) but the file has {} bytes", what, offset, offset + n, size_);
  if (fseeko(f_, offset, SEEK_SET) != 0) file_fail(path_, "cannot seek to byte {}: {}", offset, std::strerror(errno));
  size_t got = std::fread(buf, 1, static_cast<size_t>(n), f_);
  if (got != static_cast<size_t>(n)) {
    if (std::ferror(f_)) file_fail(path_, "read error in {}: {}", what, std::strerror(errno));
    file_fail(path_, "truncated: {} needs bytes [{}, {}) but reading stopped at byte {}", what, offset, offset + n,
              offset + static_cast<int64_t>(got));
  }
}

Tensor InFile::read_tensor(int64_t offset, FileType type, bool byteswap, const Dims& shape, const std::string& what) {
  const FileTypeInfo info = file_type_info(type);
  Tensor t = Tensor::empty(shape, info.target);
  const int64_t n = t.numel();
  // Same bytes in file and memory, except bool, whose bytes must be normalised to 0/1.
  const bool direct = !byteswap && info.size == itemsize(info.target) && type != FileType::Bool;
  if (direct) {
    read_at(offset, t.raw_data(), n * info.size, what);
    return t;
  }
  // Convert in chunks so that a large conversion needs little extra memory.
  constexpr int64_t kChunk = 1 << 16;
  std::vector<unsigned char> buf(static_cast<size_t>(std::min(n, kChunk) * info.size));
  auto* out = static_cast<unsigned char*>(t.raw_data());
  for (int64_t start = 0; start < n; start += kChunk) {
    int64_t m = std::min(kChunk, n - start);
    read_at(offset + start * info.size, buf.data(), m * info.size, what);
    convert(buf.data(), type, byteswap, m, out + start * itemsize(info.target));
  }
  return t;
}

AtomicWriter::AtomicWriter(const std::string& path) : path_(path) {
  tmp_ = fmt::format("{}.tmp.{}", path, static_cast<long>(getpid()));
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) file_fail(path_, "cannot create temporary file {}: {}", tmp_, std::strerror(errno));
}

AtomicWriter::~AtomicWriter() {
  if (f_) std::fclose(f_);
  if (!committed_) std::remove(tmp_.c_str());
}

void AtomicWriter::write(const void* data, int64_t n) {
  if (n == 0) return;
  if (std::fwrite(data, 1, static_cast<size_t>(n), f_) != static_cast<size_t>(n))
    file_fail(path_, "write to {} failed: {}", tmp_, std::strerror(errno));
}

void AtomicWriter::commit() {
  // fsync before rename: otherwise a crash can leave the new name pointing at empty data.
  if (std::fflush(f_) != 0 || fsync(fileno(f_)) != 0)
    file_fail(path_, "write to {} failed: {}", tmp_, std::strerror(errno));
  std::FILE* f = f_;
  f_ = nullptr;
  if (std::fclose(f) != 0) file_fail(path_, "closing {} failed: {}", tmp_, std::strerror(errno));
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    file_fail(path_, "cannot rename {} into place: {}", tmp_, std::strerror(errno));
  committed_ = true;
}

}  // namespace attnlab::io_detail

namespace attnlab {

void write_text_atomic(const std::string& path, const std::string& text) {
  io_detail::AtomicWriter w(path);
  w.write(text.data(), static_cast<int64_t>(text.size()));
  w.commit();
}

std::string read_text(const std::string& path, int64_t max_bytes) {
  int64_t size = 0;
  const int fd = io_detail::open_regular_file(path, max_bytes, &size);
  std::string out;
  // The size from fstat is a hint: a file that grows while it is read is read up to the bound.
  out.resize(size_t(std::min<int64_t>(size, max_bytes)));
  size_t got = 0;
  for (;;) {
    if (got == out.size()) {
      if (int64_t(out.size()) >= max_bytes) {
        char extra;
        const ssize_t n = ::read(fd, &extra, 1);
        ::close(fd);
        if (n > 0) fail<FileError>("{}: grew past the {} bytes bound while being read", path, max_bytes);
        return out;
      }
      out.resize(std::min<size_t>(size_t(max_bytes), std::max<size_t>(out.size() * 2, 4096)));
    }
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail<FileError>("{}: cannot read: {}", path, std::strerror(err));
    }
    if (n == 0) break;
    got += size_t(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

}  // namespace attnlab
