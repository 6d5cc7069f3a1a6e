// NumPy .npy files (format spec: numpy/lib/format.py, NEP 1). A file is the magic
// "\x93NUMPY", a version, a header length, a Python-literal dict
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded so the data starts on a
// 64-byte boundary, then the raw elements.
//
// Read: versions 1.0, 2.0 and 3.0; descr float16/32/64, int8/16/32/64, uint8/16/32, bool, in
// either byte order. float16 widens to float32 and every integer type to int64 (uint8 too: it
// holds images and token ids more often than masks; a bool mask is saved as '|b1'). uint64,
// complex, strings, objects and structured dtypes are refused. fortran_order=True arrays are
// read as their transpose and copied into C order. The data must fill the rest of the file
// exactly: a short file is truncated, extra bytes mean corruption.
// Write: version 1.0, little-endian, C order, dtypes '<f4', '<f8', '<i8', '|b1'.
#include <string_view>

#include "tensor/io.hpp"
#include "tensor/io_common.hpp"
#include "tensor/kernels.hpp"

namespace attnlab {
namespace {

using io_detail::file_fail;
using io_detail::FileType;

constexpr std::string_view kMagic = "\x93NUMPY";

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// The header dict is a Python literal; this reads the subset np.save writes (and Python 2's
// "3L" integers), refusing anything else with the byte position of the defect.
class HeaderParser {
 public:
  HeaderParser(const std::string& path, std::string_view text, int64_t file_offset)
      : path_(path), s_(text), base_(file_offset) {}

  NpyHeader parse() {
    NpyHeader h;
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    ws();
    expect('{');
    while (true) {
      ws();
      if (peek() == '}') break;
      size_t key_at = i_;
      std::string key = string();
      ws();
      expect(':');
      ws();
      auto once = [&](bool& seen) {
        if (seen) error(key_at, "duplicate key '{}'", key);
        seen = true;
      };
      if (key == "descr") {
        once(seen_descr);
        if (peek() == '[') error(i_, "structured dtypes (a list descr) are not supported");
        h.descr = string();
      } else if (key == "fortran_order") {
        once(seen_fortran);
        h.fortran_order = boolean();
      } else if (key == "shape") {
        once(seen_shape);
        h.shape = tuple();
      } else {
        error(key_at, "unexpected key '{}' (expected descr, fortran_order, shape)", key);
      }
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != '}') error(i_, "expected ',' or '}}', found {}", shown(peek()));
    }
    ++i_;  // '}'
    ws();
    if (i_ != s_.size()) error(i_, "unexpected {} after the header dict", shown(s_[i_]));
    if (!seen_descr) error(0, "missing key 'descr'");
    if (!seen_fortran) error(0, "missing key 'fortran_order'");
    if (!seen_shape) error(0, "missing key 'shape'");
    return h;
  }

 private:
  template <class... Args>
  [[noreturn]] void error(size_t at, fmt::format_string<Args...> f, Args&&... args) {
    file_fail(path_, "bad .npy header at byte {}: {}", base_ + static_cast<int64_t>(at),
              fmt::format(f, std::forward<Args>(args)...));
  }
  // '\0' stands for the end of the text; the header never legitimately contains one.
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  static std::string shown(char c) {
    if (c == '\0') return "the end of the header";
    unsigned char u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x7f ? fmt::format("'{}'", c) : fmt::format("byte 0x{:02x}", u);
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    if (peek() != c) error(i_, "expected '{}', found {}", c, shown(peek()));
    ++i_;
  }
  std::string string() {
    char q = peek();
    if (q != '\'' && q != '"') error(i_, "expected a quoted string, found {}", shown(q));
    size_t start = i_++;
    std::string out;
    while (true) {
      if (i_ >= s_.size()) error(start, "unterminated string");
      char c = s_[i_++];
      if (c == q) return out;
      if (c == '\\') {
        if (i_ >= s_.size()) error(start, "unterminated string");
        c = s_[i_++];
      }
      out += c;
    }
  }
  bool boolean() {
    if (s_.substr(i_, 4) == "True") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return false;
    }
    error(i_, "expected True or False, found {}", shown(peek()));
  }
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> out;
    while (true) {
      ws();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') error(i_, "expected a non-negative integer in the shape, found {}", shown(peek()));
      size_t start = i_;
      int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (__builtin_mul_overflow(v, int64_t{10}, &v) || __builtin_add_overflow(v, int64_t{peek() - '0'}, &v))
          error(start, "shape entry is too large");
        ++i_;
      }
      if (peek() == 'L') ++i_;
      out.push_back(v);
      if (out.size() > static_cast<size_t>(Dims::kMax))
        error(start, "the shape has more than {} dimensions, attnlab's limit", Dims::kMax);
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != ')') error(i_, "expected ',' or ')' in the shape, found {}", shown(peek()));
    }
    ++i_;  // ')'
    return out;
  }

  const std::string& path_;
  std::string_view s_;
  int64_t base_;
  size_t i_ = 0;
};

// descr -> (element type, byte-swapped?). '=' and '|' mean native order (little-endian here).
std::pair<FileType, bool> parse_descr(const std::string& path, const std::string& descr) {
  if (descr.size() >= 2) {
    char order = descr[0];
    std::string_view code = std::string_view(descr).substr(1);
    if (order == '<' || order == '>' || order == '=' || order == '|') {
      static constexpr std::pair<std::string_view, FileType> kTable[] = {
          {"f2", FileType::F16}, {"f4", FileType::F32}, {"f8", FileType::F64}, {"i1", FileType::I8},
          {"i2", FileType::I16}, {"i4", FileType::I32}, {"i8", FileType::I64}, {"u1", FileType::U8},
          {"u2", FileType::U16}, {"u4", FileType::U32}, {"b1", FileType::Bool},
      };
      for (const auto& [c, type] : kTable)
        if (code == c) return {type, order == '>' && io_detail::file_type_info(type).size > 1};
    }
  }
  file_fail(path,
            "unsupported dtype '{}' (attnlab reads float16/32/64, int8/16/32/64, uint8/16/32 and bool)",
            descr);
}

Tensor load_npy_impl(const std::string& path) {
  io_detail::InFile f(path);
  const int64_t size = f.size();
  if (size < 10) file_fail(path, "truncated: {} bytes is too short for a .npy header (at least 10)", size);
  unsigned char pre[12] = {};
  f.read_at(0, pre, std::min<int64_t>(size, 12), "the .npy preamble");
  if (std::string_view(reinterpret_cast<const char*>(pre), 6) != kMagic)
    file_fail(path, "not a .npy file: bad magic bytes (expected \\x93NUMPY)");
  const int major = pre[6], minor = pre[7];
  int64_t header_len, header_start;
  if (major == 1 && minor == 0) {
    header_len = pre[8] | (pre[9] << 8);
    header_start = 10;
  } else if ((major == 2 || major == 3) && minor == 0) {
    if (size < 12) file_fail(path, "truncated: {} bytes is too short for a version {}.0 header", size, major);
    header_len = int64_t{pre[8]} | (int64_t{pre[9]} << 8) | (int64_t{pre[10]} << 16) | (int64_t{pre[11]} << 24);
    header_start = 12;
  } else {
    file_fail(path, "unsupported .npy format version {}.{} (attnlab reads 1.0, 2.0 and 3.0)", major, minor);
  }
  if (header_len > size - header_start)
    file_fail(path, "header length {} exceeds file size {}", header_len, size);
  std::string text(static_cast<size_t>(header_len), '\0');
  f.read_at(header_start, text.data(), header_len, "the .npy header");
  NpyHeader h = HeaderParser(path, text, header_start).parse();

  auto [type, byteswap] = parse_descr(path, h.descr);
  const auto info = io_detail::file_type_info(type);
  std::vector<int64_t> dims = h.shape;
  if (h.fortran_order) std::reverse(dims.begin(), dims.end());  // the data is the transpose, in C order
  const auto extent = io_detail::checked_extent(path, dims, info.size, "the array");
  const int64_t data_start = header_start + header_len;
  const int64_t available = size - data_start;
  const std::string what = fmt::format("shape {} {} ({} bytes)", to_string(Dims(h.shape)), info.name, extent.bytes);
  if (available < extent.bytes)
    file_fail(path, "truncated: the header declares {} but only {} data bytes follow", what, available);
  if (available > extent.bytes)
    file_fail(path, "{} unexpected bytes after the data of {}", available - extent.bytes, what);

  Tensor t = f.read_tensor(data_start, type, byteswap, Dims(dims), "the array data");
  if (!h.fortran_order || t.dim() < 2) return t;
  // Reverse the dims of the transpose back: a view with reversed strides, then a C-order copy.
  Dims shape(h.shape), strides;
  for (int d = t.dim() - 1; d >= 0; --d) strides.push_back(t.strides()[d]);
  return kernels::contiguous(t.as_strided(shape, strides, t.offset()));
}

std::string descr_of(const std::string& path, DType dtype) {
  switch (dtype) {
    case DType::Float32: return "<f4";
    case DType::Float64: return "<f8";
    case DType::Int64: return "<i8";
    case DType::Bool: return "|b1";
    case DType::BFloat16: break;  // NumPy has no bfloat16
  }
  file_fail(path, "cannot save dtype {} (NumPy has no such type; convert with .to(kFloat32) or save as safetensors)",
            dtype_name(dtype));
}

}  // namespace

Tensor load_npy(const std::string& path) {
  try {
    return load_npy_impl(path);
  } catch (const FileError&) {
    throw;
  } catch (const Error& e) {  // anything else a malformed file provokes is still a file error
    io_detail::file_fail(path, "{}", e.what());
  }
}

void save_npy(const std::string& path, const Tensor& t) {
  if (!t.defined()) file_fail(path, "cannot save an undefined tensor");
  Tensor c = kernels::contiguous(t);
  std::string shape = "(";
  for (int d = 0; d < c.dim(); ++d) shape += fmt::format("{}{}", d ? ", " : "", c.shape()[d]);
  shape += c.dim() == 1 ? ",)" : ")";
  std::string header =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr_of(path, c.dtype()), shape);
  // Like np.save: pad with spaces and end with '\n' so the data starts on a 64-byte boundary.
  const size_t prefix = kMagic.size() + 4;
  header.append(63 - (prefix + header.size()) % 64, ' ');
  header += '\n';
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<unsigned char>(header.size() & 0xff),
                           static_cast<unsigned char>(header.size() >> 8)};

  io_detail::AtomicWriter w(path);
  w.write(pre, sizeof pre);
  w.write(header.data(), static_cast<int64_t>(header.size()));
  w.write(c.raw_data(), c.numel() * itemsize(c.dtype()));
  w.commit();
}

}  // namespace attnlab
