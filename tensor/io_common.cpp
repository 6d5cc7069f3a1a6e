// File plumbing shared by io_npy.cpp and io_safetensors.cpp: checked reads, atomic writes
// (temporary file + fsync + rename, the usual POSIX recipe), and element type conversion.
#include "tensor/io_common.hpp"
#include "tensor/io.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
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

InFile::InFile(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "rb");
  if (!f_) file_fail(path, "cannot open for reading: {}", std::strerror(errno));
  struct stat st;
  if (fstat(fileno(f_), &st) != 0) {
    int err = errno;
    std::fclose(f_);
    file_fail(path, "cannot stat: {}", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    std::fclose(f_);
    file_fail(path, "is not a regular file{}", S_ISDIR(st.st_mode) ? " (it is a directory)" : "");
  }
  size_ = st.st_size;
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

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail<FileError>("{}: cannot read", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace attnlab
