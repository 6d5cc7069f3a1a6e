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
// The header is strict RFC 8259 JSON read by nlohmann-json (strings well-formed UTF-8), with
// two rules of attnlab's own: a key repeated in one object is an error (the last one would win
// silently), and nesting is capped at 64 levels.
#include <algorithm>
#include <set>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensor/io.hpp"
#include "tensor/io_common.hpp"
#include "tensor/kernels.hpp"

namespace attnlab {
namespace {

using io_detail::file_fail;
using io_detail::FileType;
using json = nlohmann::json;

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

// `name` as a JSON string literal, for messages (a byte that is not UTF-8 shows as U+FFFD).
std::string q(const std::string& name) { return json(name).dump(-1, ' ', false, json::error_handler_t::replace); }

// `text` as a JSON string literal for the header; FileError naming `what` when it is not UTF-8.
std::string header_string(const std::string& path, const std::string& text, const std::string& what) {
  try {
    return json(text).dump();
  } catch (const json::type_error&) {
    file_fail(path, "{} {} is not UTF-8 text, which a safetensors header cannot hold", what, q(text));
  }
}

const char* kind_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "a binary value";
  }
}

// The header's JSON; a syntax error names its byte, and a repeated key or nesting deeper than
// 64 levels is an error too.
json parse_header_json(const std::string& path, const std::string& text) {
  std::vector<std::set<std::string>> keys;  // the keys seen in each open object
  auto rules = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > 64) file_fail(path, "bad JSON in the header: nesting deeper than 64 levels");
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end) keys.pop_back();
    if (event == json::parse_event_t::key && !keys.back().insert(parsed.get<std::string>()).second)
      file_fail(path, "bad JSON in the header: duplicate key {}", q(parsed.get<std::string>()));
    return true;
  };
  try {
    return json::parse(text, rules);
  } catch (const json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column C: WHY"
    const std::string what = e.what();
    const size_t column = what.find("column ");
    const size_t why = column == std::string::npos ? std::string::npos : what.find(": ", column);
    const size_t at = e.byte > 0 ? e.byte - 1 : 0;  // e.byte counts the characters read
    file_fail(path, "bad JSON in the header at byte {} (file offset {}): {}", at, at + 8,
              why == std::string::npos ? what : what.substr(why + 2));
  }
}

Entry parse_entry(const std::string& path, const std::string& name, const json& v) {
  if (!v.is_object()) file_fail(path, "tensor {} is {} in the header, expected an object", q(name), kind_name(v));
  auto field = [&](const char* key, json::value_t type, const char* expected) -> const json& {
    auto f = v.find(key);
    if (f == v.end()) file_fail(path, "tensor {} has no \"{}\"", q(name), key);
    if (f->type() != type) file_fail(path, "\"{}\" of tensor {} is {}, expected {}", key, q(name), kind_name(*f), expected);
    return *f;
  };
  auto ints = [&](const json& arr, const char* key) {
    std::vector<int64_t> out;
    for (size_t i = 0; i < arr.size(); ++i) {
      const json& x = arr[i];
      const bool ok = x.is_number_unsigned() ? x.get<uint64_t>() <= uint64_t(INT64_MAX)
                                             : x.is_number_integer() && x.get<int64_t>() >= 0;
      if (!ok)
        file_fail(path, "\"{}\" of tensor {} holds a value that is not a non-negative integer (item {}: {})", key,
                  q(name), i, x.dump(-1, ' ', false, json::error_handler_t::replace));
      out.push_back(x.is_number_unsigned() ? int64_t(x.get<uint64_t>()) : x.get<int64_t>());
    }
    return out;
  };

  Entry e;
  e.name = name;
  const std::string code = field("dtype", json::value_t::string, "a string").get<std::string>();
  auto it = std::find_if(std::begin(kDTypes), std::end(kDTypes), [&](const StDType& d) { return d.code == code; });
  if (it == std::end(kDTypes))
    file_fail(path, "unsupported dtype {} of tensor {} (attnlab reads F32, F64, F16, BF16, I64, I32, I16, I8, U8, BOOL)",
              q(code), q(name));
  e.dtype = *it;
  e.shape = ints(field("shape", json::value_t::array, "an array"), "shape");
  std::vector<int64_t> offsets = ints(field("data_offsets", json::value_t::array, "an array"), "data_offsets");
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

  const json root = parse_header_json(path, text);
  if (!root.is_object()) file_fail(path, "the header is {}, expected a JSON object", kind_name(root));

  const int64_t data_start = 8 + static_cast<int64_t>(n);
  const int64_t buffer = size - data_start;
  std::vector<Entry> entries;
  Metadata meta;
  for (const auto& [name, v] : root.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) file_fail(path, "\"__metadata__\" is {}, expected an object of strings", kind_name(v));
      for (const auto& [k, s] : v.items())
        if (!s.is_string()) file_fail(path, "\"__metadata__\" value of {} is {}, expected a string", q(k), kind_name(s));
      for (const auto& [k, s] : v.items()) meta[k] = s.get<std::string>();
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
      header += fmt::format("{}{}:{}", first ? "" : ",", header_string(path, k, "metadata key"),
                            header_string(path, v, "the value of metadata key " + q(k) + ","));
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
                          header.size() > 1 ? "," : "", header_string(path, name, "tensor name"), code_of(c.dtype()),
                          shape, offset,
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
