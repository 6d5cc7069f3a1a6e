// The process group and its collectives (distributed.hpp). Without ATTNLAB_WITH_MPI every
// function keeps the world at one rank.
#include "dist/distributed.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#ifdef ATTNLAB_WITH_MPI
#include <mpi.h>
#endif

#include "tensor/kernels.hpp"
#include "tensor/parallel.hpp"

namespace attnlab::dist {
namespace {

struct World {
  bool started = false;  // this module called MPI_Init
  int rank = 0;
  int size = 1;
  CommStats stats;
};

World& world() {
  static World w;
  return w;
}

// Byte strings for broadcast(TensorMap&): appended and read in order.
template <class T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <class T>
T take(const std::string& in, size_t& pos) {
  if (pos + sizeof(T) > in.size()) fail<ValueError>("dist::broadcast: truncated tensor map ({} bytes)", in.size());
  T v;
  std::memcpy(&v, in.data() + pos, sizeof v);
  pos += sizeof v;
  return v;
}

// name, dtype, rank of the shape, the shape, then the row-major data, per tensor.
std::string serialize(const TensorMap& tensors) {
  std::string out;
  put(out, uint64_t(tensors.size()));
  for (const auto& [name, t] : tensors) {
    const Tensor c = kernels::contiguous(t);
    put(out, uint64_t(name.size()));
    out += name;
    put(out, uint8_t(c.dtype()));
    put(out, uint64_t(c.dim()));
    for (int64_t d : c.shape()) put(out, d);
    out.append(static_cast<const char*>(c.raw_data()), size_t(c.numel() * itemsize(c.dtype())));
  }
  return out;
}

TensorMap deserialize(const std::string& in) {
  TensorMap out;
  size_t pos = 0;
  const auto count = take<uint64_t>(in, pos);
  for (uint64_t i = 0; i < count; ++i) {
    const auto len = take<uint64_t>(in, pos);
    if (pos + len > in.size()) fail<ValueError>("dist::broadcast: truncated tensor map ({} bytes)", in.size());
    std::string name = in.substr(pos, len);
    pos += len;
    const auto dtype = DType(take<uint8_t>(in, pos));
    const auto ndim = take<uint64_t>(in, pos);
    if (ndim > 8) fail<ValueError>("dist::broadcast: tensor '{}' has {} dimensions, at most 8", name, ndim);
    std::vector<int64_t> dims(ndim);
    for (int64_t& d : dims) d = take<int64_t>(in, pos);
    Tensor t = Tensor::empty(Dims(dims), dtype);
    const size_t bytes = size_t(t.numel() * itemsize(dtype));
    if (pos + bytes > in.size()) fail<ValueError>("dist::broadcast: truncated tensor map ({} bytes)", in.size());
    std::memcpy(t.raw_data(), in.data() + pos, bytes);
    pos += bytes;
    out.emplace(std::move(name), std::move(t));
  }
  return out;
}

#ifdef ATTNLAB_WITH_MPI
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Times one collective into the stats.
template <class F>
void timed(int64_t bytes, F&& call) {
  const double t0 = now();
  call();
  CommStats& s = world().stats;
  s.seconds += now() - t0;
  s.bytes += bytes;
  ++s.calls;
}

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  fail<Error>("dist: {} failed: {}", what, std::string(text, size_t(len)));
}

// Ranks sharing this node (MPI-3 shared-memory split).
int local_size() {
  MPI_Comm node;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  int n = 1;
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return n;
}

// MPI counts are int: large payloads go in chunks.
constexpr int64_t kMaxCount = int64_t(1) << 30;
#endif

}  // namespace

bool built_with_mpi() {
#ifdef ATTNLAB_WITH_MPI
  return true;
#else
  return false;
#endif
}

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(var)) return true;
  return false;
}

void init() {
#ifdef ATTNLAB_WITH_MPI
  World& w = world();
  if (w.started || !launched_by_mpi()) return;
  int already = 0;
  MPI_Initialized(&already);
  if (already) return;
  int provided = 0;
  // Only the main thread calls MPI; the oneTBB workers never do.
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  w.started = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  if (w.size > 1 && !std::getenv("ATTNLAB_NUM_THREADS"))
    set_num_threads(std::max(1, int(std::thread::hardware_concurrency()) / local_size()));
#endif
}

void finalize() {
#ifdef ATTNLAB_WITH_MPI
  World& w = world();
  if (!w.started) return;
  MPI_Finalize();
  w = World{};
#endif
}

int rank() { return world().rank; }
int world_size() { return world().size; }

CommStats comm_stats() { return world().stats; }
void reset_comm_stats() { world().stats = CommStats{}; }

void all_reduce_sum(const std::vector<Tensor>& tensors, int64_t bucket_bytes) {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!tensors[i].defined() || tensors[i].dtype() != kFloat32 || !tensors[i].is_contiguous())
      fail<ValueError>("dist::all_reduce_sum: tensor {} of {} is not a defined contiguous float32 tensor", i,
                       tensors.size());
  if (bucket_bytes < int64_t(sizeof(float)))
    fail<ValueError>("dist::all_reduce_sum: bucket_bytes = {}, expected at least {}", bucket_bytes, sizeof(float));
#ifdef ATTNLAB_WITH_MPI
  if (world().size == 1) return;
  const int64_t capacity = std::min(bucket_bytes / int64_t(sizeof(float)), kMaxCount);
  std::vector<float> bucket(static_cast<size_t>(capacity));
  // The (tensor, first element, count) pieces packed in the bucket.
  struct Piece {
    float* data;
    int64_t count;
  };
  std::vector<Piece> pieces;
  int64_t used = 0;
  auto flush = [&] {
    if (used == 0) return;
    int64_t at = 0;
    for (const Piece& p : pieces) std::memcpy(bucket.data() + std::exchange(at, at + p.count), p.data, p.count * sizeof(float));
    timed(used * int64_t(sizeof(float)), [&] {
      check(MPI_Allreduce(MPI_IN_PLACE, bucket.data(), int(used), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    });
    at = 0;
    for (const Piece& p : pieces) std::memcpy(p.data, bucket.data() + std::exchange(at, at + p.count), p.count * sizeof(float));
    pieces.clear();
    used = 0;
  };
  for (const Tensor& t : tensors) {
    float* data = t.data<float>();
    for (int64_t left = t.numel(); left > 0;) {
      const int64_t n = std::min(left, capacity - used);
      pieces.push_back({data, n});
      data += n;
      left -= n;
      used += n;
      if (used == capacity) flush();
    }
  }
  flush();
#endif
}

void all_reduce_sum(std::vector<double>& values) {
#ifdef ATTNLAB_WITH_MPI
  if (world().size == 1 || values.empty()) return;
  timed(int64_t(values.size() * sizeof(double)), [&] {
    check(MPI_Allreduce(MPI_IN_PLACE, values.data(), int(values.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
          "MPI_Allreduce");
  });
#else
  (void)values;
#endif
}

int64_t broadcast(int64_t value) {
#ifdef ATTNLAB_WITH_MPI
  if (world().size > 1)
    timed(sizeof value, [&] { check(MPI_Bcast(&value, 1, MPI_INT64_T, 0, MPI_COMM_WORLD), "MPI_Bcast"); });
#endif
  return value;
}

void broadcast(std::string& bytes) {
#ifdef ATTNLAB_WITH_MPI
  if (world().size == 1) return;
  const int64_t size = broadcast(int64_t(bytes.size()));
  bytes.resize(size_t(size));
  for (int64_t at = 0; at < size; at += kMaxCount) {
    const int n = int(std::min(kMaxCount, size - at));
    timed(n, [&] { check(MPI_Bcast(bytes.data() + at, n, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast"); });
  }
#else
  (void)bytes;
#endif
}

void broadcast(TensorMap& tensors) {
  if (world_size() == 1) return;
  std::string bytes = is_root() ? serialize(tensors) : std::string();
  broadcast(bytes);
  if (!is_root()) tensors = deserialize(bytes);
}

void abort(int status) {
#ifdef ATTNLAB_WITH_MPI
  if (world().started) MPI_Abort(MPI_COMM_WORLD, status);
#endif
  std::exit(status);
}

}  // namespace attnlab::dist
