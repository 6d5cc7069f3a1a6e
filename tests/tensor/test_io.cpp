// Tensor I/O (tensor/io.hpp): .npy and safetensors round trips for every dtype and layout,
// files written by NumPy and by tests/reference/safetensors_lite.py, the error for each kind
// of malformed file, truncation/corruption loops that must only ever throw FileError, atomic
// writes, and (when python3 with NumPy is installed) files attnlab writes checked by NumPy
// and torch through tests/reference/io_reference.py --verify.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "helpers.hpp"
#include "tensor/io_common.hpp"
#include "tensor/kernels.hpp"

using namespace attnlab;
using namespace attnlab::testing;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the system temp dir, removed with everything in it.
struct TempDir {
  fs::path root;
  TempDir() {
    static int counter = 0;
    root = fs::temp_directory_path() / fmt::format("attnlab_test_io_{}_{}", static_cast<long>(getpid()), counter++);
    fs::remove_all(root);
    fs::create_directories(root);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  std::string operator/(const std::string& name) const { return (root / name).string(); }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from a header text and a data buffer.
std::string st_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int k = 0; k < 8; ++k) out[k] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * k));
  return out + header + data;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Runs f, which must throw FileError whose message starts with `path` and contains each word.
template <class F>
void check_file_error(F&& f, const std::string& path, std::initializer_list<std::string> words) {
  std::string msg;
  bool file_error = false;
  try {
    f();
  } catch (const FileError& e) {
    msg = e.what();
    file_error = true;
  } catch (const std::exception& e) {
    msg = e.what();
  }
  INFO("message: " << msg);
  REQUIRE(file_error);
  CHECK(msg.rfind(path, 0) == 0);
  for (const auto& w : words) CHECK_MESSAGE(contains(msg, w), "missing word: " << w);
}

// Same dtype and shape and exactly the same values (NaN matches NaN, -0 matches -0).
void check_exact(const Tensor& t, DType dtype, const Dims& shape, const std::vector<double>& want) {
  REQUIRE(t.defined());
  CHECK(t.dtype() == dtype);
  REQUIRE(t.shape() == shape);
  CHECK(t.is_contiguous());
  auto got = t.to_vector<double>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else {
      CHECK(got[i] == want[i]);
      CHECK(std::signbit(got[i]) == std::signbit(want[i]));
    }
  }
}

// Same dtype, shape and values as `want` (any layout).
void check_same(const Tensor& got, const Tensor& want) {
  check_exact(got, want.dtype(), want.shape(), want.to_vector<double>());
}

std::vector<double> iota(int n, double scale = 1, double shift = 0) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(i * scale + shift);
  return v;
}

template <class T>
Tensor tensor_of(const std::vector<double>& v, const Dims& shape) {
  return from_vector(std::vector<T>(v.begin(), v.end()), shape);
}

// The recipe of EXPECTED in tests/reference/io_reference.py.
TensorMap expected_tensors() {
  TensorMap m;
  m["f32"] = tensor_of<float>(iota(6, 0.25, -0.5), {2, 3});
  m["f64"] = tensor_of<double>(iota(24, 0.125, -1), {2, 3, 4});
  std::vector<int64_t> i64;
  for (int i = 0; i < 8; ++i) i64.push_back((i - 3) * int64_t{1000000007});
  m["i64"] = from_vector(i64, {8});
  std::vector<bool> b;
  for (int i = 0; i < 7; ++i) b.push_back(i % 3 == 0);
  m["bool"] = from_vector(b, {7});
  m["scalar"] = scalar_tensor(2.5, kFloat32);
  m["empty"] = Tensor::empty({0, 3}, kFloat32);
  return m;
}
const Metadata kMetadata = {{"format", "pt"},
                            {"note", "quote \" backslash \\ newline \n tab \t caf\xc3\xa9 \xf0\x9f\x99\x82"}};

// Inputs of every dtype and layout: contiguous, 0-d, empty, transposed, offset, broadcast.
TensorMap round_trip_inputs() {
  TensorMap m = expected_tensors();
  Tensor base = tensor_of<double>(iota(12, 1.5, -4), {3, 4});
  m["transposed_f64"] = base.as_strided({4, 3}, {1, 4}, 0);
  m["offset_f64"] = base.as_strided({2, 2}, {4, 1}, 5);
  m["expanded_i64"] = tensor_of<int64_t>({7, -8, 9}, {3}).as_strided({2, 3}, {0, 1}, 0);
  m["strided_bool"] = from_vector(std::vector<bool>{true, false, false, true, true, false}, {6}).as_strided({3}, {2}, 0);
  m["scalar_i64"] = scalar_tensor(-42, kInt64);
  m["scalar_bool"] = scalar_tensor(1, kBool);
  m["scalar_f64"] = scalar_tensor(-0.0, kFloat64);
  m["empty_i64"] = Tensor::empty({2, 0, 5}, kInt64);
  m["empty_bool"] = Tensor::empty({0}, kBool);
  m["specials_f32"] = tensor_of<float>({INFINITY, -INFINITY, NAN, -0.0, 1e-45, 3.4028235e38}, {6});
  m["big_i64"] = from_vector(std::vector<int64_t>{INT64_MIN, INT64_MAX, -1, 0}, {2, 2});
  return m;
}

std::string ref_file(const std::string& name) { return std::string(ATTNLAB_REFERENCE_DIR) + "/io/" + name; }

}  // namespace

TEST_CASE("io: npy round trip for every dtype and layout") {
  TempDir dir;
  for (const auto& [name, t] : round_trip_inputs()) {
    INFO(name);
    std::string path = dir / (name + ".npy");
    save_npy(path, t);
    check_same(load_npy(path), t);
    CHECK(read_bytes(path).size() % 64 == (t.numel() * itemsize(t.dtype())) % 64);  // data 64-byte aligned
  }
}

TEST_CASE("io: npy header matches what np.save writes") {
  TempDir dir;
  save_npy(dir / "a.npy", tensor_of<float>(iota(6), {2, 3}));
  std::string bytes = read_bytes(dir / "a.npy");
  REQUIRE(bytes.size() == 128 + 24);
  CHECK(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  CHECK(bytes.substr(10, 118) ==
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(58, ' ') + "\n");
  save_npy(dir / "b.npy", tensor_of<bool>({1, 0}, {2}));
  CHECK(contains(read_bytes(dir / "b.npy"), "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }"));
  save_npy(dir / "c.npy", scalar_tensor(3, kInt64));
  CHECK(contains(read_bytes(dir / "c.npy"), "{'descr': '<i8', 'fortran_order': False, 'shape': (), }"));
}

TEST_CASE("io: safetensors round trip with metadata") {
  TempDir dir;
  TensorMap in = round_trip_inputs();
  std::string path = dir / "m.safetensors";
  save_safetensors(path, in, kMetadata);
  Metadata meta = {{"stale", "entry"}};
  TensorMap out = load_safetensors(path, &meta);
  CHECK(meta == kMetadata);
  REQUIRE(out.size() == in.size());
  for (const auto& [name, t] : in) {
    INFO(name);
    REQUIRE(out.count(name) == 1);
    check_same(out.at(name), t);
  }

  // No metadata written: the out-parameter is cleared. An empty map is a valid file too.
  save_safetensors(path, {{"x", scalar_tensor(1)}});
  load_safetensors(path, &meta);
  CHECK(meta.empty());
  save_safetensors(path, {});
  CHECK(load_safetensors(path).empty());
  CHECK(read_bytes(path).size() == 16);  // length + "{}" padded to 8
}

TEST_CASE("io: safetensors layout is sorted, packed and 8-byte aligned") {
  TempDir dir;
  std::string path = dir / "l.safetensors";
  save_safetensors(path, {{"b", tensor_of<float>({1, 2, 3}, {3})}, {"a", scalar_tensor(5, kInt64)}}, {{"k", "v"}});
  std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = n << 8 | static_cast<unsigned char>(bytes[k]);
  CHECK(n % 8 == 0);
  REQUIRE(bytes.size() == 8 + n + 8 + 12);
  std::string header = bytes.substr(8, n);
  CHECK(header ==
        R"({"__metadata__":{"k":"v"},"a":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
        R"("b":{"dtype":"F32","shape":[3],"data_offsets":[8,20]}})" + std::string(n - 132, ' '));
  int64_t five;
  std::memcpy(&five, bytes.data() + 8 + n, 8);
  CHECK(five == 5);
}

TEST_CASE("io: npy reads files NumPy wrote") {
  TensorMap want = expected_tensors();
  for (const auto& [name, t] : want) {
    INFO(name);
    check_same(load_npy(ref_file("numpy_" + name + ".npy")), t);
  }
  check_same(load_npy(ref_file("numpy_fortran.npy")), want["f64"]);  // fortran_order=True
  check_exact(load_npy(ref_file("numpy_bool_fortran.npy")), kBool, {2, 3}, {0, 1, 0, 1, 0, 1});
  check_exact(load_npy(ref_file("numpy_f64_bigendian.npy")), kFloat64, {5}, iota(5, 0.25));
  check_exact(load_npy(ref_file("numpy_i32.npy")), kInt64, {6}, iota(6, 100000, -300000));
  check_exact(load_npy(ref_file("numpy_u8.npy")), kInt64, {5}, {0, 1, 127, 200, 255});
  check_exact(load_npy(ref_file("numpy_f16.npy")), kFloat32, {10},
              {0.0, -0.0, 1.0, -2.5, 65504.0, std::ldexp(1, -14), std::ldexp(1, -24), INFINITY, -INFINITY, NAN});
}

TEST_CASE("io: safetensors reads files the Python writer wrote") {
  Metadata meta;
  TensorMap got = load_safetensors(ref_file("python.safetensors"), &meta);
  CHECK(meta == kMetadata);
  TensorMap want = expected_tensors();
  REQUIRE(got.size() == want.size());
  for (const auto& [name, t] : want) {
    INFO(name);
    check_same(got.at(name), t);
  }

  TensorMap extra = load_safetensors(ref_file("python_extra.safetensors"), &meta);
  CHECK(meta.empty());
  check_exact(extra.at("mask_u8"), kBool, {2, 3}, {1, 0, 1, 0, 1, 1});  // U8: nonzero = true
  check_exact(extra.at("i32"), kInt64, {2, 3}, iota(6, 100000, -300000));
  check_exact(extra.at("f16"), kFloat32, {10},
              {0.0, -0.0, 1.0, -2.5, 65504.0, std::ldexp(1, -14), std::ldexp(1, -24), INFINITY, -INFINITY, NAN});
  check_exact(extra.at("bf16"), kBFloat16, {7}, {1.0, -2.0, 0.5, 3.140625, INFINITY, -0.0, std::ldexp(1, -130)});
  // Every stored byte is 0 or 1, so the bools are real bools.
  const auto* bytes = static_cast<const unsigned char*>(extra.at("mask_u8").raw_data());
  for (int i = 0; i < 6; ++i) CHECK(bytes[i] <= 1);
}

TEST_CASE("io: float16 and bfloat16 conversion matches the IEEE formula for all bit patterns") {
  for (uint32_t h = 0; h < 65536; ++h) {
    int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
    double want = exp == 0    ? std::ldexp(mant, -24)
                  : exp == 31 ? (mant ? NAN : INFINITY)
                              : std::ldexp(1024 + mant, exp - 25);
    if (sign) want = -want;
    float got = io_detail::half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
    } else if (got != want || std::signbit(got) != std::signbit(want)) {
      FAIL_CHECK("float16 0x" << std::hex << h << ": got " << got << ", want " << want);
    }
    float b = bfloat16_bits_to_float(static_cast<uint16_t>(h));
    uint32_t bits;
    std::memcpy(&bits, &b, 4);
    if (bits != h << 16) FAIL_CHECK("bfloat16 0x" << std::hex << h);
  }
}

TEST_CASE("io: npy malformed files name the path and the defect") {
  TempDir dir;
  std::string path = dir / "x.npy";
  std::string good = read_bytes(ref_file("numpy_f32.npy"));  // (2, 3) float32, 128-byte header
  auto with_header = [&](const std::string& dict) {
    std::string h = dict;
    h.append(117 - h.size(), ' ');
    h += '\n';
    return std::string("\x93NUMPY\x01\x00\x76\x00", 10) + h + good.substr(128);
  };
  auto load = [&] { load_npy(path); };

  check_file_error([&] { load_npy(dir / "missing.npy"); }, dir / "missing.npy", {"cannot open", "No such file"});
  check_file_error([&] { load_npy(dir.root.string()); }, dir.root.string(), {"directory"});
  write_bytes(path, "");
  check_file_error(load, path, {"truncated", "0 bytes"});
  write_bytes(path, "PK\x03\x04 this is a zip file");
  check_file_error(load, path, {"magic"});
  write_bytes(path, std::string("\x93NUMPY\x04\x00", 8) + good.substr(8));
  check_file_error(load, path, {"version 4.0"});
  write_bytes(path, std::string("\x93NUMPY\x01\x00\xff\x7f", 10) + good.substr(10));
  check_file_error(load, path, {"header length 32767 exceeds file size 152"});
  write_bytes(path, with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)"));
  check_file_error(load, path, {"bad .npy header at byte", "expected ',' or '}'"});
  write_bytes(path, with_header("{'descr': '<c8', 'fortran_order': False, 'shape': (2, 3), }"));
  check_file_error(load, path, {"unsupported dtype '<c8'"});
  write_bytes(path, with_header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3), }"));
  check_file_error(load, path, {"structured"});
  write_bytes(path, with_header("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3), }"));
  check_file_error(load, path, {"True or False"});
  write_bytes(path, with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }"));
  check_file_error(load, path, {"non-negative integer"});
  write_bytes(path, with_header("{'descr': '<f4', 'shape': (2, 3), }"));
  check_file_error(load, path, {"missing key 'fortran_order'"});
  write_bytes(path, with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1, }"));
  check_file_error(load, path, {"unexpected key 'x'"});
  write_bytes(path, with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'shape': (6,), }"));
  check_file_error(load, path, {"duplicate key 'shape'"});
  write_bytes(path, with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,6), }"));
  check_file_error(load, path, {"more than 8 dimensions"});
  write_bytes(path, with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }"));
  check_file_error(load, path, {"overflows"});
  write_bytes(path, with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }"));
  check_file_error(load, path, {"truncated", "shape (2,4) float32 (32 bytes)", "24 data bytes"});
  write_bytes(path, with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }"));
  check_file_error(load, path, {"4 unexpected bytes after the data"});
  write_bytes(path, good.substr(0, good.size() - 1));
  check_file_error(load, path, {"truncated"});

  // Python 2 long integers and double quotes are still the header dict np.load accepts.
  write_bytes(path, with_header("{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2L, 3L)}"));
  check_exact(load_npy(path), kFloat32, {2, 3}, iota(6, 0.25, -0.5));
  // Version 2.0: a 4-byte header length.
  write_bytes(path, std::string("\x93NUMPY\x02\x00\x74\x00\x00\x00", 12) + good.substr(10, 116) + good.substr(128));
  check_exact(load_npy(path), kFloat32, {2, 3}, iota(6, 0.25, -0.5));
  // A bool byte other than 0/1 reads as true and is stored as 1.
  std::string b = read_bytes(ref_file("numpy_bool.npy"));
  b[b.size() - 1] = 7;
  write_bytes(path, b);
  Tensor t = load_npy(path);
  CHECK(static_cast<const unsigned char*>(t.raw_data())[6] == 1);

  // Saving an undefined tensor fails before touching the disk.
  check_file_error([&] { save_npy(dir / "u.npy", Tensor()); }, dir / "u.npy", {"undefined"});
  CHECK(!fs::exists(dir / "u.npy"));
}

TEST_CASE("io: safetensors malformed files name the path and the defect") {
  TempDir dir;
  std::string path = dir / "x.safetensors";
  const std::string w24(24, '\0');
  auto write = [&](const std::string& header, const std::string& data) { write_bytes(path, st_file(header, data)); };
  auto load = [&] { load_safetensors(path); };

  check_file_error([&] { load_safetensors(dir / "none.safetensors"); }, dir / "none.safetensors", {"cannot open"});
  write_bytes(path, "abc");
  check_file_error(load, path, {"truncated", "3 bytes"});
  std::string huge = st_file("{}", std::string(110, ' '));
  huge[0] = '\x7f';
  huge[1] = '\x96';
  huge[2] = '\x98';  // 9999999
  write_bytes(path, huge);
  check_file_error(load, path, {"header length 9999999 exceeds file size 120"});

  write(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},})", w24);
  check_file_error(load, path, {"bad JSON", "at byte 57", "file offset 65", "expected string literal"});
  write(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})", w24);
  check_file_error(load, path, {"bad JSON", "unexpected end of input"});
  write(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}} x)", w24);
  check_file_error(load, path, {"bad JSON", "expected end of input"});
  write(R"({"w\ud800":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", w24);
  check_file_error(load, path, {"bad JSON", "surrogate"});
  // Raw bytes in strings must be well-formed UTF-8: a stray continuation byte, a truncated
  // sequence, an overlong form, an encoded surrogate, a code point past U+10FFFF.
  for (std::string bad : {"\x80", "\xc3", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff"}) {
    CAPTURE(bad.size());
    write("{\"w" + bad + "\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", w24);
    check_file_error(load, path, {"bad JSON", "ill-formed UTF-8"});
    write("{\"__metadata__\":{\"k\":\"v" + bad + "\"}}", "");
    check_file_error(load, path, {"bad JSON", "ill-formed UTF-8"});
  }
  write("{\"w\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", w24);
  CHECK(load_safetensors(path).count("w\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80") == 1);  // é € and an emoji
  write(R"({"w":1,"w":2})", "");
  check_file_error(load, path, {"bad JSON", "duplicate key \"w\""});
  write(std::string(200, '[') + std::string(200, ']'), "");
  check_file_error(load, path, {"bad JSON", "nesting deeper than 64"});
  write(R"([1,2])", "");
  check_file_error(load, path, {"an array, expected a JSON object"});
  write(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,12]}})", std::string(12, '\0'));
  check_file_error(load, path, {R"(data_offsets [0, 12] of tensor "w" do not match shape (2,3) float32 (24 bytes))"});
  write(R"({"w":{"dtype":"C64","shape":[3],"data_offsets":[0,24]}})", w24);
  check_file_error(load, path, {"unsupported dtype \"C64\"", "\"w\""});
  write(R"({"w":{"dtype":"F32","shape":[2,3]}})", w24);
  check_file_error(load, path, {"tensor \"w\" has no \"data_offsets\""});
  write(R"({"w":{"dtype":"F32","shape":"2x3","data_offsets":[0,24]}})", w24);
  check_file_error(load, path, {"\"shape\" of tensor \"w\" is a string, expected an array"});
  write(R"({"w":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,24]}})", w24);
  check_file_error(load, path, {"non-negative integer"});
  write(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,24]}})", w24);
  check_file_error(load, path, {"non-negative integer"});
  write(R"({"w":{"dtype":"F32","shape":[99999999999,99999999999],"data_offsets":[0,24]}})", w24);
  check_file_error(load, path, {"overflows"});
  write(R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,6],"data_offsets":[0,24]}})", w24);
  check_file_error(load, path, {"9 dimensions"});
  write(R"({"w":{"dtype":"F32","shape":[6],"data_offsets":[0,24,48]}})", w24);
  check_file_error(load, path, {"3 entries, expected 2"});
  write(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", w24);
  check_file_error(load, path, {"reversed"});
  write(R"({"w":{"dtype":"F32","shape":[6],"data_offsets":[8,32]}})", w24);
  check_file_error(load, path, {"data_offsets [8, 32] of tensor \"w\" exceed the data buffer of 24 bytes"});
  write(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
        w24);
  check_file_error(load, path, {"overlap", "\"a\"", "\"b\""});
  write(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})",
        w24);
  check_file_error(load, path, {"gap", "bytes [8, 16)"});
  write(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", w24);
  check_file_error(load, path, {"8 unexpected bytes at the end"});
  write(R"({"__metadata__":{"n":1},"w":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}})", w24);
  check_file_error(load, path, {"\"__metadata__\" value of \"n\" is a number, expected a string"});
  write(R"({"w":[1,2]})", w24);
  check_file_error(load, path, {"tensor \"w\" is an array in the header, expected an object"});

  check_file_error([&] { save_safetensors(dir / "s.safetensors", {{"__metadata__", scalar_tensor(1)}}); },
                   dir / "s.safetensors", {"__metadata__"});
  check_file_error([&] { save_safetensors(dir / "s.safetensors", {{"w", Tensor()}}); }, dir / "s.safetensors",
                   {"\"w\" is undefined"});
  CHECK(!fs::exists(dir / "s.safetensors"));
}

TEST_CASE("io: safetensors JSON escapes, unknown fields and odd values") {
  TempDir dir;
  std::string path = dir / "j.safetensors";
  // \u escapes (with a surrogate pair) decode to UTF-8; unknown fields of any JSON kind are skipped;
  // a BOOL byte other than 0/1 and U8 values above 1 read as true.
  write_bytes(path, st_file(R"( { "w\u00e9\ud83d\ude42\n" : {"data_offsets": [ 0 , 4 ], "extra": [1.5e3, -0.0, true, false,)"
                            R"( null, {"a": "\"\\\/\b\f\r\t"}], "shape": [], "dtype": "F32"},)"
                            "\n\t\r"
                            R"("m": {"dtype": "U8", "shape": [3], "data_offsets": [4, 7]},)"
                            R"("b": {"dtype": "BOOL", "shape": [2], "data_offsets": [7, 9]}} )",
                            std::string("\x00\x00\x80\x3f\x00\x02\xff\x05\x00", 9)));
  TensorMap m = load_safetensors(path);
  REQUIRE(m.size() == 3);
  REQUIRE(m.count("w\xc3\xa9\xf0\x9f\x99\x82\n") == 1);
  check_exact(m.at("w\xc3\xa9\xf0\x9f\x99\x82\n"), kFloat32, {}, {1.0});
  check_exact(m.at("m"), kBool, {3}, {0, 1, 1});
  check_exact(m.at("b"), kBool, {2}, {1, 0});
  CHECK(static_cast<const unsigned char*>(m.at("b").raw_data())[0] == 1);

  // Names and metadata with quotes, control characters and UTF-8 survive a round trip.
  std::string odd = std::string("a\"b\\c\x01\x1f/\xe2\x82\xac") + '\0' + "z";
  save_safetensors(path, {{odd, scalar_tensor(3)}, {"", scalar_tensor(4)}}, {{odd, odd}, {"", ""}});
  Metadata meta;
  TensorMap r = load_safetensors(path, &meta);
  CHECK(r.at(odd).item() == 3);
  CHECK(r.at("").item() == 4);
  CHECK(meta == Metadata{{odd, odd}, {"", ""}});

  // A name or metadata text that is not UTF-8 cannot go into the header: refused before writing.
  const std::string kept = read_bytes(path);
  check_file_error([&] { save_safetensors(path, {{"w\xff", scalar_tensor(1)}}); }, path,
                   {"tensor name \"w\xef\xbf\xbd\" is not UTF-8 text"});
  check_file_error([&] { save_safetensors(path, {{"w", scalar_tensor(1)}}, {{"k", "v\xc3"}}); }, path,
                   {"the value of metadata key \"k\", \"v\xef\xbf\xbd\" is not UTF-8 text"});
  CHECK(read_bytes(path) == kept);
}

TEST_CASE("io: truncated or corrupted files only ever throw FileError") {
  TempDir dir;
  TensorMap small = {{"a", tensor_of<float>({1, 2, 3}, {3})},
                     {"b", tensor_of<int64_t>({4, 5}, {1, 2})},
                     {"c", scalar_tensor(1, kBool)}};
  save_safetensors(dir / "st.valid", small, {{"k", "v"}});
  save_npy(dir / "npy.valid", tensor_of<double>(iota(6), {3, 2}));

  struct Format {
    std::string valid;
    std::function<void(const std::string&)> load;
    size_t header_end;
  };
  std::string st = read_bytes(dir / "st.valid"), npy = read_bytes(dir / "npy.valid");
  std::vector<Format> formats = {
      {st, [](const std::string& p) { load_safetensors(p); }, st.size() - 29},
      {npy, [](const std::string& p) { load_npy(p); }, 128},
  };
  std::string path = dir / "fuzz";
  int loaded = 0, rejected = 0;
  auto attempt = [&](const Format& f, const std::string& bytes, bool must_fail, const std::string& what) {
    fs::remove(path);  // a new file each time: truncating one in place makes ext4 flush it to disk
    write_bytes(path, bytes);
    try {
      f.load(path);
      ++loaded;
      if (must_fail) FAIL_CHECK(what << ": loaded without error");
    } catch (const FileError& e) {
      ++rejected;
      if (std::string(e.what()).rfind(path, 0) != 0) FAIL_CHECK(what << ": message lacks the path: " << e.what());
    } catch (const std::exception& e) {
      FAIL_CHECK(what << ": threw a non-FileError: " << e.what());
    }
  };
  for (const Format& f : formats) {
    for (size_t len = 0; len < f.valid.size(); ++len)
      attempt(f, f.valid.substr(0, len), true, fmt::format("truncated to {} of {} bytes", len, f.valid.size()));
    for (size_t pos = 0; pos < f.header_end; ++pos) {
      for (unsigned char mask : {0x01, 0x08, 0x20, 0x80, 0xff}) {
        std::string bytes = f.valid;
        bytes[pos] = static_cast<char>(bytes[pos] ^ mask);
        attempt(f, bytes, false, fmt::format("byte {} ^ 0x{:02x}", pos, mask));
      }
    }
    Generator gen(7);  // a few multi-byte corruptions as well
    for (int trial = 0; trial < 200; ++trial) {
      std::string bytes = f.valid;
      Tensor r = randint(0, 256, {8}, gen);
      for (int k = 0; k < 4; ++k)
        bytes[static_cast<size_t>(r.at({2 * k})) * f.header_end / 256] = static_cast<char>(r.at({2 * k + 1}));
      attempt(f, bytes, false, fmt::format("random corruption {}", trial));
    }
  }
  MESSAGE(loaded << " corrupted files loaded, " << rejected << " rejected");
  CHECK(rejected > 1000);
}

TEST_CASE("io: writes are atomic") {
  TempDir dir;
  auto leftovers = [&] {
    std::vector<std::string> tmp;
    for (const auto& e : fs::recursive_directory_iterator(dir.root))
      if (contains(e.path().filename().string(), ".tmp.")) tmp.push_back(e.path().string());
    return tmp;
  };
  Tensor t = tensor_of<float>(iota(1000), {10, 100});

  // A directory that does not exist: nothing is created.
  std::string missing = dir / "no/such/dir/x.npy";
  check_file_error([&] { save_npy(missing, t); }, missing, {"cannot create temporary file", "No such file"});
  check_file_error([&] { save_safetensors(missing, {{"t", t}}); }, missing, {"No such file"});
  CHECK(!fs::exists(dir / "no"));

  // The target is a directory: the temporary file is written, the rename fails, and the
  // temporary file is removed again.
  fs::create_directories(dir / "occupied");
  check_file_error([&] { save_npy(dir / "occupied", t); }, dir / "occupied", {"cannot rename"});
  check_file_error([&] { save_safetensors(dir / "occupied", {{"t", t}}); }, dir / "occupied", {"cannot rename"});
  CHECK(fs::is_directory(dir / "occupied"));
  CHECK(leftovers().empty());

  // Saving over an existing, larger file replaces it completely.
  for (auto [name, save, load] :
       {std::tuple{"o.npy", std::function([](const std::string& p, const Tensor& x) { save_npy(p, x); }),
                   std::function([](const std::string& p) { return load_npy(p); })},
        std::tuple{"o.safetensors",
                   std::function([](const std::string& p, const Tensor& x) { save_safetensors(p, {{"x", x}}); }),
                   std::function([](const std::string& p) { return load_safetensors(p).at("x"); })}}) {
    std::string path = dir / name;
    save(path, t);
    auto big = fs::file_size(path);
    Tensor small = tensor_of<int64_t>({1, 2, 3}, {3});
    save(path, small);
    CHECK(fs::file_size(path) < big);
    check_same(load(path), small);
  }
  CHECK(leftovers().empty());
}

TEST_CASE("io: files attnlab writes load in NumPy and torch") {
  // The pyenv shim may shadow the system python3 that has NumPy, so try both.
  std::string python;
  for (const char* candidate : {"python3", "/usr/bin/python3"}) {
    if (std::system(fmt::format("{} -c \"import numpy\" >/dev/null 2>&1", candidate).c_str()) == 0) {
      python = candidate;
      break;
    }
  }
  if (python.empty()) {
    MESSAGE("python3 with NumPy is not installed: skipping the NumPy/torch interop check");
    return;
  }
  TempDir dir;
  TensorMap m = expected_tensors();
  // Non-contiguous sources for two of them: the files must still hold C-order data.
  Tensor f64t = kernels::contiguous(m["f64"].as_strided({4, 3, 2}, {1, 4, 12}, 0));  // (4, 3, 2), transposed data
  m["f64"] = f64t.as_strided({2, 3, 4}, {1, 2, 6}, 0);
  std::vector<int64_t> interleaved;  // the values at even positions, junk at odd ones
  for (int64_t v : m["i64"].to_vector<int64_t>()) interleaved.insert(interleaved.end(), {v, -1});
  m["i64"] = from_vector(interleaved, {16}).as_strided({8}, {2}, 0);
  for (const auto& [name, t] : m) save_npy(dir / (name + ".npy"), t);
  save_safetensors(dir / "all.safetensors", m, kMetadata);
  std::string cmd = fmt::format("{} {}/io_reference.py --verify {}", python, ATTNLAB_REFERENCE_DIR, dir.root.string());
  INFO(cmd);
  CHECK(std::system(cmd.c_str()) == 0);
}

TEST_CASE("io: safetensors_shapes reads names, shapes and metadata from the header alone, checked as a load is") {
  TempDir dir;
  TensorMap in = round_trip_inputs();
  std::string path = dir / "s.safetensors";
  save_safetensors(path, in, kMetadata);
  Metadata meta;
  std::map<std::string, Dims> shapes = safetensors_shapes(path, &meta);
  CHECK(meta == kMetadata);
  REQUIRE(shapes.size() == in.size());
  for (const auto& [name, t] : in) {
    INFO(name);
    REQUIRE(shapes.count(name) == 1);
    CHECK(shapes.at(name) == t.shape());
  }
  // A file whose data is cut short fails from its header, without reading any data.
  std::string bytes = read_bytes(path);
  write_bytes(path, bytes.substr(0, bytes.size() - 4));
  CHECK_THROWS_AS(safetensors_shapes(path), FileError);
}
