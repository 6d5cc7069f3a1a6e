/// @file
/// Reading and writing tensors: NumPy .npy files and safetensors files (name -> tensor maps,
/// the format PyTorch state dicts are shared in). Files are written to `path + ".tmp.<pid>"`
/// and renamed into place, so a crash never leaves a half-written file. Every failure (missing
/// file, malformed or truncated file, failed write) throws FileError whose message starts with
/// the path and names the defect. docs/io.md has the details.
///
/// dtypes read (file -> attnlab); writing uses only the first four (.npy) or five (safetensors):
///   .npy:        <f4 float32, <f8 float64, <i8 int64, |b1 bool; f2 -> float32;
///                i1/i2/i4 and u1/u2/u4 -> int64 (uint8 too: bytes are pixels or ids as often
///                as masks; bool masks are saved as |b1). Either byte order, versions 1.0-3.0,
///                fortran_order=True (copied into C order). Written as version 1.0, C order.
///   safetensors: F32, F64, I64, BOOL, BF16 bfloat16; F16 -> float32; I8/I16/I32 -> int64;
///                U8 -> bool (nonzero = true: uint8 tensors in state dicts are attention masks).
/// A bool byte other than 0/1 reads as true. 0-d and empty tensors round-trip in both formats.
/// @ingroup tensor
#pragma once
#include <map>
#include <string>

#include "tensor/tensor.hpp"

/// @addtogroup tensor
/// @{
namespace attnlab {

/// A tensor read from a .npy file (dtypes as above); FileError naming the path and the defect.
Tensor load_npy(const std::string& path);
/// Any layout is written in C order.
void save_npy(const std::string& path, const Tensor& t);

using TensorMap = std::map<std::string, Tensor>;  ///< name -> tensor, as in a safetensors file or a state dict
using Metadata = std::map<std::string, std::string>;  ///< a safetensors file's string metadata

/// Reads every tensor; `metadata` (optional) receives the file's "__metadata__" strings (empty
/// when the file has none). The tensors must tile the data buffer exactly, as the format requires.
TensorMap load_safetensors(const std::string& path, Metadata* metadata = nullptr);
/// The shape of every tensor, from the header alone (checked as load_safetensors checks it; no
/// tensor data is read): to compare a file with a model before allocating anything.
std::map<std::string, Dims> safetensors_shapes(const std::string& path, Metadata* metadata = nullptr);
/// Writes tensors sorted by name (any layout; stored C-contiguous), the header padded with spaces
/// to a multiple of 8 bytes, as the reference writer does.
void save_safetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata = {});

/// Writes `text` to `path` atomically (a temporary file, fsync, rename): a reader sees the old
/// file or the new one, never a half-written one. Errors are FileError naming the path.
void write_text_atomic(const std::string& path, const std::string& text);
/// The whole file as bytes, under the rule of docs/io.md ("Files read whole"): `path` must be a
/// regular file (a link to /dev/zero, a FIFO or a directory is refused before anything is read)
/// of at most `max_bytes` bytes (checked with stat before reading). FileError starting with the
/// path: what the file is, or its size and the bound, or why it cannot be read.
inline constexpr int64_t kDefaultTextBound = int64_t(64) << 20;  ///< 64 MiB
std::string read_text(const std::string& path, int64_t max_bytes = kDefaultTextBound);

}  // namespace attnlab
/// @}
