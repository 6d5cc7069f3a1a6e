#include "experiments/data/text.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tensor/creation.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::data {
namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;  // the 64-bit FNV offset basis
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;  // the 64-bit FNV prime
  }
  return h;
}

std::vector<std::string> read_fortunes(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail<FileError>("{}: not found; the text comes from the Debian package fortunes (apt-get install fortunes)", dir);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const auto ext = e.path().extension();
    if (e.is_regular_file() && ext != ".dat" && ext != ".u8") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> fortunes;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    std::string line, cur;
    while (std::getline(in, line)) {
      if (line == "%") {
        if (!cur.empty()) fortunes.push_back(cur);
        cur.clear();
      } else {
        cur += line + "\n";
      }
    }
    if (!cur.empty()) fortunes.push_back(cur);
  }
  if (fortunes.empty()) fail<FileError>("{}: no fortunes found (is the package fortunes installed?)", dir);
  return fortunes;
}

}  // namespace

TextCorpus load_fortunes(const std::string& level, const std::string& dir) {
  if (level != "char" && level != "byte")
    fail<ValueError>("load_fortunes: level must be char or byte, got {}", level);
  std::string train, val;
  TextCorpus c;
  for (const std::string& f : read_fortunes(dir)) {
    const bool to_val = fnv1a(f) % 10 == 0;
    (to_val ? c.val_docs : c.train_docs).push_back(int64_t((to_val ? val : train).size()));
    (to_val ? val : train) += f;
  }
  c.id_of.assign(256, 0);
  if (level == "byte") {
    for (int b = 0; b < 256; ++b) {
      c.id_of[b] = b;
      c.byte_of.push_back(static_cast<unsigned char>(b));
    }
  } else {
    std::vector<bool> seen(256, false);
    for (unsigned char ch : train) seen[ch] = true;
    c.has_unk = true;
    c.byte_of.push_back(0);  // <unk>
    for (int b = 0; b < 256; ++b)
      if (seen[b]) {
        c.id_of[b] = static_cast<int>(c.byte_of.size());
        c.byte_of.push_back(static_cast<unsigned char>(b));
      }
  }
  c.train = c.encode(train);
  c.val = c.encode(val);
  return c;
}

Tensor TextCorpus::encode(const std::string& text) const {
  Tensor t = Tensor::empty({static_cast<int64_t>(text.size())}, kInt64);
  int64_t* p = t.data<int64_t>();
  for (size_t i = 0; i < text.size(); ++i) p[i] = id_of[static_cast<unsigned char>(text[i])];
  return t;
}

std::string TextCorpus::decode(const Tensor& ids) const {
  std::string s;
  for (int64_t id : ids.to_vector<int64_t>()) {
    if (id < 0 || id >= vocab_size()) fail<IndexError>("decode: token id {} is outside the vocabulary ({})", id, vocab_size());
    s += (has_unk && id == 0) ? '?' : static_cast<char>(byte_of[id]);
  }
  return s;
}

std::pair<Tensor, Tensor> lm_batch(const Tensor& tokens, int64_t batch, int64_t seq_len, Generator& gen) {
  const int64_t T = tokens.numel();
  if (batch < 1 || seq_len < 1)
    fail<ValueError>("lm_batch: need batch >= 1 and seq_len >= 1, got batch {}, seq_len {}", batch, seq_len);
  if (tokens.dim() != 1 || tokens.dtype() != kInt64 || T < seq_len + 1)
    fail<ShapeError>("lm_batch: need int64 (T) tokens with T > seq_len = {}, got {} {}", seq_len,
                     dtype_name(tokens.dtype()), to_string(tokens.shape()));
  Tensor starts = randint(0, T - seq_len, {batch}, gen);
  Tensor x = Tensor::empty({batch, seq_len}, kInt64), y = Tensor::empty({batch, seq_len}, kInt64);
  const Tensor flat = kernels::contiguous(tokens);
  const int64_t* src = flat.data<int64_t>();
  const int64_t* s = starts.data<int64_t>();
  int64_t *px = x.data<int64_t>(), *py = y.data<int64_t>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t n = 0; n < seq_len; ++n) {
      px[b * seq_len + n] = src[s[b] + n];
      py[b * seq_len + n] = src[s[b] + n + 1];
    }
  return {x, y};
}

PackedBatch lm_packed_batch(const Tensor& tokens, const std::vector<int64_t>& docs, int64_t batch, int64_t seq_len,
                            Generator& gen) {
  const int64_t T = tokens.numel(), D = int64_t(docs.size());
  if (batch < 1 || seq_len < 1)
    fail<ValueError>("lm_packed_batch: need batch >= 1 and seq_len >= 1, got batch {}, seq_len {}", batch, seq_len);
  if (tokens.dim() != 1 || tokens.dtype() != kInt64)
    fail<ShapeError>("lm_packed_batch: need int64 (T) tokens, got {} {}", dtype_name(tokens.dtype()),
                     to_string(tokens.shape()));
  if (D == 0 || docs[0] != 0 || !std::is_sorted(docs.begin(), docs.end()) || docs.back() >= T)
    fail<ValueError>("lm_packed_batch: need document starts ascending from 0 and below T = {}, got {} of them", T, D);
  const Tensor flat = kernels::contiguous(tokens);
  const int64_t* src = flat.data<int64_t>();
  PackedBatch out{Tensor::empty({batch, seq_len}, kInt64), Tensor::empty({batch, seq_len}, kInt64),
                  Tensor::empty({batch, seq_len}, kInt64)};
  int64_t *px = out.inputs.data<int64_t>(), *py = out.targets.data<int64_t>(), *ps = out.segment_ids.data<int64_t>();
  std::vector<int64_t> row(seq_len + 1), seg(seq_len + 1);  // N + 1 tokens and their document index
  for (int64_t b = 0; b < batch; ++b) {
    int64_t filled = 0;
    for (int64_t segment = 0; filled <= seq_len; ++segment) {
      const int64_t d = int64_t(gen.next_u64() % uint64_t(D));  // a document, uniformly
      const int64_t start = docs[d], end = d + 1 < D ? docs[d + 1] : T;
      for (int64_t i = start; i < end && filled <= seq_len; ++i, ++filled) row[filled] = src[i], seg[filled] = segment;
    }
    for (int64_t n = 0; n < seq_len; ++n) {
      px[b * seq_len + n] = row[n];
      py[b * seq_len + n] = row[n + 1];
      ps[b * seq_len + n] = seg[n];
    }
  }
  return out;
}

}  // namespace attnlab::data
