// safetensors files (github.com/huggingface/safetensors, the format PyTorch state dicts are
// shared in): an 8-byte little-endian header length N, N bytes of JSON
//   {"__metadata__": {"k": "v"}, "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}
// and then one data buffer; offsets are relative to the buffer's start.
//
// Read: F32, F64, I64, BOOL, BF16 as themselves; I8/I16/I32 widen to int64; F16 widens to
// float32; U8 reads as bool (nonzero = true), because uint8 tensors in state dicts are masks
// (attention masks, HF "bias" buffers). Like the reference implementation, the tensors must
// tile the buffer exactly (no overlap, no gap, nothing after): that refuses polyglot and
// corrupted files. Unknown keys inside a tensor entry are ignored.
// Write: tensors sorted by name, data contiguous and back to back, the header padded with
// spaces to a multiple of 8 bytes so every tensor starts aligned, as the reference writer does.
#include <algorithm>
#include <string_view>

#include "tensor/io.hpp"
#include "tensor/io_common.hpp"
#include "tensor/json_lite.hpp"
#include "tensor/kernels.hpp"

namespace attnlab {
namespace {

using io_detail::file_fail;
using io_detail::FileType;
namespace json = json_lite;

// The reference implementation's cap; a larger header length is corruption, not a real file.
constexpr uint64_t kMaxHeader = 100'000'000;

struct StDType {
  std::string_view code;  // as written in the file
  FileType type;
  const char* name;       // for messages
};
constexpr StDType kDTypes[] = {
    {"F32", FileType::F32, "float32"}, {"F64", FileType::F64, "float64"}, {"I64", FileType::I64, "int64"},
    {"BOOL", FileType::Bool, "bool"},  {"U8", FileType::Bool, "uint8"},   {"I32", FileType::I32, "int32"},
    {"I16", FileType::I16, "int16"},   {"I8", FileType::I8, "int8"},      {"F16", FileType::F16, "float16"},
    {"BF16", FileType::BF16, "bfloat16"},
};

struct Entry {
  std::string name;
  StDType dtype;
  std::vector<int64_t> shape;
  int64_t begin, end;
};

std::string q(const std::string& name) { return json::quote(name); }

Entry parse_entry(const std::string& path, const std::string& name, const json::Value& v) {
  if (v.kind != json::Value::Kind::Object)
    file_fail(path, "tensor {} is {} in the header, expected an object", q(name), json::kind_name(v.kind));
  auto field = [&](const char* key, json::Value::Kind kind) -> const json::Value& {
    const json::Value* f = v.find(key);
    if (!f) file_fail(path, "tensor {} has no \"{}\"", q(name), key);
    if (f->kind != kind)
      file_fail(path, "\"{}\" of tensor {} is {}, expected {}", key, q(name), json::kind_name(f->kind),
                json::kind_name(kind));
    return *f;
  };
  auto ints = [&](const json::Value& arr, const char* key) {
    std::vector<int64_t> out;
    for (const json::Value& x : arr.array) {
      if (x.kind != json::Value::Kind::Number || !x.is_integer || x.integer < 0)
        file_fail(path, "\"{}\" of tensor {} holds a value that is not a non-negative integer (JSON byte {})", key,
                  q(name), x.offset);
      out.push_back(x.integer);
    }
    return out;
  };

  Entry e;
  e.name = name;
  const std::string& code = field("dtype", json::Value::Kind::String).string;
  auto it = std::find_if(std::begin(kDTypes), std::end(kDTypes), [&](const StDType& d) { return d.code == code; });
  if (it == std::end(kDTypes))
    file_fail(path, "unsupported dtype {} of tensor {} (attnlab reads F32, F64, F16, BF16, I64, I32, I16, I8, U8, BOOL)",
              q(code), q(name));
  e.dtype = *it;
  e.shape = ints(field("shape", json::Value::Kind::Array), "shape");
  std::vector<int64_t> offsets = ints(field("data_offsets", json::Value::Kind::Array), "data_offsets");
  if (offsets.size() != 2)
    file_fail(path, "\"data_offsets\" of tensor {} has {} entries, expected 2", q(name), offsets.size());
  e.begin = offsets[0];
  e.end = offsets[1];
  return e;
}

// A validated header: the tensors in byte order (tiling the data buffer exactly) and the metadata.
struct Header {
  std::vector<Entry> entries;
  Metadata meta;
  int64_t data_start = 0;  // file offset of the data buffer
};

Header read_header(io_detail::InFile& f, const std::string& path) {
  const int64_t size = f.size();
  if (size < 8) file_fail(path, "truncated: {} bytes is too short for the 8-byte header length", size);
  unsigned char len_bytes[8];
  f.read_at(0, len_bytes, 8, "the header length");
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = n << 8 | len_bytes[k];
  if (n > static_cast<uint64_t>(size - 8)) file_fail(path, "header length {} exceeds file size {}", n, size);
  if (n > kMaxHeader) file_fail(path, "header length {} exceeds the {}-byte limit", n, kMaxHeader);
  std::string text(n, '\0');
  f.read_at(8, text.data(), static_cast<int64_t>(n), "the header");

  json::Value root;
  try {
    root = json::parse(text);
  } catch (const json::ParseError& e) {
    file_fail(path, "bad JSON in the header at byte {} (file offset {}): {}", e.offset, e.offset + 8, e.what());
  }
  if (root.kind != json::Value::Kind::Object)
    file_fail(path, "the header is {}, expected a JSON object", json::kind_name(root.kind));

  const int64_t data_start = 8 + static_cast<int64_t>(n);
  const int64_t buffer = size - data_start;
  std::vector<Entry> entries;
  Metadata meta;
  for (const auto& [name, v] : root.object) {
    if (name == "__metadata__") {
      if (v.kind != json::Value::Kind::Object)
        file_fail(path, "\"__metadata__\" is {}, expected an object of strings", json::kind_name(v.kind));
      for (const auto& [k, s] : v.object)
        if (s.kind != json::Value::Kind::String)
          file_fail(path, "\"__metadata__\" value of {} is {}, expected a string", q(k), json::kind_name(s.kind));
      for (const auto& [k, s] : v.object) meta[k] = s.string;
      continue;
    }
    Entry e = parse_entry(path, name, v);
    const auto info = io_detail::file_type_info(e.dtype.type);
    const auto extent = io_detail::checked_extent(path, e.shape, info.size, "tensor " + q(name));
    const std::string offsets = fmt::format("data_offsets [{}, {}] of tensor {}", e.begin, e.end, q(name));
    if (e.end < e.begin) file_fail(path, "{} are reversed", offsets);
    if (e.end > buffer) file_fail(path, "{} exceed the data buffer of {} bytes", offsets, buffer);
    if (e.end - e.begin != extent.bytes)
      file_fail(path, "{} do not match shape {} {} ({} bytes)", offsets, to_string(Dims(e.shape)), e.dtype.name,
                extent.bytes);
    entries.push_back(std::move(e));
  }

  // The tensors must tile [0, buffer) exactly.
  std::vector<const Entry*> order;
  for (const Entry& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(),
            [](const Entry* a, const Entry* b) { return std::pair(a->begin, a->end) < std::pair(b->begin, b->end); });
  int64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : order) {
    if (e->begin < covered)
      file_fail(path, "data_offsets [{}, {}] of tensor {} overlap those of tensor {} [{}, {}]", e->begin, e->end,
                q(e->name), q(prev->name), prev->begin, prev->end);
    if (e->begin > covered)
      file_fail(path, "data_offsets [{}, {}] of tensor {} leave a gap: bytes [{}, {}) belong to no tensor", e->begin,
                e->end, q(e->name), covered, e->begin);
    covered = e->end;
    prev = e;
  }
  if (covered != buffer)
    file_fail(path, "the data buffer has {} bytes but the tensors cover only {}: {} unexpected bytes at the end",
              buffer, covered, buffer - covered);

  Header h;
  for (const Entry* e : order) h.entries.push_back(*e);
  h.meta = std::move(meta);
  h.data_start = data_start;
  return h;
}

TensorMap load_impl(const std::string& path, Metadata* metadata) {
  io_detail::InFile f(path);
  Header h = read_header(f, path);
  TensorMap out;
  for (const Entry& e : h.entries)
    out[e.name] = f.read_tensor(h.data_start + e.begin, e.dtype.type, false, Dims(e.shape), "tensor " + q(e.name));
  if (metadata) *metadata = std::move(h.meta);
  return out;
}

std::map<std::string, Dims> shapes_impl(const std::string& path, Metadata* metadata) {
  io_detail::InFile f(path);
  Header h = read_header(f, path);
  std::map<std::string, Dims> out;
  for (const Entry& e : h.entries) out[e.name] = Dims(e.shape);
  if (metadata) *metadata = std::move(h.meta);
  return out;
}

// Any error a malformed file provokes is a FileError naming the path.
template <class F>
auto as_file_error(const std::string& path, F&& body) {
  try {
    return body();
  } catch (const FileError&) {
    throw;
  } catch (const Error& e) {
    file_fail(path, "{}", e.what());
  }
}

const char* code_of(DType t) {
  switch (t) {
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    case DType::Int64: return "I64";
    case DType::Bool: return "BOOL";
    case DType::BFloat16: return "BF16";
  }
  return "?";
}

}  // namespace

TensorMap load_safetensors(const std::string& path, Metadata* metadata) {
  return as_file_error(path, [&] { return load_impl(path, metadata); });
}

std::map<std::string, Dims> safetensors_shapes(const std::string& path, Metadata* metadata) {
  return as_file_error(path, [&] { return shapes_impl(path, metadata); });
}

void save_safetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata) {
  std::vector<Tensor> data;  // contiguous copies, in name order (std::map order = byte order)
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      header += fmt::format("{}{}:{}", first ? "" : ",", json::quote(k), json::quote(v));
      first = false;
    }
    header += "}";
  }
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") file_fail(path, "a tensor may not be named \"__metadata__\"");
    if (!t.defined()) file_fail(path, "tensor {} is undefined", q(name));
    Tensor c = kernels::contiguous(t);
    const int64_t bytes = c.numel() * itemsize(c.dtype());
    std::string shape;
    for (int d = 0; d < c.dim(); ++d) shape += fmt::format("{}{}", d ? "," : "", c.shape()[d]);
    header += fmt::format("{}{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                          header.size() > 1 ? "," : "", json::quote(name), code_of(c.dtype()), shape, offset,
                          offset + bytes);
    offset += bytes;
    data.push_back(std::move(c));
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  unsigned char len_bytes[8];
  for (int k = 0; k < 8; ++k) len_bytes[k] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * k));

  io_detail::AtomicWriter w(path);
  w.write(len_bytes, 8);
  w.write(header.data(), static_cast<int64_t>(header.size()));
  for (const Tensor& c : data) w.write(c.raw_data(), c.numel() * itemsize(c.dtype()));
  w.commit();
}

}  // namespace attnlab
